//! Matrix products: `[.., m, k] · [.., k, n]`, either operand transposed in place (no copy),
//! batch dims equal or one side plain 2-d (a weight shared over the batch). A product is either
//! a new tensor in the operands' dtype or added in place into an accumulator in their
//! accumulation dtype (f32 for bf16), so a sum of products is never rounded to bf16 between
//! terms.
use crate::backend::{Backend, MatmulLayout};
use crate::{Error, Result, Shape, Tensor};

impl Tensor {
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.matmul_t(rhs, false, false)
    }

    /// `op(self) · op(rhs)` where `op` transposes the last two dims when its flag is set.
    pub fn matmul_t(
        &self,
        rhs: &Tensor,
        transpose_lhs: bool,
        transpose_rhs: bool,
    ) -> Result<Tensor> {
        let (layout, dims) = self.product("matmul", rhs, transpose_lhs, transpose_rhs)?;
        let out = self.storage().matmul(rhs.storage(), &layout)?;
        Ok(self.with_storage(out, Shape::new(dims)))
    }

    /// `acc += op(self) · op(rhs)` in place (`op` as in [`Tensor::matmul_t`]), `acc` of the
    /// product's shape in the operands' accumulation dtype ([`crate::DType::accumulator`]: f32
    /// for bf16 and f32 operands, f64 for f64). On the GPU the product is added by the GEMM
    /// itself (beta = 1), never stored on its own. `acc`'s buffer must not be shared with
    /// another tensor (see [`Tensor::into_unique`]).
    pub fn matmul_acc_into(
        &self,
        rhs: &Tensor,
        transpose_lhs: bool,
        transpose_rhs: bool,
        acc: &mut Tensor,
    ) -> Result<()> {
        const OP: &str = "matmul_acc_into";
        let (layout, dims) = self.product(OP, rhs, transpose_lhs, transpose_rhs)?;
        let want = self.dtype().accumulator();
        if acc.dtype() != want {
            return Err(Error::Invalid {
                op: OP,
                msg: format!(
                    "the accumulator of a product of {} operands must be {want}, got {}",
                    self.dtype(),
                    acc.dtype()
                ),
            });
        }
        if acc.dims() != dims.as_slice() {
            return Err(Error::Invalid {
                op: OP,
                msg: format!(
                    "the product of {} and {} (transposed: {transpose_lhs}, {transpose_rhs}) is \
                     {}, the accumulator {}",
                    self.shape(),
                    rhs.shape(),
                    Shape::new(dims),
                    acc.shape()
                ),
            });
        }
        self.storage()
            .matmul_acc(rhs.storage(), &layout, acc.storage_mut(OP)?)
    }

    /// The layout of `op(self) · op(rhs)` and its dims, or an error naming `op_name`.
    fn product(
        &self,
        op_name: &'static str,
        rhs: &Tensor,
        transpose_lhs: bool,
        transpose_rhs: bool,
    ) -> Result<(MatmulLayout, Vec<usize>)> {
        self.same_dtype(op_name, rhs)?;
        self.float_only(op_name)?;
        let mismatch = || Error::ShapeMismatch {
            op: op_name,
            lhs: self.shape().clone(),
            rhs: rhs.shape().clone(),
        };
        if self.rank() < 2 || rhs.rank() < 2 {
            return Err(mismatch());
        }
        let (ld, rd) = (self.dims(), rhs.dims());
        let (lr, rr) = (ld.len(), rd.len());
        let (m, k) = if transpose_lhs {
            (ld[lr - 1], ld[lr - 2])
        } else {
            (ld[lr - 2], ld[lr - 1])
        };
        let (k2, n) = if transpose_rhs {
            (rd[rr - 1], rd[rr - 2])
        } else {
            (rd[rr - 2], rd[rr - 1])
        };
        if k != k2 {
            return Err(mismatch());
        }
        let (lb, rb) = (&ld[..lr - 2], &rd[..rr - 2]);
        let batch_dims = match (lb.is_empty(), rb.is_empty()) {
            (_, true) => lb,
            (true, false) => rb,
            (false, false) if lb == rb => lb,
            _ => return Err(mismatch()),
        };
        let batch: usize = batch_dims.iter().product();
        let layout = MatmulLayout {
            batch,
            m,
            n,
            k,
            lhs_transposed: transpose_lhs,
            rhs_transposed: transpose_rhs,
            lhs_batch_stride: if lb.is_empty() { 0 } else { m * k },
            rhs_batch_stride: if rb.is_empty() { 0 } else { k * n },
        };
        let mut dims = batch_dims.to_vec();
        dims.extend([m, n]);
        // A batch against one shared, untransposed right operand is one tall product.
        let layout = if rb.is_empty() && !transpose_lhs && batch > 1 {
            MatmulLayout {
                batch: 1,
                m: batch * m,
                lhs_batch_stride: 0,
                ..layout
            }
        } else {
            layout
        };
        Ok((layout, dims))
    }
}
