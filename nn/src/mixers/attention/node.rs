//! Sliding-window attention as one tape node over the fused kernel (`kernel.rs`). The node
//! saves q, k, v, the output and the per-row log-sum-exp `[B, H, T]`; its backward recomputes
//! the attention probabilities from them (nothing of size T × W is kept).
use super::default_scale;
use super::kernel::{self, SwaBackward, SwaIn};
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
    // The head dim, when q has one: `kernel::forward` checks every shape.
    let d = q.dims().last().copied().unwrap_or(1);
    let scale = scale.unwrap_or_else(|| default_scale(d));
    let x = SwaIn { q, k, v };
    let out = kernel::forward(&x, window, scale)?;
    let saved: SwaIn = x.try_map(|t| Ok((*t).clone()))?;
    let o = out.o.clone();
    Ok(tape.record("swa", &[q, k, v], o, move |dout, _| {
        let g = kernel::backward(
            &SwaBackward {
                input: saved.try_map(Ok)?,
                out: out.try_map(Ok)?,
                dout,
            },
            window,
            scale,
        )?;
        Ok(vec![Some(g.q), Some(g.k), Some(g.v)])
    }))
}
