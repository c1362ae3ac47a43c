//! What a run reports at its end: the [`Summary`] `swax train` prints and keeps as
//! `summary.txt`, with the figures over the whole run (across resumes) and this invocation's.
use std::path::{Path, PathBuf};

use swax_tensor::{DType, Device};

use super::profile::StepProfile;
use super::validation::Recall;
use super::{checkpoint, data, metrics, Options};
use crate::config::Config;
use crate::model::Model;
use checkpoint::State;

#[derive(Debug, Clone)]
pub struct Summary {
    pub run: PathBuf,
    pub steps: u64,
    pub total_steps: u64,
    /// Steps this invocation ran (0: the run was already at its end).
    pub steps_run: u64,
    /// Mean training loss over the run's last (up to) 20 steps, across resumes.
    pub final_loss: Option<f64>,
    /// The last validation loss at `w_long`.
    pub val_loss: Option<f64>,
    /// Recall on the held-out probes at each window the run trained at, before and after.
    pub recall_before: Vec<(usize, Recall)>,
    pub recall_after: Vec<(usize, Recall)>,
    /// Training time over the whole run, across resumes.
    pub wall_s: f64,
    /// Over the whole run.
    pub tokens_per_s: f64,
    pub params: usize,
    pub device: Device,
    pub dtype: DType,
    pub interrupted: bool,
    pub data: String,
    /// Where the time went, when the run was profiled.
    pub profile: Option<StepProfile>,
}

impl Summary {
    /// What the run's state says (before any step, without `state`): the figures over the whole
    /// run; the caller fills in this invocation's.
    pub(super) fn of_state(
        cfg: &Config,
        opts: &Options,
        model: &Model,
        dtype: DType,
        data: &data::Data,
        state: Option<&State>,
    ) -> Summary {
        let (steps, tokens, elapsed) =
            state.map_or((0, 0, 0.0), |s| (s.step, s.tokens_seen, s.elapsed_s));
        Summary {
            run: opts.out.clone(),
            steps,
            total_steps: cfg.train.steps,
            steps_run: 0,
            final_loss: None,
            val_loss: None,
            recall_before: Vec::new(),
            recall_after: Vec::new(),
            wall_s: elapsed,
            tokens_per_s: tokens as f64 / elapsed.max(1e-9),
            params: model.params.numel(),
            device: opts.device,
            dtype,
            interrupted: false,
            data: data.origin.clone(),
            profile: None,
        }
    }

    /// The short report printed at the end and kept as `summary.txt`.
    pub fn report(&self) -> String {
        let mut s = String::new();
        if self.steps_run == 0 {
            s += &format!("nothing to train: the run is at step {}", self.steps);
            s += match self.steps >= self.total_steps {
                true => " of its train.steps (raise it with --set to train further)\n",
                false => ", where it was asked to stop\n",
            };
        }
        s += &format!(
            "{} {} steps of {} ({} parameters, {} {:?}) on {} in {:.1} s, {:.0} tokens/s\n",
            if self.interrupted {
                "stopped after"
            } else {
                "trained"
            },
            self.steps,
            self.total_steps,
            self.params,
            self.device,
            self.dtype,
            self.data,
            self.wall_s,
            self.tokens_per_s
        );
        s += &match self.final_loss {
            Some(loss) => format!("final train loss {loss:.4}"),
            None => "no training loss yet".into(),
        };
        if let Some(v) = self.val_loss {
            s += &format!(", validation loss {v:.4}");
        }
        s += "\n";
        for (when, recalls) in [
            ("before", &self.recall_before),
            ("after", &self.recall_after),
        ] {
            for (w, r) in recalls {
                s += &format!("recall {when} training at window {w}: {}\n", r.describe());
            }
        }
        let run = self.run.display();
        s += &format!(
            "metrics {run}/metrics.jsonl, loss curve {run}/loss.svg, checkpoint {}\n",
            checkpoint::latest(&self.run).map_or("none".into(), |d| d.display().to_string())
        );
        if let Some(p) = &self.profile {
            let total = p.data + p.forward + p.backward + p.optimizer;
            let share = |x: f64| 100.0 * x / total.max(1e-12);
            s += &format!(
                "step time (device synchronized between phases): data {:.1}%, forward {:.1}%, \
                 backward {:.1}%, optimizer {:.1}%\n",
                share(p.data),
                share(p.forward),
                share(p.backward),
                share(p.optimizer)
            );
            s += &match self.device {
                Device::Cpu => "GPU launches and syncs: none (the CPU runs no kernels)\n".into(),
                Device::Cuda(_) => {
                    let per = |n: u64| n as f64 / p.steps.max(1) as f64;
                    format!(
                        "per step, over {} steps: {:.1} kernel launches, {:.1} cuBLAS calls, \
                         {:.1} host syncs (not counting the profiler's own), {:.1} waits on \
                         deferred reads, {:.1} uploads of {:.2} MB\n",
                        p.steps,
                        per(p.gpu.launches),
                        per(p.gpu.blas_calls),
                        per(p.gpu.syncs),
                        per(p.gpu.event_waits),
                        per(p.gpu.uploads),
                        per(p.gpu.upload_bytes) / 1e6
                    )
                }
            };
        }
        // Only a checkpoint can be continued: a run stopped before its first step wrote
        // nothing, and one without checkpoints (train.checkpoints = false) none to resume.
        if self.interrupted || self.steps < self.total_steps {
            let made = self.run.join("config.toml").exists();
            s += &match (checkpoint::latest(&self.run), made) {
                (Some(_), _) => format!("continue with: swax train --out {run} --resume\n"),
                (None, false) => format!("{run}: no run was made, nothing was trained\n"),
                (None, true) => format!("{run} holds no checkpoint to continue from\n"),
            };
        }
        s
    }
}

/// The mean training loss of the run's last (up to) 20 steps up to `step`, from its metrics, so
/// that it covers the run whatever the invocations it took.
pub(super) fn final_loss(run: &Path, step: u64) -> Option<f64> {
    let losses: Vec<f64> = metrics::series(&run.join("metrics.jsonl"), "loss")
        .into_iter()
        .filter(|&(s, _)| s <= step as f64)
        .map(|(_, loss)| loss)
        .collect();
    let last = &losses[losses.len().saturating_sub(20)..];
    (!last.is_empty()).then(|| last.iter().sum::<f64>() / last.len() as f64)
}
