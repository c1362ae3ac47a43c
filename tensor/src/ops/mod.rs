//! Every op on `Tensor`: shape, dtype and device checks, then one call through the `Backend`
//! seam. The differentiable ones have their backward beside them in the autograd crate; the
//! `*_backward` methods here are the fused kernels those backwards call.
mod elementwise;
mod index;
mod layout;
mod loss;
mod mask;
mod matmul;
mod norm;
mod optim;
mod reduce;
mod rope;
mod short_conv;
mod softmax;
mod swiglu;

pub use loss::CrossEntropyStats;
pub use mask::CAUSAL;
pub use norm::NormStats;
pub use optim::AdamWParam;

use crate::{Error, Result, Tensor};

impl Tensor {
    pub(crate) fn same_dtype(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: other.dtype(),
            });
        }
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }

    pub(crate) fn same_shape(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.shape() != other.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().clone(),
                rhs: other.shape().clone(),
            });
        }
        Ok(())
    }

    pub(crate) fn float_only(&self, op: &'static str) -> Result<()> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
            });
        }
        Ok(())
    }

    /// The ids of an index tensor, checked against `size` (host copy; the CPU reads them anyway).
    pub(crate) fn check_ids(&self, op: &'static str, size: usize) -> Result<()> {
        if self.dtype() != crate::DType::U32 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
            });
        }
        if let Some(cpu) = self.storage().as_cpu() {
            if let Some(&bad) = cpu.ids(op)?.iter().find(|&&i| i as usize >= size) {
                return Err(Error::IndexOutOfRange {
                    op,
                    index: bad as usize,
                    size,
                });
            }
        }
        Ok(())
    }
}
