//! Rotary position embedding on `[B, T, H, D]`.
use crate::backend::{Backend, RopeDims};
use crate::{Error, Result, Tensor};

impl Tensor {
    fn rope_dims(&self, offset: usize, theta: f64) -> Result<RopeDims> {
        self.float_only("rope")?;
        match *self.dims() {
            [b, t, h, d] if d % 2 == 0 => Ok(RopeDims {
                b,
                t,
                h,
                d,
                offset,
                theta,
            }),
            _ => Err(Error::Invalid {
                op: "rope",
                msg: format!("needs [B, T, H, D] with D even, got {}", self.shape()),
            }),
        }
    }

    /// Rotates pairs `(i, i + D/2)` of each head by `(offset + t) · theta^(-2i/D)`.
    pub fn rope(&self, offset: usize, theta: f64) -> Result<Tensor> {
        let dims = self.rope_dims(offset, theta)?;
        Ok(self.with_storage(self.storage().rope(dims)?, self.shape().clone()))
    }

    /// The inverse rotation: the backward of `rope` (a rotation's transpose is its inverse).
    /// With `dres` (like self: the gradient that reaches x by another path), the result is
    /// `dres` plus the rotation's, in one pass.
    pub fn rope_backward(
        &self,
        offset: usize,
        theta: f64,
        dres: Option<&Tensor>,
    ) -> Result<Tensor> {
        let dims = self.rope_dims(offset, theta)?;
        if let Some(r) = dres {
            self.same_shape("rope_backward", r)?;
            self.same_dtype("rope_backward", r)?;
        }
        let dx = self
            .storage()
            .rope_backward(dims, dres.map(Tensor::storage))?;
        Ok(self.with_storage(dx, self.shape().clone()))
    }
}
