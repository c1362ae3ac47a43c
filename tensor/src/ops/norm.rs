//! RMSNorm and LayerNorm over the last axis, fused, with the statistics the backward reuses.
use crate::backend::Backend;
use crate::{Error, Result, Shape, Tensor};

/// What a norm's forward saves for its backward: per-row statistics.
#[derive(Clone, Debug)]
pub struct NormStats {
    /// Per-row mean (LayerNorm only).
    pub mean: Option<Tensor>,
    pub rstd: Tensor,
}

impl Tensor {
    fn norm_rows(&self, op: &'static str, weight: &Tensor) -> Result<(usize, Shape)> {
        self.float_only(op)?;
        self.same_dtype(op, weight)?;
        let n = self.dims().last().copied().unwrap_or(0);
        if weight.dims() != [n] {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().clone(),
                rhs: weight.shape().clone(),
            });
        }
        let rows = Shape::new(&self.dims()[..self.rank().saturating_sub(1)]);
        Ok((n, rows))
    }

    /// `x · rsqrt(mean(x²) + eps) · weight` over the last axis.
    pub fn rms_norm(&self, weight: &Tensor, eps: f64) -> Result<(Tensor, NormStats)> {
        self.rms_norm_with(weight, eps, None)
    }

    /// `res + rms_norm(x)` in the norm's one pass (the statistics are the norm's own): a sum of
    /// a normed tensor and another (RAttention's two normed branches).
    pub fn rms_norm_add(
        &self,
        weight: &Tensor,
        eps: f64,
        res: &Tensor,
    ) -> Result<(Tensor, NormStats)> {
        self.same_shape("rms_norm_add", res)?;
        self.same_dtype("rms_norm_add", res)?;
        self.rms_norm_with(weight, eps, Some(res))
    }

    fn rms_norm_with(
        &self,
        weight: &Tensor,
        eps: f64,
        res: Option<&Tensor>,
    ) -> Result<(Tensor, NormStats)> {
        let (n, rows) = self.norm_rows("rms_norm", weight)?;
        let res = res.map(Tensor::storage);
        let (y, rstd) = self.storage().rms_norm(weight.storage(), res, n, eps)?;
        let y = self.with_storage(y, self.shape().clone());
        let rstd = self.with_storage(rstd, rows);
        Ok((y, NormStats { mean: None, rstd }))
    }

    /// Returns `(dx, dweight)`. With `dres` (like x: the gradient that reaches x by another
    /// path, as a residual stream's does), dx is `dres` plus the norm's, in one pass.
    pub fn rms_norm_backward(
        &self,
        weight: &Tensor,
        stats: &NormStats,
        dy: &Tensor,
        dres: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let (n, _) = self.norm_rows("rms_norm_backward", weight)?;
        self.same_shape("rms_norm_backward", dy)?;
        if let Some(r) = dres {
            self.same_shape("rms_norm_backward", r)?;
            self.same_dtype("rms_norm_backward", r)?;
        }
        let (dx, dw) = self.storage().rms_norm_backward(
            weight.storage(),
            stats.rstd.storage(),
            dy.storage(),
            dres.map(Tensor::storage),
            n,
        )?;
        Ok((
            self.with_storage(dx, self.shape().clone()),
            self.with_storage(dw, weight.shape().clone()),
        ))
    }

    /// `(x − mean) · rstd · weight + bias` over the last axis.
    pub fn layer_norm(
        &self,
        weight: &Tensor,
        bias: &Tensor,
        eps: f64,
    ) -> Result<(Tensor, NormStats)> {
        let (n, rows) = self.norm_rows("layer_norm", weight)?;
        weight.same_shape("layer_norm", bias)?;
        weight.same_dtype("layer_norm", bias)?;
        let (y, mean, rstd) =
            self.storage()
                .layer_norm(weight.storage(), bias.storage(), n, eps)?;
        Ok((
            self.with_storage(y, self.shape().clone()),
            NormStats {
                mean: Some(self.with_storage(mean, rows.clone())),
                rstd: self.with_storage(rstd, rows),
            },
        ))
    }

    /// Returns `(dx, dweight, dbias)`.
    pub fn layer_norm_backward(
        &self,
        weight: &Tensor,
        stats: &NormStats,
        dy: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (n, _) = self.norm_rows("layer_norm_backward", weight)?;
        self.same_shape("layer_norm_backward", dy)?;
        let mean = stats.mean.as_ref().ok_or(Error::Invalid {
            op: "layer_norm_backward",
            msg: "statistics without a mean (from rms_norm?)".into(),
        })?;
        let (dx, dw, db) = self.storage().layer_norm_backward(
            weight.storage(),
            mean.storage(),
            stats.rstd.storage(),
            dy.storage(),
            n,
        )?;
        Ok((
            self.with_storage(dx, self.shape().clone()),
            self.with_storage(dw, weight.shape().clone()),
            self.with_storage(db, weight.shape().clone()),
        ))
    }
}
