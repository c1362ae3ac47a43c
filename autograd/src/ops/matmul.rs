//! Matrix products. With C = op(A)·op(B): dA = dC·op(B)ᵀ and dB = op(A)ᵀ·dC, written with the
//! transpose flags so that no transposed copy is made.
use super::grads;
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    pub fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.matmul_t(a, b, false, false)
    }

    pub fn matmul_t(&self, a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
        let y = a.matmul_t(b, ta, tb)?;
        let (sa, sb) = (a.clone(), b.clone());
        Ok(self.record("matmul", &[a, b], y, move |dc, needs| {
            let da = || {
                let g = if ta {
                    sb.matmul_t(dc, tb, true)?
                } else {
                    dc.matmul_t(&sb, false, !tb)?
                };
                g.sum_to_shape(sa.shape())
            };
            let db = || {
                // A weight shared over a batch: one tall product instead of a batch then a sum.
                if sb.rank() == 2 && sa.rank() > 2 && !ta {
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
                    dc.matmul_t(&sa, true, ta)?
                } else {
                    sa.matmul_t(dc, !ta, false)?
                };
                g.sum_to_shape(sb.shape())
            };
            grads(needs, [&da, &db])
        }))
    }
}
