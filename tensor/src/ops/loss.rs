//! Cross-entropy over logits with integer targets, fused with its log-softmax.
use crate::backend::Backend;
use crate::{Error, Result, Shape, Tensor};

/// What the cross-entropy forward saves for its backward.
#[derive(Clone, Debug)]
pub struct CrossEntropyStats {
    /// Each row's log-sum-exp, shaped like the targets.
    pub lse: Tensor,
    /// f32 `[mean loss, counted rows]`.
    pub totals: Tensor,
}

impl Tensor {
    fn ce_rows(
        &self,
        op: &'static str,
        targets: &Tensor,
        ignore_index: Option<u32>,
    ) -> Result<usize> {
        self.float_only(op)?;
        let v = self.dims().last().copied().unwrap_or(0);
        if self.rank() < 1
            || targets.numel() * v != self.numel()
            || targets.dims() != &self.dims()[..self.rank() - 1]
        {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().clone(),
                rhs: targets.shape().clone(),
            });
        }
        // Ignored rows may carry any id; every other target must index the vocabulary.
        if let Some(cpu) = targets.storage().as_cpu() {
            if let Some(&bad) = cpu
                .ids(op)?
                .iter()
                .find(|&&t| Some(t) != ignore_index && t as usize >= v)
            {
                return Err(Error::IndexOutOfRange {
                    op,
                    index: bad as usize,
                    size: v,
                });
            }
        }
        Ok(v)
    }

    /// Mean cross-entropy of `self` (`[.., V]` logits) against `targets` (U32 `[..]`), rows whose
    /// target is `ignore_index` left out. Returns the scalar loss and what the backward reuses.
    pub fn cross_entropy(
        &self,
        targets: &Tensor,
        ignore_index: Option<u32>,
    ) -> Result<(Tensor, CrossEntropyStats)> {
        let v = self.ce_rows("cross_entropy", targets, ignore_index)?;
        let (loss, lse, totals) =
            self.storage()
                .cross_entropy(targets.storage(), v, ignore_index)?;
        Ok((
            self.with_storage(loss, Shape::scalar()),
            CrossEntropyStats {
                lse: self.with_storage(lse, targets.shape().clone()),
                totals: self.with_storage(totals, Shape::new([2])),
            },
        ))
    }

    /// dlogits for upstream gradient `dloss` (a scalar tensor).
    pub fn cross_entropy_backward(
        &self,
        targets: &Tensor,
        stats: &CrossEntropyStats,
        dloss: &Tensor,
        ignore_index: Option<u32>,
    ) -> Result<Tensor> {
        let v = self.ce_rows("cross_entropy_backward", targets, ignore_index)?;
        let out = self.storage().cross_entropy_backward(
            targets.storage(),
            stats.lse.storage(),
            stats.totals.storage(),
            dloss.storage(),
            v,
            ignore_index,
        )?;
        Ok(self.with_storage(out, self.shape().clone()))
    }

    /// The cross-entropy of `self` (`[.., V]` logits) against `targets` (U32 `[..]`) summed over
    /// the rows whose target is not `ignore_index`, added with the number of those rows into
    /// `totals` (`[summed loss, counted rows]` in the logits' accumulator dtype, f32 for bf16
    /// and f32); with `grad`, also returns that sum's gradient: softmax - onehot on counted rows,
    /// zero on the others. For a loss that wants its gradient at once (the fused linear
    /// cross-entropy): on the GPU one kernel reads the logits from memory once for both, and
    /// nothing is read back. `totals`' buffer must not be shared with another tensor.
    pub fn cross_entropy_summed_into(
        &self,
        targets: &Tensor,
        ignore_index: Option<u32>,
        totals: &mut Tensor,
        grad: bool,
    ) -> Result<Option<Tensor>> {
        const OP: &str = "cross_entropy_summed_into";
        let v = self.ce_rows(OP, targets, ignore_index)?;
        let want = self.dtype().accumulator();
        if totals.dtype() != want || totals.dims() != [2] {
            return Err(Error::Invalid {
                op: OP,
                msg: format!(
                    "the totals of {} logits must be {want} [2], got {} {}",
                    self.dtype(),
                    totals.dtype(),
                    totals.shape()
                ),
            });
        }
        let dlogits = self.storage().cross_entropy_summed(
            targets.storage(),
            v,
            ignore_index,
            totals.storage_mut(OP)?,
            grad,
        )?;
        Ok(dlogits.map(|d| self.with_storage(d, self.shape().clone())))
    }
}
