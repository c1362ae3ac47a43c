//! Causal sliding-window attention as one fused op (forward saving the per-row log-sum-exp,
//! backward recomputing the probabilities from it), and the input checks every attention-like
//! mixer shares.
use crate::backend::{AttnDims, Backend};
use crate::{Error, Result, Shape, Tensor};

impl AttnDims {
    /// The sizes of q `[B, T, H, D]` and k, v `[B, T, Hkv, D]`: one float dtype and device, H a
    /// multiple of Hkv, and a window of at least one key (every query sees itself).
    pub fn check(
        op: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        window: usize,
    ) -> Result<AttnDims> {
        q.float_only(op)?;
        q.same_dtype(op, k)?;
        q.same_dtype(op, v)?;
        k.same_shape(op, v)?;
        let mismatch = || Error::ShapeMismatch {
            op,
            lhs: q.shape().clone(),
            rhs: k.shape().clone(),
        };
        let (&[b, t, h, d], &[kb, kt, hkv, kd]) = (q.dims(), k.dims()) else {
            return Err(mismatch());
        };
        if (kb, kt, kd) != (b, t, d) {
            return Err(mismatch());
        }
        if hkv == 0 || h % hkv != 0 {
            return Err(Error::Invalid {
                op,
                msg: format!(
                    "q heads must be a multiple of kv heads: q {}, k {}",
                    q.shape(),
                    k.shape()
                ),
            });
        }
        if window == 0 {
            return Err(Error::Invalid {
                op,
                msg: "window 0: a query must see at least itself".into(),
            });
        }
        Ok(AttnDims { b, t, h, hkv, d })
    }
}

impl Tensor {
    /// Sliding-window attention with `self` as q: query t sees keys `t - window < s <= t`
    /// (a window >= T is full causal attention). Returns `(o [B, T, H, D], lse [B, H, T])`.
    pub fn swa(
        &self,
        k: &Tensor,
        v: &Tensor,
        window: usize,
        scale: f64,
    ) -> Result<(Tensor, Tensor)> {
        let dims = AttnDims::check("swa", self, k, v, window)?;
        let (o, lse) = self
            .storage()
            .swa_forward(k.storage(), v.storage(), dims, window, scale)?;
        Ok((
            self.with_storage(o, self.shape().clone()),
            self.with_storage(lse, Shape::new([dims.b, dims.h, dims.t])),
        ))
    }

    /// `(dq, dk, dv)` of `swa`, from its inputs, its outputs `o`, `lse` and the gradient `dout`.
    #[allow(clippy::too_many_arguments)]
    pub fn swa_backward(
        &self,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        lse: &Tensor,
        dout: &Tensor,
        window: usize,
        scale: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let op = "swa_backward";
        let dims = AttnDims::check(op, self, k, v, window)?;
        self.same_shape(op, o)?;
        self.same_shape(op, dout)?;
        let rows = Shape::new([dims.b, dims.h, dims.t]);
        if lse.shape() != &rows {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().clone(),
                rhs: lse.shape().clone(),
            });
        }
        let (dq, dk, dv) = self.storage().swa_backward(
            k.storage(),
            v.storage(),
            o.storage(),
            lse.storage(),
            dout.storage(),
            dims,
            window,
            scale,
        )?;
        Ok((
            self.with_storage(dq, self.shape().clone()),
            self.with_storage(dk, k.shape().clone()),
            self.with_storage(dv, v.shape().clone()),
        ))
    }
}
