//! RMSNorm and LayerNorm: one node each, with the fused backward kernels and saved statistics.
use super::grads;
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    pub fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        let (y, stats) = x.rms_norm(weight, eps)?;
        let (sx, sw) = (x.clone(), weight.clone());
        Ok(self.record("rms_norm", &[x, weight], y, move |dy, _| {
            let (dx, dw) = sx.rms_norm_backward(&sw, &stats, dy)?;
            Ok(vec![Some(dx), Some(dw)])
        }))
    }

    pub fn layer_norm(
        &self,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        eps: f64,
    ) -> Result<Tensor> {
        let (y, stats) = x.layer_norm(weight, bias, eps)?;
        let (sx, sw) = (x.clone(), weight.clone());
        Ok(
            self.record("layer_norm", &[x, weight, bias], y, move |dy, needs| {
                let (dx, dw, db) = sx.layer_norm_backward(&sw, &stats, dy)?;
                grads(
                    needs,
                    [&|| Ok(dx.clone()), &|| Ok(dw.clone()), &|| Ok(db.clone())],
                )
            }),
        )
    }
}
