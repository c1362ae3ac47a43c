//! The output norms of the recurrent mixer layers: Gated DeltaNet's RMSNorm gated by swish(g),
//! composed from the tape's fused norm and recomputed in the backward (`Tape::recompute`), and
//! xLSTM's per-head LayerNorm and its sigmoid output gate, one fused node. Both keep their
//! inputs, not the norm's and the gate's outputs, each as large as the input.
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
/// o `[.., H, D]`, weight `[H, D]`: one fused node, whose backward recomputes the row
/// statistics from the inputs it keeps.
pub fn gated_head_layer_norm(
    tape: &Tape,
    x: &Tensor,
    o: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    tape.gated_head_norm(x, o, weight, eps)
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
