//! A step's loss and gradient norm, read a step late. Reading them as soon as a step is queued
//! (`to_scalar`) would make the host wait until the device has run everything, leaving the
//! device idle while the host queues the next step. Instead their copies to the host are
//! queued right behind step k's work, and collected once step k+1's work is queued too: by then
//! the device is usually past them, and waiting for them leaves step k+1 running.
//!
//! The trainer collects early wherever the run depends on the values: before a validation, a
//! checkpoint, and the end of the run. So a non-finite loss found a step late stops the run
//! before the parameters it made are saved (the checkpoint before stays the last good one).
use swax_tensor::{Device, Readback, Result, Tensor};

/// What a step leaves to log once its values reach the host.
#[derive(Debug, Clone, Copy)]
pub struct StepRecord {
    /// The step's index (0-based; it logs as `step + 1`).
    pub step: u64,
    pub window: usize,
    pub lr: f64,
    /// Tokens seen once this step is done.
    pub tokens: u64,
    pub tokens_per_s: f64,
    pub elapsed_s: f64,
    /// All-reduce time the backward did not hide (several ranks only).
    pub allreduce_exposed_s: Option<f64>,
}

/// A step's record and its values.
#[derive(Debug, Clone, Copy)]
pub struct StepResult {
    pub record: StepRecord,
    /// The sum of this rank's micro-batch losses (the trainer sums it over the ranks and
    /// divides by the step's micro-batches).
    pub loss_sum: f64,
    pub grad_norm: f64,
}

/// The reads of at most one step in flight.
pub struct Deferred {
    read: Readback,
    pending: Option<StepRecord>,
}

impl Deferred {
    /// For steps of `micro_batches` losses on `device`.
    pub fn new(device: Device, micro_batches: usize) -> Result<Deferred> {
        Ok(Deferred {
            read: Readback::new(device, micro_batches + 1)?,
            pending: None,
        })
    }

    /// Queues the reads of a step's micro-batch losses (one-element tensors) and gradient
    /// norm. The step before must have been collected.
    pub fn start(
        &mut self,
        record: StepRecord,
        losses: &[Tensor],
        grad_norm: &Tensor,
    ) -> Result<()> {
        let mut tensors: Vec<&Tensor> = losses.iter().collect();
        tensors.push(grad_norm);
        self.read.start(&tensors)?;
        self.pending = Some(record);
        Ok(())
    }

    /// The pending step's values, once they are on the host; None when no step is pending.
    pub fn collect(&mut self) -> Result<Option<StepResult>> {
        let Some(record) = self.pending.take() else {
            return Ok(None);
        };
        let mut values = self.read.finish()?;
        let first = |v: &Vec<f64>| v.first().copied().unwrap_or(f64::NAN);
        let grad_norm = values.pop().as_ref().map_or(f64::NAN, first);
        // Summed in micro-batch order from 0, as the loss has always been.
        let loss_sum = values.iter().fold(0.0, |s, v| s + first(v));
        Ok(Some(StepResult {
            record,
            loss_sum,
            grad_norm,
        }))
    }
}
