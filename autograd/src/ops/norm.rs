//! RMSNorm and LayerNorm: one node each, with the fused backward kernels and saved statistics;
//! and RMSNorm at the head of a residual branch, whose backward also adds the residual's gradient.
use super::grads;
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    pub fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        let (y, stats) = x.rms_norm(weight, eps)?;
        let (sx, sw) = (x.clone(), weight.clone());
        Ok(self.record("rms_norm", &[x, weight], y, move |dy, _| {
            let (dx, dw) = sx.rms_norm_backward(&sw, &stats, dy, None)?;
            Ok(vec![Some(dx), Some(dw)])
        }))
    }

    /// `(skip, rms_norm(x))` as one node, `skip` being x itself under a new id: the residual
    /// stream that goes around the branch the norm feeds. x's gradient is then `dskip` plus the
    /// norm's, summed inside the norm's backward pass, where recording the norm alone would
    /// leave the tape a separate pass adding the two.
    pub fn residual_rms_norm(
        &self,
        x: &Tensor,
        weight: &Tensor,
        eps: f64,
    ) -> Result<(Tensor, Tensor)> {
        let (y, stats) = x.rms_norm(weight, eps)?;
        let skip = x.reshape(x.shape().clone())?;
        let (sx, sw) = (x.clone(), weight.clone());
        let outs = self.record_many(
            "residual_rms_norm",
            &[x, weight],
            vec![skip, y],
            move |dys, _| {
                let [dskip, dy] = dys else {
                    unreachable!("two outputs recorded")
                };
                let (dx, dw) = sx.rms_norm_backward(&sw, &stats, dy, Some(dskip))?;
                Ok(vec![Some(dx), Some(dw)])
            },
        );
        let [skip, y]: [Tensor; 2] = outs.try_into().expect("two outputs recorded");
        Ok((skip, y))
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
