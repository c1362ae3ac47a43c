//! Recomputation: a piece of the forward whose intermediates are not kept but computed again in
//! the backward. The piece runs once without recording anything and becomes one node that keeps
//! only its inputs; that node's backward reruns the piece on a fresh tape, watching the inputs
//! that need a gradient, and backpropagates the output's gradient through it.
//!
//! Two uses, one mechanism: a whole block (activation checkpointing: memory holds a block's
//! input instead of its activations, for a second forward in the backward) and cheap chains of
//! elementwise ops and norms between the matmuls (selective recomputation: their outputs are
//! recomputed from their inputs instead of stored). A deterministic piece reruns to the same
//! values, so its gradients are exactly those of the piece recorded op by op.
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    /// `f(tape, inputs)`, recorded as one node that keeps `inputs` (distinct tensors) and reruns
    /// `f` in the backward. `f` must compute the same thing on every call: no randomness, no
    /// state of its own.
    pub fn recompute(
        &self,
        name: &'static str,
        inputs: &[&Tensor],
        f: impl Fn(&Tape, &[Tensor]) -> Result<Tensor> + 'static,
    ) -> Result<Tensor> {
        let saved: Vec<Tensor> = inputs.iter().map(|&x| x.clone()).collect();
        if !inputs.iter().any(|x| self.is_tracked(x)) {
            return f(self, &saved);
        }
        let y = f(&Tape::new(), &saved)?;
        Ok(self.record(name, inputs, y, move |dy, needs| {
            let inner = Tape::new();
            for (x, _) in saved.iter().zip(needs).filter(|(_, &need)| need) {
                inner.watch(x);
            }
            let y = f(&inner, &saved)?;
            if !inner.is_tracked(&y) {
                return Ok(vec![None; saved.len()]);
            }
            let mut grads = inner.backward_from(&y, dy)?;
            Ok(saved.iter().map(|x| grads.remove(x)).collect())
        }))
    }
}
