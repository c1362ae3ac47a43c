//! The spec of sliding-window attention: scores, a band mask, a softmax, a weighted sum of
//! values, each a primitive tape op. Quadratic in T; for tests.
use super::{default_scale, shape};
use swax_autograd::Tape;
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::{Result, Tensor};

/// `o_t = sum_s softmax_s(scale · q_t · k_s) v_s` over `t - window < s <= t`.
pub fn swa(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    window: usize,
    scale: Option<f64>,
) -> Result<Tensor> {
    let dims = shape("swa", q, k, v, window)?;
    let scale = scale.unwrap_or_else(|| default_scale(dims.d));
    let heads_first = |x: &Tensor| tape.permute(x, &[0, 2, 1, 3]);
    let q = heads_first(q)?;
    let k = heads_first(&repeat_kv(tape, k, dims)?)?;
    let v = heads_first(&repeat_kv(tape, v, dims)?)?;
    let scores = tape.scale(&tape.matmul_t(&q, &k, false, true)?, scale)?;
    let scores = tape.masked_fill_band(&scores, window, f64::NEG_INFINITY)?;
    let o = tape.matmul(&tape.softmax(&scores)?, &v)?;
    tape.permute(&o, &[0, 2, 1, 3])
}

/// `[B, T, Hkv, F]` to `[B, T, H, F]`, each kv head repeated for the H / Hkv q heads that read
/// it (its gradient sums over them). F is D, or a feature dim.
pub fn repeat_kv(tape: &Tape, x: &Tensor, dims: AttnShape) -> Result<Tensor> {
    let AttnShape { b, t, h, hkv, .. } = dims;
    let d = x.dims()[3];
    let x = tape.reshape(x, [b, t, hkv, 1, d])?;
    let x = tape.broadcast_to(&x, [b, t, hkv, h / hkv, d])?;
    tape.reshape(&x, [b, t, h, d])
}
