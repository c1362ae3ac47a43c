//! Masking. What the mask hides gets no gradient.
use crate::Tape;
use swax_tensor::{Result, Shape, Tensor};

impl Tape {
    /// Over the last two dims `[.., rows, cols]`, sets what the sliding-window band hides.
    pub fn masked_fill_band(&self, x: &Tensor, window: usize, value: f64) -> Result<Tensor> {
        let y = x.masked_fill_band(window, value)?;
        Ok(self.record("masked_fill_band", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.masked_fill_band(window, 0.0)?)])
        }))
    }

    /// Sets `value` where `mask` (U32, broadcastable to `x`) is non-zero.
    pub fn masked_fill(&self, x: &Tensor, mask: &Tensor, value: f64) -> Result<Tensor> {
        let mask = mask.broadcast_to(x.shape().clone())?;
        let fill = Tensor::full(value, Shape::new(x.dims()), x.dtype(), x.device())?;
        self.where_cond(&mask, &fill, x)
    }
}
