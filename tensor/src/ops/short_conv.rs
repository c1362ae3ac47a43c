//! Causal depthwise convolution along time on `[B, T, C]`, fused (see `Backend::short_conv`).
use crate::backend::{Backend, ConvDims};
use crate::{Error, Result, Tensor};

impl Tensor {
    fn conv_dims(&self, op: &'static str, w: &Tensor) -> Result<ConvDims> {
        self.float_only(op)?;
        self.same_dtype(op, w)?;
        match (self.dims(), w.dims()) {
            (&[b, t, c], &[wc, k]) if wc == c && k >= 1 => Ok(ConvDims { b, t, c, k }),
            _ => Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().clone(),
                rhs: w.shape().clone(),
            }),
        }
    }

    /// `y[b, t, c] = bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c]` for x `[B, T, C]`, weights
    /// `[C, K]` (tap K - 1 on the current step), optional bias `[C]`; steps before 0 are zeros.
    /// To continue a sequence, prepend its last K - 1 steps and drop as many outputs.
    pub fn short_conv(&self, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let dims = self.conv_dims("short_conv", w)?;
        let zero;
        let bias = match bias {
            Some(b) => b,
            None => {
                zero = Tensor::zeros(vec![dims.c], self.dtype(), self.device())?;
                &zero
            }
        };
        self.same_dtype("short_conv", bias)?;
        if bias.dims() != [dims.c] {
            return Err(Error::ShapeMismatch {
                op: "short_conv",
                lhs: self.shape().clone(),
                rhs: bias.shape().clone(),
            });
        }
        let y = self
            .storage()
            .short_conv(w.storage(), bias.storage(), dims)?;
        Ok(self.with_storage(y, self.shape().clone()))
    }

    /// `(dx, dw, dbias)` of `short_conv`, `self` as x.
    pub fn short_conv_backward(&self, w: &Tensor, dy: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let dims = self.conv_dims("short_conv_backward", w)?;
        self.same_shape("short_conv_backward", dy)?;
        self.same_dtype("short_conv_backward", dy)?;
        let (dx, dw, db) = self
            .storage()
            .short_conv_backward(w.storage(), dy.storage(), dims)?;
        Ok((
            self.with_storage(dx, self.shape().clone()),
            self.with_storage(dw, w.shape().clone()),
            self.with_storage(db, vec![dims.c].into()),
        ))
    }
}
