//! Causal and sliding-window (band) masking, and masked fill.
use crate::backend::Backend;
use crate::{DType, Device, Error, Result, Shape, Tensor};

/// The window that makes a band mask plain causal.
pub const CAUSAL: usize = usize::MAX;

fn check_band(op: &'static str, rows: usize, cols: usize, window: usize) -> Result<()> {
    if window == 0 || rows > cols {
        return Err(Error::Invalid {
            op,
            msg: format!("window {window} over {rows} queries and {cols} keys (need window >= 1, queries <= keys)"),
        });
    }
    Ok(())
}

impl Tensor {
    /// U32 `[rows, cols]`: 1 where query r (at absolute position r + cols - rows) may see key s,
    /// that is `pos - window < s <= pos`; `CAUSAL` for no window.
    pub fn band_mask(rows: usize, cols: usize, window: usize, device: Device) -> Result<Tensor> {
        check_band("band_mask", rows, cols, window)?;
        let ones = Tensor::ones([rows, cols], DType::F32, device)?;
        ones.masked_fill_band(window, 0.0)?.to_dtype(DType::U32)
    }

    /// Over the last two dims `[.., rows, cols]`, sets what the band hides to `value`.
    pub fn masked_fill_band(&self, window: usize, value: f64) -> Result<Tensor> {
        self.float_only("masked_fill_band")?;
        if self.rank() < 2 {
            return Err(Error::Invalid {
                op: "masked_fill_band",
                msg: format!("needs [.., rows, cols], got {}", self.shape()),
            });
        }
        let (rows, cols) = (self.dims()[self.rank() - 2], self.dims()[self.rank() - 1]);
        check_band("masked_fill_band", rows, cols, window)?;
        let out = self.storage().masked_fill_band(rows, cols, window, value)?;
        Ok(self.with_storage(out, self.shape().clone()))
    }

    /// Sets `value` where `mask` (U32, broadcastable to `self`) is non-zero.
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        let mask = mask.broadcast_to(self.shape().clone())?;
        let fill = Tensor::full(value, Shape::new(self.dims()), self.dtype(), self.device())?;
        mask.where_cond(&fill, self)
    }
}
