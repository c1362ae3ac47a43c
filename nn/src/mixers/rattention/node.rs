//! RAttention as one tape node: RoPE, the tiled SWA kernel, the chunkwise linear-branch kernel
//! (feature map fused), both RMSNorms (their fused kernels) and the sum, forward and backward.
//! The sums ride in other passes: the second norm adds the first's output, and RoPE's backward
//! adds the linear branch's dq and dk (each a pass over [B, T, H, D] saved).
//!
//! The node saves q, k, v, the roped q and k, both branch outputs before their norms, the SWA
//! log-sum-exp `[B, H, T]`, the norms' scales and per-row rstd, and on CUDA the linear branch's
//! features phi(q), phi(k) (bf16 `[.., 2D]`: making them again slowed its backward more than
//! keeping them costs in memory).
//! Nothing of size T × W or T × D² is kept: the backward recomputes attention probabilities
//! from the lse and the linear branch's chunk states from k and v.
use super::kernel::{self as rla, Features, RlaBackward};
use super::Config;
use crate::mixers::attention::{self as swa, default_scale, shape, SwaBackward, SwaIn};
use swax_autograd::Tape;
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
    let dims = shape("rattention", q, k, v, cfg.window)?;
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
    let swa_in = SwaIn { q: &qr, k: &kr, v };
    let out_swa = swa::forward(&swa_in, window, scale)?;
    let o_swa = out_swa.o.clone();
    let (o_rla, features) = rla::forward_keeping_features(&SwaIn { q, k, v }, window, chunk)?;
    let (y_swa, stats_swa) = o_swa.rms_norm(norm_swa, eps)?;
    let (y, stats_rla) = o_rla.rms_norm_add(norm_rla, eps, &y_swa)?;
    let saved_swa: SwaIn = swa_in.try_map(|t| Ok((*t).clone()))?;
    let saved: SwaIn = SwaIn { q, k, v }.try_map(|t| Ok((*t).clone()))?;
    let (w_swa, w_rla) = (norm_swa.clone(), norm_rla.clone());
    let inputs = [q, k, v, norm_swa, norm_rla];
    Ok(tape.record("rattention", &inputs, y, move |dy, _| {
        let (do_swa, dw_swa) = o_swa.rms_norm_backward(&w_swa, &stats_swa, dy, None)?;
        let (do_rla, dw_rla) = o_rla.rms_norm_backward(&w_rla, &stats_rla, dy, None)?;
        let g_swa = swa::backward(
            &SwaBackward {
                input: saved_swa.try_map(Ok)?,
                out: out_swa.try_map(Ok)?,
                dout: &do_swa,
            },
            window,
            scale,
        )?;
        let g_rla = rla::backward(
            &RlaBackward {
                input: saved.try_map(Ok)?,
                dout: &do_rla,
                features: features.as_ref().map(|f| Features { q: &f.q, k: &f.k }),
            },
            window,
            chunk,
        )?;
        // The linear branch's dq and dk join SWA's in RoPE's backward pass.
        let (dq, dk) = match rope {
            Some(r) => (
                g_swa.q.rope_backward(r.offset, r.theta, Some(&g_rla.q))?,
                g_swa.k.rope_backward(r.offset, r.theta, Some(&g_rla.k))?,
            ),
            None => (g_swa.q.add(&g_rla.q)?, g_swa.k.add(&g_rla.k)?),
        };
        Ok(vec![
            Some(dq),
            Some(dk),
            Some(g_swa.v.add(&g_rla.v)?),
            Some(dw_swa),
            Some(dw_rla),
        ])
    }))
}
