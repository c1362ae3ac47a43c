//! Cross-entropy: one node, fused with its log-softmax; the backward reuses the row log-sum-exp.
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    /// Mean cross-entropy of `logits` (`[.., V]`) against U32 `targets` (`[..]`), skipping rows
    /// whose target is `ignore_index`.
    pub fn cross_entropy(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        ignore_index: Option<u32>,
    ) -> Result<Tensor> {
        let (loss, stats) = logits.cross_entropy(targets, ignore_index)?;
        let (sl, st) = (logits.clone(), targets.clone());
        Ok(
            self.record("cross_entropy", &[logits, targets], loss, move |dy, _| {
                Ok(vec![
                    Some(sl.cross_entropy_backward(&st, &stats, dy, ignore_index)?),
                    None,
                ])
            }),
        )
    }
}
