//! Rotary position embedding; the backward is the inverse rotation.
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    pub fn rope(&self, x: &Tensor, offset: usize, theta: f64) -> Result<Tensor> {
        let y = x.rope(offset, theta)?;
        Ok(self.record("rope", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.rope_backward(offset, theta, None)?)])
        }))
    }
}
