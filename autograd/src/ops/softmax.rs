//! Softmax and log-softmax over the last axis; the backward reuses the saved output.
use crate::Tape;
use swax_tensor::{Result, Softmax, Tensor};

impl Tape {
    pub fn softmax(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.softmax()?;
        let saved = y.clone();
        Ok(self.record("softmax", &[x], y, move |dy, _| {
            Ok(vec![Some(saved.softmax_backward(dy, Softmax::Softmax)?)])
        }))
    }

    pub fn log_softmax(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.log_softmax()?;
        let saved = y.clone();
        Ok(self.record("log_softmax", &[x], y, move |dy, _| {
            Ok(vec![Some(saved.softmax_backward(dy, Softmax::LogSoftmax)?)])
        }))
    }
}
