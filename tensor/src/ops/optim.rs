//! The optimizer's ops: one AdamW step and the sum of squares of a gradient, each one backend
//! call, so the optimizer runs the same on the CPU and on the GPU (where it never waits for the
//! device).
use crate::backend::{AdamWStep, Backend};
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// One AdamW step on the f32 parameters `self`, returning the new (p, m, v). grad, m and v
    /// are f32 of `self`'s shape; `grad_scale` an f32 `[1]` multiplying the gradient (1 for
    /// none, or the clipping factor of the global norm).
    pub fn adamw(
        &self,
        grad: &Tensor,
        m: &Tensor,
        v: &Tensor,
        grad_scale: &Tensor,
        hp: AdamWStep,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "adamw";
        for x in [self, grad, m, v, grad_scale] {
            if x.dtype() != DType::F32 {
                return Err(Error::UnsupportedDType {
                    op: OP,
                    dtype: x.dtype(),
                });
            }
            self.same_dtype(OP, x)?;
        }
        for x in [grad, m, v] {
            self.same_shape(OP, x)?;
        }
        if grad_scale.numel() != 1 {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().clone(),
                rhs: grad_scale.shape().clone(),
            });
        }
        if hp.step == 0 {
            return Err(Error::Invalid {
                op: OP,
                msg: "steps count from 1".into(),
            });
        }
        let (p, m, v) = self.storage().adamw(
            grad.storage(),
            m.storage(),
            v.storage(),
            grad_scale.storage(),
            hp,
        )?;
        let shape = self.shape().clone();
        Ok((
            self.with_storage(p, shape.clone()),
            self.with_storage(m, shape.clone()),
            self.with_storage(v, shape),
        ))
    }

    /// `sum(x^2)` as an f32 `[1]` tensor, on `self`'s device.
    pub fn sum_squares(&self) -> Result<Tensor> {
        self.float_only("sum_squares")?;
        let s = self.storage().sum_squares()?;
        Ok(self.with_storage(s, vec![1].into()))
    }
}
