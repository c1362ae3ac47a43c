//! `swax train --profile`: where the steps' time goes. The device is synchronized at each phase
//! boundary of a step (data, forward, backward, optimizer) and the clock read, so each phase's
//! time is the device time of the work queued in it; and what each step asked of the GPU
//! (launches, cuBLAS calls, syncs, uploads) is counted.
use std::time::Instant;

use swax_tensor::counters::{self, Counts};
use swax_tensor::Device;

/// Where the steps' time went, in seconds summed over the steps run, measured with the device
/// synchronized at each phase boundary.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepProfile {
    /// Drawing the batch and moving it to the device.
    pub data: f64,
    /// The forward pass and the loss.
    pub forward: f64,
    /// The tape's backward and gathering the gradients.
    pub backward: f64,
    /// Clipping and the AdamW update, and collecting the step before's loss and norm.
    pub optimizer: f64,
    /// Steps profiled.
    pub steps: u64,
    /// What the steps asked of the GPU, summed (all zero on the CPU, which runs no kernels of
    /// swax-cuda), less the profiler's own syncs.
    pub gpu: Counts,
}

/// The phases of a step, as [`StepProfile`] sums them.
#[derive(Debug, Clone, Copy)]
pub(super) enum Phase {
    Data,
    Forward,
    Backward,
    Optimizer,
}

/// A stopwatch that, when on, synchronizes the device before reading the clock, so each lap is
/// the device time of the work queued since the last one. Off, it reads nothing and costs
/// nothing: a step keeps its overlap of host and device work.
pub(super) struct Profiler {
    device: Device,
    on: bool,
    last: Instant,
    /// The device syncs the laps made, left out of the profile's counts.
    syncs: u64,
    /// The counts and the laps' syncs when the current step began.
    step_start: (Counts, u64),
    profile: StepProfile,
}

impl Profiler {
    pub(super) fn new(device: Device, on: bool) -> Profiler {
        Profiler {
            device,
            on,
            last: Instant::now(),
            syncs: 0,
            step_start: (Counts::default(), 0),
            profile: StepProfile::default(),
        }
    }

    /// Begins a step: what ran before it (validation, a checkpoint) is left out of its laps
    /// and its counts.
    pub(super) fn start_step(&mut self) -> swax_tensor::Result<()> {
        self.step_start = (counters::counts(), self.syncs);
        self.elapsed()?;
        Ok(())
    }

    /// Adds the time since the last lap to `phase`.
    pub(super) fn lap(&mut self, phase: Phase) -> swax_tensor::Result<()> {
        let secs = self.elapsed()?;
        let p = &mut self.profile;
        *match phase {
            Phase::Data => &mut p.data,
            Phase::Forward => &mut p.forward,
            Phase::Backward => &mut p.backward,
            Phase::Optimizer => &mut p.optimizer,
        } += secs;
        Ok(())
    }

    /// Ends a step: adds what it asked of the GPU, less the laps' own syncs.
    pub(super) fn end_step(&mut self) {
        if !self.on {
            return;
        }
        let (counted, syncs_before) = &self.step_start;
        let mut c = counters::counts().since(counted);
        c.syncs = c.syncs.saturating_sub(self.syncs - syncs_before);
        self.profile.gpu = self.profile.gpu + c;
        self.profile.steps += 1;
    }

    /// The profile of the steps run, if profiling was on.
    pub(super) fn profile(&self) -> Option<StepProfile> {
        self.on.then_some(self.profile)
    }

    /// Seconds since the last reading, with the device drained first; 0 when off.
    fn elapsed(&mut self) -> swax_tensor::Result<f64> {
        if !self.on {
            return Ok(0.0);
        }
        self.device.synchronize()?;
        if matches!(self.device, Device::Cuda(_)) {
            self.syncs += 1;
        }
        let now = Instant::now();
        let secs = (now - self.last).as_secs_f64();
        self.last = now;
        Ok(secs)
    }
}
