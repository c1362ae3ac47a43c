//! The spec of RAttention from primitive tape ops: RoPE, the reference SWA, the linear branch
//! unrolled over time as a masked quadratic form, `o_rla_t = sum_{s <= t-W} (phi(q_t) ·
//! phi(k_s)) v_s` (which is `phi(q_t) S_{t-W}`), the two RMSNorms and the sum. For tests.
use super::Config;
use crate::mixers::attention::reference::{repeat_kv, swa};
use crate::mixers::attention::shape;
use swax_autograd::Tape;
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::{Result, Tensor, CAUSAL};

/// `RMS(o_swa) + RMS(o_rla)` with the scales `norm_swa`, `norm_rla` (each `[D]`).
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
    let (qr, kr) = match cfg.rope {
        Some(r) => (
            tape.rope(q, r.offset, r.theta)?,
            tape.rope(k, r.offset, r.theta)?,
        ),
        None => (q.clone(), k.clone()),
    };
    let o_swa = swa(tape, &qr, &kr, v, cfg.window, cfg.scale)?;
    let o_rla = linear(tape, q, k, v, dims, cfg.window)?;
    tape.add(
        &tape.rms_norm(&o_swa, norm_swa, cfg.eps)?,
        &tape.rms_norm(&o_rla, norm_rla, cfg.eps)?,
    )
}

/// `[softmax(x), softmax(-x)]` over the last axis.
pub fn feature(tape: &Tape, x: &Tensor) -> Result<Tensor> {
    tape.concat(&[&tape.softmax(x)?, &tape.softmax(&tape.neg(x)?)?], -1)
}

/// The residual linear attention: each query against the keys older than its window.
pub fn linear(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    dims: AttnShape,
    window: usize,
) -> Result<Tensor> {
    let heads_first = |x: &Tensor| tape.permute(x, &[0, 2, 1, 3]);
    let fq = heads_first(&feature(tape, q)?)?;
    let fk = heads_first(&repeat_kv(tape, &feature(tape, k)?, dims)?)?;
    let v = heads_first(&repeat_kv(tape, v, dims)?)?;
    let scores = tape.matmul_t(&fq, &fk, false, true)?;
    // Keys s <= t - W: all causal ones minus the window's band.
    let older = tape.sub(
        &tape.masked_fill_band(&scores, CAUSAL, 0.0)?,
        &tape.masked_fill_band(&scores, window, 0.0)?,
    )?;
    tape.permute(&tape.matmul(&older, &v)?, &[0, 2, 1, 3])
}
