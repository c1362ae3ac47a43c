//! Sliding-window attention as one tape node over the tiled CPU (or device) kernels. The node
//! saves q, k, v, the output and the per-row log-sum-exp `[B, H, T]`; its backward recomputes
//! the attention probabilities from them (nothing of size T × W is kept).
use super::default_scale;
use swax_autograd::Tape;
use swax_tensor::{Result, Tensor};

/// Same arguments and result as `reference::swa`.
pub fn swa(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    window: usize,
    scale: Option<f64>,
) -> Result<Tensor> {
    // The head dim, when q has one: `Tensor::swa` checks every shape.
    let d = q.dims().last().copied().unwrap_or(1);
    let scale = scale.unwrap_or_else(|| default_scale(d));
    let (o, lse) = q.swa(k, v, window, scale)?;
    let (sq, sk, sv, so) = (q.clone(), k.clone(), v.clone(), o.clone());
    Ok(tape.record("swa", &[q, k, v], o, move |dout, _| {
        let (dq, dk, dv) = sq.swa_backward(&sk, &sv, &so, &lse, dout, window, scale)?;
        Ok(vec![Some(dq), Some(dk), Some(dv)])
    }))
}
