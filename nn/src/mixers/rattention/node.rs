//! RAttention as one tape node: RoPE, the tiled SWA kernel, the chunkwise linear-branch kernel
//! (feature map fused), both RMSNorms (their fused kernels) and the sum, forward and backward.
//!
//! The node saves q, k, v, the roped q and k, both branch outputs before their norms, the SWA
//! log-sum-exp `[B, H, T]`, the norms' scales and per-row rstd. Nothing of size T × W or T × D²
//! is kept: the backward recomputes attention probabilities from the lse and the linear branch's
//! chunk states from k and v.
use super::Config;
use crate::mixers::attention::default_scale;
use swax_autograd::Tape;
use swax_tensor::backend::AttnDims;
use swax_tensor::{Result, Tensor};

/// Same arguments and result as `reference::rattention`.
pub fn rattention(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    norm_swa: &Tensor,
    norm_rla: &Tensor,
    cfg: &Config,
) -> Result<Tensor> {
    let dims = AttnDims::check("rattention", q, k, v, cfg.window)?;
    let Config {
        window,
        rope,
        eps,
        chunk,
        ..
    } = *cfg;
    let scale = cfg.scale.unwrap_or_else(|| default_scale(dims.d));
    let (qr, kr) = match rope {
        Some(r) => (q.rope(r.offset, r.theta)?, k.rope(r.offset, r.theta)?),
        None => (q.clone(), k.clone()),
    };
    let (o_swa, lse) = qr.swa(&kr, v, window, scale)?;
    let o_rla = q.rla(k, v, window, chunk)?;
    let (y_swa, stats_swa) = o_swa.rms_norm(norm_swa, eps)?;
    let (y_rla, stats_rla) = o_rla.rms_norm(norm_rla, eps)?;
    let y = y_swa.add(&y_rla)?;
    let (q_, k_, v_) = (q.clone(), k.clone(), v.clone());
    let (w_swa, w_rla) = (norm_swa.clone(), norm_rla.clone());
    let inputs = [q, k, v, norm_swa, norm_rla];
    Ok(tape.record("rattention", &inputs, y, move |dy, _| {
        let (do_swa, dw_swa) = o_swa.rms_norm_backward(&w_swa, &stats_swa, dy)?;
        let (do_rla, dw_rla) = o_rla.rms_norm_backward(&w_rla, &stats_rla, dy)?;
        let (dqr, dkr, dv_swa) = qr.swa_backward(&kr, &v_, &o_swa, &lse, &do_swa, window, scale)?;
        let (dq_swa, dk_swa) = match rope {
            Some(r) => (
                dqr.rope_backward(r.offset, r.theta)?,
                dkr.rope_backward(r.offset, r.theta)?,
            ),
            None => (dqr, dkr),
        };
        let (dq_rla, dk_rla, dv_rla) = q_.rla_backward(&k_, &v_, &do_rla, window, chunk)?;
        Ok(vec![
            Some(dq_swa.add(&dq_rla)?),
            Some(dk_swa.add(&dk_rla)?),
            Some(dv_swa.add(&dv_rla)?),
            Some(dw_swa),
            Some(dw_rla),
        ])
    }))
}
