//! The output projection and the cross-entropy as one tape op that never holds all the logits:
//! the mean cross-entropy of `x W` (x `[N, d]`, the weight `[d, V]` as [`Linear`] holds it)
//! against U32 targets `[N]`, computed `rows` rows at a time, so memory holds one group's
//! `[rows, V]` logits and their gradient instead of `[N, V]` (at swax-small's N = 16 × 4096 and
//! V = 50304, 6.6 GB in bf16 for the logits alone). Cut Cross-Entropy (arXiv 2411.09009) and
//! Liger's fused linear cross-entropy do the same; this one is built from the primitives
//! (matmul, and the cross-entropy summed with its gradient in one pass over the logits), so it
//! runs wherever they do.
//!
//! A loss ends the graph, so its only upstream gradient is a scalar: when x or W is tracked,
//! their gradients are computed during the forward, group by group while the group's logits are
//! at hand, and the node's backward only scales them by that scalar.
//!
//! The mean divides by the rows counted over all groups, known only after the last one. So each
//! group contributes the gradient of its summed loss, and the single division by max(count, 1)
//! is folded into the scale the backward applies; the count stays on the device, nothing is
//! read back. The loss and dW are summed over the groups in f32 (f64 for f64 inputs): summing
//! bf16 partial products would drop the later groups' small contributions. Each group's dW
//! product is added into that sum by the GEMM itself ([`Tensor::matmul_acc_into`]), never stored
//! on its own. The gradients come back in the inputs' dtype.
//!
//! [`Linear`]: super::basic::Linear
use swax_autograd::Tape;
use swax_tensor::{DType, Error, Result, Shape, Tensor};

const OP: &str = "linear_cross_entropy";

/// Rows the trainer's loss computes at a time unless configured: at a vocabulary of 50304 a
/// group's logits take 206 MB in bf16 (412 MB in f32), their gradient as much again.
pub const DEFAULT_ROWS: usize = 2048;

/// Mean cross-entropy of `x · w` against `targets`, rows whose target is `ignore_index` left
/// out (0 when every row is, as [`Tape::cross_entropy`]), `rows` rows of logits at a time.
/// Returns a scalar in f32 for f32 and bf16 inputs, f64 for f64 inputs.
pub fn linear_cross_entropy(
    tape: &Tape,
    x: &Tensor,
    w: &Tensor,
    targets: &Tensor,
    ignore_index: Option<u32>,
    rows: usize,
) -> Result<Tensor> {
    check(x, w, targets, rows)?;
    let need = Needs {
        dx: tape.is_tracked(x),
        dw: tape.is_tracked(w),
    };
    let sums = Sums::over(x, w, targets, ignore_index, rows, need)?;
    // max(count, 1): with every row ignored the sums are 0, and so are the loss and gradients.
    let count = sums.count.clamp(1.0, f64::INFINITY)?;
    let loss = sums.loss.div(&count)?;
    if !(need.dx || need.dw) {
        return Ok(loss);
    }
    let (dx, dw) = (sums.dx, sums.dw);
    let (x_dtype, w_dtype) = (x.dtype(), w.dtype());
    Ok(tape.record(OP, &[x, w, targets], loss, move |dy, _| {
        // The mean's 1/count and the upstream gradient as one scalar, applied in the sums'
        // precision (a bf16 copy of 1/count would be off by up to 2^-9, the same for every
        // element), with the cast to the input's dtype in the same pass.
        let g = dy.div(&count)?;
        let scaled = |sum: Option<Tensor>, dtype| -> Result<Option<Tensor>> {
            sum.map(|s| s.scale_cast(&g, dtype)).transpose()
        };
        Ok(vec![scaled(dx, x_dtype)?, scaled(dw, w_dtype)?, None])
    }))
}

fn check(x: &Tensor, w: &Tensor, targets: &Tensor, rows: usize) -> Result<()> {
    let fits = x.rank() == 2
        && w.rank() == 2
        && targets.rank() == 1
        && x.dims()[1] == w.dims()[0]
        && targets.dims()[0] == x.dims()[0];
    if !fits {
        return Err(Error::Invalid {
            op: OP,
            msg: format!(
                "needs x [N, d], the weight [d, V] and targets [N]; got x {}, weight {}, \
                 targets {}",
                x.shape(),
                w.shape(),
                targets.shape()
            ),
        });
    }
    if x.dtype() != w.dtype() || !x.dtype().is_float() {
        return Err(Error::DTypeMismatch {
            op: OP,
            lhs: x.dtype(),
            rhs: w.dtype(),
        });
    }
    if targets.dtype() != DType::U32 {
        return Err(Error::Invalid {
            op: OP,
            msg: format!("targets must be U32 token ids, got {:?}", targets.dtype()),
        });
    }
    if rows == 0 {
        return Err(Error::Invalid {
            op: OP,
            msg: "rows at a time must be at least 1".into(),
        });
    }
    Ok(())
}

/// Which gradients the forward computes: those of the tracked inputs.
#[derive(Clone, Copy)]
struct Needs {
    dx: bool,
    dw: bool,
}

/// The loss summed over the counted rows, their count, and the gradients of that sum.
struct Sums {
    loss: Tensor,
    count: Tensor,
    /// `[N, d]` in x's dtype.
    dx: Option<Tensor>,
    /// `[d, V]` in the sums' dtype.
    dw: Option<Tensor>,
}

impl Sums {
    fn over(
        x: &Tensor,
        w: &Tensor,
        targets: &Tensor,
        ignore_index: Option<u32>,
        rows: usize,
        need: Needs,
    ) -> Result<Sums> {
        let (n, device) = (x.dims()[0], x.device());
        // The dtype of the cross-entropy's totals and of matmul_acc_into's sums.
        let acc = x.dtype().accumulator();
        // [summed loss, counted rows] over the groups so far.
        let mut totals = Tensor::zeros([2], acc, device)?;
        let mut dw = match need.dw {
            true => Some(Tensor::zeros(w.shape().clone(), acc, device)?),
            false => None,
        };
        let mut dx_parts = Vec::new();
        for start in (0..n).step_by(rows) {
            let len = rows.min(n - start);
            let (xg, tg) = (x.narrow(0, start, len)?, targets.narrow(0, start, len)?);
            // The gradient of the group's summed loss, from the same pass over its logits.
            let grad = need.dx || need.dw;
            let Some(dlogits) =
                xg.matmul(w)?
                    .cross_entropy_summed_into(&tg, ignore_index, &mut totals, grad)?
            else {
                continue;
            };
            if need.dx {
                dx_parts.push(dlogits.matmul_t(w, false, true)?);
            }
            if let Some(dw) = &mut dw {
                xg.matmul_acc_into(&dlogits, true, false, dw)?;
            }
        }
        let total = |i| totals.narrow(0, i, 1)?.reshape(Shape::scalar());
        let mut sums = Sums {
            loss: total(0)?,
            count: total(1)?,
            dx: None,
            dw,
        };
        if need.dx {
            sums.dx = Some(match dx_parts.as_slice() {
                [] => x.zeros_like()?,
                [one] => one.clone(),
                parts => Tensor::concat(&parts.iter().collect::<Vec<_>>(), 0)?,
            });
        }
        Ok(sums)
    }
}
