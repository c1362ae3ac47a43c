//! RAttention's residual linear attention as one fused op: the feature map
//! `phi(x) = [softmax(x), softmax(-x)]` and the chunkwise linear attention over every key older
//! than the window, forward and backward.
use crate::backend::{AttnDims, Backend};
use crate::{Error, Result, Tensor};

fn check_chunk(op: &'static str, chunk: usize) -> Result<()> {
    if chunk == 0 {
        return Err(Error::Invalid {
            op,
            msg: "chunk size 0".into(),
        });
    }
    Ok(())
}

impl Tensor {
    /// With `self` as q `[B, T, H, D]` and k, v `[B, T, Hkv, D]`:
    /// `o_t = phi(q_t) · sum_{s <= t - window} phi(k_s)^T v_s`, computed `chunk` steps at a time.
    pub fn rla(&self, k: &Tensor, v: &Tensor, window: usize, chunk: usize) -> Result<Tensor> {
        let dims = AttnDims::check("rla", self, k, v, window)?;
        check_chunk("rla", chunk)?;
        let o = self
            .storage()
            .rla_forward(k.storage(), v.storage(), dims, window, chunk)?;
        Ok(self.with_storage(o, self.shape().clone()))
    }

    /// `(dq, dk, dv)` of `rla` given the gradient `dout` of its output.
    pub fn rla_backward(
        &self,
        k: &Tensor,
        v: &Tensor,
        dout: &Tensor,
        window: usize,
        chunk: usize,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let op = "rla_backward";
        let dims = AttnDims::check(op, self, k, v, window)?;
        check_chunk(op, chunk)?;
        self.same_shape(op, dout)?;
        let (dq, dk, dv) = self.storage().rla_backward(
            k.storage(),
            v.storage(),
            dout.storage(),
            dims,
            window,
            chunk,
        )?;
        Ok((
            self.with_storage(dq, self.shape().clone()),
            self.with_storage(dk, k.shape().clone()),
            self.with_storage(dv, v.shape().clone()),
        ))
    }
}
