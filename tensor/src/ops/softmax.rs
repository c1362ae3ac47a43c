//! Softmax and log-softmax over the last axis.
use crate::backend::{Backend, Softmax};
use crate::{Result, Tensor};

impl Tensor {
    fn last_dim(&self) -> usize {
        self.dims().last().copied().unwrap_or(1)
    }

    pub fn softmax(&self) -> Result<Tensor> {
        self.float_only("softmax")?;
        Ok(self.with_storage(
            self.storage().softmax(self.last_dim(), Softmax::Softmax)?,
            self.shape().clone(),
        ))
    }

    pub fn log_softmax(&self) -> Result<Tensor> {
        self.float_only("log_softmax")?;
        Ok(self.with_storage(
            self.storage()
                .softmax(self.last_dim(), Softmax::LogSoftmax)?,
            self.shape().clone(),
        ))
    }

    /// Given the forward's output (`self`) of `kind` and dy, dx.
    pub fn softmax_backward(&self, dy: &Tensor, kind: Softmax) -> Result<Tensor> {
        self.same_dtype("softmax_backward", dy)?;
        self.same_shape("softmax_backward", dy)?;
        let out = self
            .storage()
            .softmax_backward(dy.storage(), self.last_dim(), kind)?;
        Ok(self.with_storage(out, self.shape().clone()))
    }
}
