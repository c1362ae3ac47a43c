//! The trainer behind `swax train`: the stochastic window per step, gradient accumulation,
//! AdamW with clipping on the parameters' device, periodic validation, atomic checkpoints and
//! exact resume, metrics as JSON lines, progress on stderr, and a summary at the end.
//!
//! A run is one object in phases (`run.rs`): open, then per step the step itself, validation
//! and a checkpoint when due, then finish. What it shows while it trains is `progress.rs`,
//! what it reports at the end `summary.rs`, and `--profile`'s timing of a step `profile.rs`.
//!
//! One step: draw the window (`window.rs`), run `grad_accum` micro-batches each on its own tape
//! (loss scaled by 1/grad_accum, `tape.backward`, gradients summed in place; with several ranks,
//! each runs its share of them and the sums go over the ranks while the backward runs:
//! `distributed.rs`), take the AdamW step, and queue the reads of the step's loss and gradient
//! norm (`deferred.rs`). They are collected and logged a step late, after the next step is
//! queued, so the host never waits for the device to drain; a non-finite value stops the run,
//! writing nothing more (the last checkpoint stays the last good one: values are collected
//! before every checkpoint).
//!
//! Exact resume: everything a step depends on is in the checkpoint or a function of the step
//! (the window's draw, the learning rate), and the CPU kernels are deterministic, so a resumed
//! CPU run's losses equal the uninterrupted run's bit for bit.
//!
//! The run folder: checked, locked and written only once the run can start (`run_dir`), after a
//! lower bound on the memory it needs is checked against what the device has (`memory`).
pub mod checkpoint;
pub mod claim;
pub mod data;
pub mod deferred;
pub mod distributed;
pub mod memory;
pub mod metrics;
pub mod nccl;
mod profile;
mod progress;
mod run;
pub mod run_dir;
mod summary;
pub mod validation;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use swax_nn::optim::Schedule;
use swax_tensor::{DType, Device};

use crate::config::{Config, ScheduleKind};
use crate::window::WindowSchedule;
use distributed::{Collective, Solo};
pub use profile::StepProfile;
use run::{Opened, Run};
pub use summary::Summary;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How a run is carried out (the config says what is trained).
pub struct Options {
    /// The run folder.
    pub out: PathBuf,
    pub device: Device,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// On `resume`, go on with data other than the checkpoint recorded (from its start).
    pub allow_data_change: bool,
    /// Stop (with a checkpoint) once this many steps are done in total, short of `train.steps`.
    pub stop_at: Option<u64>,
    pub progress: bool,
    /// Synchronize the device between the phases of each step and time them (see
    /// [`StepProfile`]); costs the overlap of host and device work at the phase boundaries.
    pub profile: bool,
    /// Set (by SIGINT or SIGTERM) to stop after the current step, saving a checkpoint.
    pub stop: &'static AtomicBool,
}

/// The compute dtype of `cfg` on `device`.
pub fn compute_dtype(cfg: &Config, device: Device) -> DType {
    cfg.train.dtype.on(device)
}

pub fn lr_schedule(cfg: &Config) -> Schedule {
    let o = &cfg.optim;
    match o.schedule {
        ScheduleKind::Wsd => Schedule::Wsd {
            peak: o.lr,
            warmup: o.warmup_steps,
            total: cfg.train.steps,
            decay_fraction: o.decay_fraction,
            min_ratio: o.min_lr_ratio,
        },
        ScheduleKind::Cosine => Schedule::Cosine {
            peak: o.lr,
            warmup: o.warmup_steps,
            total: cfg.train.steps,
            min_ratio: o.min_lr_ratio,
        },
    }
}

pub fn window_schedule(cfg: &Config) -> WindowSchedule {
    let t = &cfg.train;
    WindowSchedule {
        w_short: t.w_short,
        w_long: t.w_long,
        p_short: t.p_short,
        anneal_fraction: t.anneal_fraction,
        total_steps: t.steps,
        seed: t.seed,
    }
}

/// Trains `cfg` as `opts` says and returns the summary. Everything that can be checked is before
/// the run folder is touched, and the folder is locked meanwhile (see `run_dir`).
pub fn train(cfg: &Config, opts: &Options) -> Result<Summary> {
    train_in(cfg, opts, &mut Solo::default())
}

/// `train` as one rank of `group` (see `distributed`): rank 0 alone writes the run folder. A
/// rank that fails tells the others, which stop too.
pub fn train_in(cfg: &Config, opts: &Options, group: &mut dyn Collective) -> Result<Summary> {
    let trained = train_rank(cfg, opts, group);
    if let Err(e) = &trained {
        group.fail(&e.to_string());
    }
    trained
}

/// The run's phases in order (see `run`).
fn train_rank(cfg: &Config, opts: &Options, group: &mut dyn Collective) -> Result<Summary> {
    match Run::open(cfg, opts, group)? {
        Opened::Ready(run) => run.train(),
        Opened::Done(summary) => Ok(*summary),
    }
}

/// Creates and returns `runs/NAME`, or `runs/NAME-2`, `-3`, ...: the first that did not exist.
/// Made by `create_dir`, which one process alone can do, so that runs started together each
/// take their own folder.
pub fn fresh_run_dir(root: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let names = std::iter::once(name.to_string()).chain((2..).map(|i| format!("{name}-{i}")));
    for path in names.map(|n| root.join(n)) {
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", path.display()).into()),
        }
    }
    unreachable!("the names go on without end")
}

/// Removes a folder [`fresh_run_dir`] made when the run left nothing in it but its lock (it
/// stopped before writing its config), so that a start that did not happen leaves nothing.
pub fn remove_unused_run_dir(path: &Path) {
    if path.join("config.toml").exists() {
        return;
    }
    // Best effort: only an empty folder is removed, and a folder left is harmless.
    let _ = std::fs::remove_file(path.join(swax_data::lock::LOCK_FILE));
    let _ = std::fs::remove_dir(path);
}
