//! The SwiGLU activation of an MLP's pre-activation `gu = [gate | up]` `[N, 2F]` (gate the first
//! F columns): `h = silu(gate) · up` `[N, F]`, and its backward, each one fused kernel (one pass
//! over memory) instead of two narrowing copies, silu and a product (and, backward, their
//! derivatives and a concatenation).
use crate::backend::Backend;
use crate::{Error, Result, Shape, Tensor};

impl Tensor {
    /// F of a `[N, 2F]` pre-activation.
    fn swiglu_width(&self, op: &'static str) -> Result<usize> {
        self.float_only(op)?;
        match *self.dims() {
            [_, w] if w > 0 && w % 2 == 0 => Ok(w / 2),
            _ => Err(Error::Invalid {
                op,
                msg: format!(
                    "needs gu = [gate | up] as [N, 2F] with F > 0 (an even, nonzero width), got {}",
                    self.shape()
                ),
            }),
        }
    }

    /// `silu(gate) · up` `[N, F]` of `self` = `[gate | up]` `[N, 2F]`.
    pub fn swiglu(&self) -> Result<Tensor> {
        let f = self.swiglu_width("swiglu")?;
        let h = self.storage().swiglu(f)?;
        Ok(self.with_storage(h, Shape::new(vec![self.dims()[0], f])))
    }

    /// Given `self` = gu `[N, 2F]` and dh `[N, F]`, returns `(dgu, h)`: dgu `[N, 2F]` holds
    /// `dh · up · silu'(gate)` in its first F columns and `dh · silu(gate)` in the rest; h is
    /// [`Tensor::swiglu`]'s output, recomputed in the same pass (a backward that recomputes the
    /// activation needs it for the next weight's gradient).
    pub fn swiglu_backward(&self, dh: &Tensor) -> Result<(Tensor, Tensor)> {
        const OP: &str = "swiglu_backward";
        let f = self.swiglu_width(OP)?;
        self.same_dtype(OP, dh)?;
        let h_shape = Shape::new(vec![self.dims()[0], f]);
        if *dh.shape() != h_shape {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().clone(),
                rhs: dh.shape().clone(),
            });
        }
        let (dgu, h) = self.storage().swiglu_backward(dh.storage(), f)?;
        Ok((
            self.with_storage(dgu, self.shape().clone()),
            self.with_storage(h, h_shape),
        ))
    }
}
