//! The sizes of an attention call, `AttnShape`: what the attention mixers' kernels (swax-nn's
//! `mixers::attention` and `mixers::rattention`, CPU and CUDA) take, and the CUDA kernels' own
//! check of them, the one place that says which head dims have kernels.
use super::{check_dtype, check_len};
use crate::{Buffer, CudaError, DType};

/// q `[b, t, h, d]`, k and v `[b, t, hkv, d]`, row-major. Grouped-query attention: h is a
/// multiple of hkv and q head `i` reads kv head `i / (h / hkv)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
}

impl AttnShape {
    /// Whole groups of q heads per kv head.
    pub fn check_groups(&self, op: &'static str) -> Result<(), CudaError> {
        if self.hkv == 0 || !self.h.is_multiple_of(self.hkv) {
            return Err(CudaError::invalid(
                op,
                format!("{self:?}: h must be a multiple of hkv"),
            ));
        }
        Ok(())
    }

    /// What the CUDA kernels take: a head dim they exist for, and whole groups of q heads.
    pub fn check(&self, op: &'static str) -> Result<(), CudaError> {
        if !matches!(self.d, 64 | 128) {
            return Err(CudaError::invalid(
                op,
                format!("head dim {}: kernels exist for 64 and 128", self.d),
            ));
        }
        self.check_groups(op)
    }

    /// Elements of q (and o).
    pub fn q_len(&self) -> usize {
        self.b * self.t * self.h * self.d
    }

    /// Elements of k (and v).
    pub fn kv_len(&self) -> usize {
        self.b * self.t * self.hkv * self.d
    }

    /// Query rows over all heads, `b · h · t`: the length of a per-row statistic.
    pub fn rows(&self) -> usize {
        self.b * self.h * self.t
    }

    /// Each of `q` (q-shaped) and `kv` (kv-shaped) bf16 and of its length.
    pub fn check_io(
        &self,
        op: &'static str,
        q: &[&Buffer],
        kv: &[&Buffer],
    ) -> Result<(), CudaError> {
        for (i, buf) in q.iter().enumerate() {
            check_dtype(op, &format!("q-shaped operand {i}"), buf, DType::BF16)?;
            check_len(op, &format!("q-shaped operand {i}"), buf, self.q_len())?;
        }
        for (i, buf) in kv.iter().enumerate() {
            check_dtype(op, &format!("kv-shaped operand {i}"), buf, DType::BF16)?;
            check_len(op, &format!("kv-shaped operand {i}"), buf, self.kv_len())?;
        }
        Ok(())
    }
}
