//! The output norms of the recurrent mixer layers: Gated DeltaNet's RMSNorm gated by swish(g),
//! composed from the tape's fused norm and recomputed in the backward (`Tape::recompute`), and
//! xLSTM's per-head LayerNorm and its sigmoid output gate, one fused node. Both keep their
//! inputs, not the norm's and the gate's outputs, each as large as the input.
//!
//! The gated head norm is one model's op, so it is not a `Backend` primitive but a `DeviceOp`
//! of its own, as the fused mixers are: `kernel.rs` (its operands, checks and the hand-off to a
//! device), `cpu.rs`, `cuda.rs` (over swax-cuda's `kernels::norm`, source `norm.cu`). With x
//! and o `[.., H, D]`, weight `[H, D]`, each row of D in head h:
//!
//! ```text
//! xhat = (x − mean(x)) · rstd,  rstd = 1 / sqrt(var(x) + eps)   (biased variance, over D)
//! s    = sigmoid(o)
//! y    = xhat · weight[h] · s
//! ```
//!
//! The backward recomputes mean and rstd from x; with g = dy · s · weight[h], the gradient
//! reaching xhat:
//!
//! ```text
//! dx         = rstd · (g − mean(g) − xhat · mean(g · xhat))
//! do         = dy · xhat · weight[h] · s · (1 − s)
//! dweight[h] = Σ over the head's rows of dy · s · xhat
//! ```
//!
//! Statistics and products are computed in f32 (f64 for f64 operands) and each result rounded
//! once to the operands' dtype.
mod cpu;
mod cuda;
mod kernel;

pub use kernel::{
    gated_head_norm, gated_head_norm_backward, GatedHeadNormBackward, GatedHeadNormGrads,
    GatedHeadNormIn,
};

use swax_autograd::Tape;
use swax_tensor::{Error, Result, Tensor};

/// `rms_norm(o, weight) · silu(g)` over the last axis: o and g of one shape `[.., D]`, weight
/// `[D]`.
pub fn gated_rms_norm(
    tape: &Tape,
    o: &Tensor,
    g: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    if o.shape() != g.shape() {
        return Err(Error::ShapeMismatch {
            op: "gated_rms_norm",
            lhs: o.shape().clone(),
            rhs: g.shape().clone(),
        });
    }
    tape.recompute("gated_rms_norm", &[o, g, weight], move |tape, x| {
        tape.mul(&tape.rms_norm(&x[0], &x[2], eps)?, &tape.silu(&x[1])?)
    })
}

/// `head_layer_norm(x, weight) · sigmoid(o)`: the mLSTM layer's normed, gated read-out, x and
/// o `[.., H, D]`, weight `[H, D]`: one fused node that keeps x, o and the weight, no
/// intermediate; its backward recomputes the row statistics from them.
pub fn gated_head_layer_norm(
    tape: &Tape,
    x: &Tensor,
    o: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    let input = GatedHeadNormIn { x, o, weight };
    let y = gated_head_norm(&input, eps)?;
    let saved: GatedHeadNormIn = input.try_map(|t| Ok((*t).clone()))?;
    Ok(
        tape.record("gated_head_norm", &[x, o, weight], y, move |dy, _| {
            let g = gated_head_norm_backward(
                &GatedHeadNormBackward {
                    input: saved.try_map(Ok)?,
                    dy,
                },
                eps,
            )?;
            Ok(vec![Some(g.x), Some(g.o), Some(g.weight)])
        }),
    )
}

/// LayerNorm over D within each head of x `[.., H, D]`, then a weight (and bias) `[H, D]` per
/// head and channel: xLSTM's multi-head norm. The fused LayerNorm runs with unit weight and zero
/// bias (constants, untracked); the per-head affine map follows.
pub fn head_layer_norm(
    tape: &Tape,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let r = x.rank();
    let fits = |p: &Tensor| r >= 2 && p.dims() == &x.dims()[r - 2..];
    if let Some(bad) = [Some(weight), bias]
        .into_iter()
        .flatten()
        .find(|p| !fits(p))
    {
        return Err(Error::ShapeMismatch {
            op: "head_layer_norm",
            lhs: x.shape().clone(),
            rhs: bad.shape().clone(),
        });
    }
    let d = x.dims()[r - 1];
    let ones = Tensor::ones(vec![d], x.dtype(), x.device())?;
    let zeros = Tensor::zeros(vec![d], x.dtype(), x.device())?;
    let y = tape.mul(&tape.layer_norm(x, &ones, &zeros, eps)?, weight)?;
    match bias {
        Some(b) => tape.add(&y, b),
        None => Ok(y),
    }
}
