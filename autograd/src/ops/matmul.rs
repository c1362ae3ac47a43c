//! Matrix products. With C = op(A)·op(B): dA = dC·op(B)ᵀ and dB = op(A)ᵀ·dC, written with the
//! transpose flags so that no transposed copy is made. Each operand is kept only for the other's
//! gradient.
use super::{grads, saved};
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    pub fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.matmul_t(a, b, false, false)
    }

    /// Keeps A only for B's gradient and B only for A's.
    pub fn matmul_t(&self, a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
        let y = a.matmul_t(b, ta, tb)?;
        let (a_shape, b_shape) = (a.shape().clone(), b.shape().clone());
        let ka = self.is_tracked(b).then(|| a.clone());
        let kb = self.is_tracked(a).then(|| b.clone());
        Ok(self.record("matmul", &[a, b], y, move |dc, needs| {
            let da = || {
                let sb = saved(&kb)?;
                let g = if ta {
                    sb.matmul_t(dc, tb, true)?
                } else {
                    dc.matmul_t(sb, false, !tb)?
                };
                g.sum_to_shape(&a_shape)
            };
            let db = || {
                let sa = saved(&ka)?;
                // A weight shared over a batch: one tall product instead of a batch then a sum.
                if b_shape.rank() == 2 && sa.rank() > 2 && !ta {
                    let k = sa.dims()[sa.rank() - 1];
                    let n = dc.dims()[dc.rank() - 1];
                    let a2 = sa.reshape([sa.numel() / k, k])?;
                    let d2 = dc.reshape([dc.numel() / n, n])?;
                    return if tb {
                        d2.matmul_t(&a2, true, false)
                    } else {
                        a2.matmul_t(&d2, true, false)
                    };
                }
                let g = if tb {
                    dc.matmul_t(sa, true, ta)?
                } else {
                    sa.matmul_t(dc, !ta, false)?
                };
                g.sum_to_shape(&b_shape)
            };
            grads(needs, [&da, &db])
        }))
    }
}
