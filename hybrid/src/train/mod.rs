//! The trainer behind `swax train`: the stochastic window per step, gradient accumulation,
//! AdamW with clipping on the parameters' device, periodic validation, atomic checkpoints and
//! exact resume, metrics as JSON lines, a progress bar, and a summary at the end.
//!
//! One step: draw the window (`window.rs`), run `grad_accum` micro-batches each on its own tape
//! (loss scaled by 1/grad_accum, gradients summed), check the loss is finite (else stop, writing
//! nothing: the last checkpoint stays the last good one), take the AdamW step, log. The host
//! waits for the device once a step, to read the loss and the gradient norm it logs.
//!
//! Exact resume: everything a step depends on is in the checkpoint or a function of the step
//! (the window's draw, the learning rate), and the CPU kernels are deterministic, so a resumed
//! CPU run's losses equal the uninterrupted run's bit for bit.
pub mod checkpoint;
pub mod data;
pub mod eval;
pub mod metrics;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use swax_autograd::Tape;
use swax_nn::optim::{AdamW, AdamWConfig, Schedule};
use swax_nn::Weights;
use swax_tensor::{DType, Device, Tensor};

use crate::config::Config;
use crate::model::Model;
use crate::window::WindowSchedule;
use checkpoint::State;
use eval::Recall;
use metrics::Metrics;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How a run is carried out (the config says what is trained).
pub struct Options {
    /// The run folder.
    pub out: PathBuf,
    pub device: Device,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// Stop (with a checkpoint) once this many steps are done in total, short of `train.steps`.
    pub stop_at: Option<u64>,
    pub progress: bool,
    /// Synchronize the device between the phases of each step and time them (see
    /// [`StepProfile`]); costs the overlap of host and device work at the phase boundaries.
    pub profile: bool,
    /// Set (by Ctrl-C) to stop after the current step, saving a checkpoint.
    pub stop: &'static AtomicBool,
}

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
    /// Clipping and the AdamW update.
    pub optimizer: f64,
}

/// A stopwatch that, when on, synchronizes the device before reading the clock, so each lap is
/// the device time of the work queued since the last one.
struct Laps {
    device: Device,
    on: bool,
    last: Instant,
}

impl Laps {
    fn lap(&mut self) -> swax_tensor::Result<f64> {
        if !self.on {
            return Ok(0.0);
        }
        self.device.synchronize()?;
        let now = Instant::now();
        let secs = (now - self.last).as_secs_f64();
        self.last = now;
        Ok(secs)
    }
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub run: PathBuf,
    pub steps: u64,
    pub total_steps: u64,
    /// Mean training loss over the last (up to) 20 steps of this invocation.
    pub final_loss: f64,
    /// The last validation loss at `w_long`.
    pub val_loss: Option<f64>,
    /// Recall on the held-out probes at each window the run trained at, before and after.
    pub recall_before: Vec<(usize, Recall)>,
    pub recall_after: Vec<(usize, Recall)>,
    pub wall_s: f64,
    pub tokens_per_s: f64,
    pub params: usize,
    pub device: Device,
    pub dtype: DType,
    pub interrupted: bool,
    pub data: String,
    /// Where the time went, when the run was profiled.
    pub profile: Option<StepProfile>,
}

/// The compute dtype of `cfg` on `device`.
pub fn compute_dtype(cfg: &Config, device: Device) -> DType {
    match (cfg.train.dtype.as_str(), device) {
        ("bf16", _) | ("auto", Device::Cuda(_)) => DType::BF16,
        _ => DType::F32,
    }
}

pub fn lr_schedule(cfg: &Config) -> Schedule {
    let o = &cfg.optim;
    match o.schedule.as_str() {
        "wsd" => Schedule::Wsd {
            peak: o.lr,
            warmup: o.warmup_steps,
            total: cfg.train.steps,
            decay_fraction: o.decay_fraction,
            min_ratio: o.min_lr_ratio,
        },
        _ => Schedule::Cosine {
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

/// Trains `cfg` as `opts` says and returns the summary.
pub fn train(cfg: &Config, opts: &Options) -> Result<Summary> {
    let run = &opts.out;
    if !opts.resume && checkpoint::latest(run).is_some() {
        return Err(format!(
            "{} already holds a run: pass --resume to continue it, or another --out",
            run.display()
        )
        .into());
    }
    std::fs::create_dir_all(run)?;
    swax_nn::checkpoint::write_atomic(&run.join("config.toml"), cfg.to_toml().as_bytes())?;

    let device = opts.device;
    let dtype = compute_dtype(cfg, device);
    let mut model = Model::new(&cfg.model, cfg.train.seed, device)?;
    let o = &cfg.optim;
    let mut opt = AdamW::new(
        &model.params,
        AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            max_grad_norm: (o.grad_clip > 0.0).then_some(o.grad_clip),
        },
    )?;
    let resumed = match opts.resume {
        true => Some(checkpoint::load(run, &mut model.params, &mut opt, device)?),
        false => None,
    };
    let mut data = data::open(cfg, resumed.as_ref().map(|s| s.loader))?;
    let mut metrics = Metrics::open(run, Some(resumed.as_ref().map_or(0, |s| s.step)))?;

    let windows = window_schedule(cfg);
    let lrs = lr_schedule(cfg);
    let t = &cfg.train;
    let eval_windows = windows.trained_windows();
    let (b, seq) = (cfg.data.batch_size, cfg.data.seq_len);
    let tokens_per_step = (b * seq * t.grad_accum) as u64;

    let recall = |model: &Model| -> swax_tensor::Result<Vec<(usize, Recall)>> {
        match data.probes.is_empty() {
            true => Ok(Vec::new()),
            false => eval_windows
                .iter()
                .map(|&w| Ok((w, eval::recall(model, &data.probes, b, w, dtype, device)?)))
                .collect(),
        }
    };
    let recall_before = match resumed {
        None => recall(&model)?,
        Some(_) => Vec::new(),
    };

    let start_step = resumed.as_ref().map_or(0, |s| s.step);
    let mut state = resumed.unwrap_or(State {
        step: 0,
        adamw_step: 0,
        loader: data.train.state(),
        window_seed: t.seed,
        tokens_seen: 0,
        elapsed_s: 0.0,
    });
    let end = opts.stop_at.unwrap_or(t.steps).min(t.steps);
    let bar = progress_bar(opts.progress, start_step, t.steps);
    let clock = Instant::now();
    let elapsed_before = state.elapsed_s;
    let mut recent: Vec<f64> = Vec::new();
    let mut val_loss = None;
    let mut last_recall = Vec::new();
    let mut interrupted = false;
    let mut laps = Laps {
        device,
        on: opts.profile,
        last: Instant::now(),
    };
    let mut profile = StepProfile::default();

    for step in start_step..end {
        let step_clock = Instant::now();
        laps.lap()?;
        let window = windows.window(step);
        let lr = lrs.lr(step);
        let mut loss_sum = 0.0;
        let mut grads: Option<Vec<Tensor>> = None;
        for _ in 0..t.grad_accum {
            let batch = data.train.next_batch()?;
            let tape = Tape::new();
            let w = Weights::training(&tape, &model.params, dtype)?;
            let x = eval::ids(&batch.inputs, batch.b, batch.t, device)?;
            let y = eval::ids(&batch.targets, batch.b, batch.t, device)?;
            profile.data += laps.lap()?;
            let loss = model.loss(&w, &x, &y, window)?;
            profile.forward += laps.lap()?;
            let scaled = tape.scale(&loss, 1.0 / t.grad_accum as f64)?;
            let g = tape.backward(&scaled)?;
            let micro: Vec<Tensor> = model
                .params
                .iter()
                .map(|p| match g.get(&p.value) {
                    Some(g) => Ok(g.clone()),
                    None => p.value.zeros_like(),
                })
                .collect::<swax_tensor::Result<_>>()?;
            grads = Some(match grads {
                None => micro,
                Some(acc) => acc
                    .iter()
                    .zip(&micro)
                    .map(|(a, m)| a.add(m))
                    .collect::<swax_tensor::Result<_>>()?,
            });
            profile.backward += laps.lap()?;
            loss_sum += loss.to_scalar()?;
        }
        let loss = loss_sum / t.grad_accum as f64;
        if !loss.is_finite() {
            bar.abandon();
            let kept = checkpoint::latest(run).map_or("none was written yet".to_string(), |d| {
                d.display().to_string()
            });
            return Err(format!(
                "the loss is {loss} at step {step} (window {window}, lr {lr:.3e}): stopping. The \
                 last good checkpoint is kept ({kept}); try a lower optim.lr or \
                 optim.grad_clip, or train.dtype=\"f32\""
            )
            .into());
        }
        let grads = grads.expect("grad_accum >= 1");
        let stats = opt.step(&mut model.params, &grads, lr)?;
        let grad_norm = stats.grad_norm.to_scalar()?;
        profile.optimizer += laps.lap()?;
        state.step = step + 1;
        state.adamw_step = opt.step;
        state.tokens_seen += tokens_per_step;
        state.loader = data.train.state();
        state.elapsed_s = elapsed_before + clock.elapsed().as_secs_f64();
        let tok_s = tokens_per_step as f64 / step_clock.elapsed().as_secs_f64().max(1e-9);
        metrics.log(json!({
            "step": state.step, "loss": loss, "lr": lr, "window": window,
            "grad_norm": grad_norm, "tokens": state.tokens_seen, "tokens_per_s": tok_s,
            "elapsed_s": state.elapsed_s,
        }))?;
        recent.push(loss);
        if recent.len() > 20 {
            recent.remove(0);
        }

        let done = state.step == end;
        let due = (t.eval_every > 0 && state.step % t.eval_every == 0) || done;
        if due {
            // At w_long, and at this step's window: a model that trained only at a short window
            // is judged at its own window too.
            let mut val_windows = vec![t.w_long, window];
            val_windows.dedup();
            if !data.val.is_empty() {
                for &w in &val_windows {
                    let v = eval::val_loss(&model, &data.val, w, dtype, device)?;
                    metrics.log(json!({"step": state.step, "val_loss": v, "window": w}))?;
                    if w == t.w_long {
                        val_loss = Some(v);
                    }
                }
            }
            last_recall = recall(&model)?;
            for (w, r) in &last_recall {
                metrics.log(json!({
                    "step": state.step, "tokens": state.tokens_seen, "window": w,
                    "recall": r.accuracy(), "recall_near": r.near_accuracy(),
                    "recall_far": r.far_accuracy(), "recall_near_n": r.near.0,
                    "recall_far_n": r.far.0,
                }))?;
            }
        }
        interrupted = opts.stop.load(Ordering::SeqCst);
        if done || interrupted || (t.save_every > 0 && state.step % t.save_every == 0) {
            checkpoint::save(run, &model.params, &opt, &state)?;
        }
        bar.set_position(state.step);
        bar.set_message(format!(
            "loss {loss:.4}{} | w {window:>4} | {:.0} tok/s",
            val_loss.map_or(String::new(), |v| format!(" val {v:.4}")),
            tok_s
        ));
        if interrupted {
            break;
        }
    }
    bar.finish_and_clear();
    // The final step's validation scored the probes: that is the recall after training.
    let recall_after = match state.step == t.steps {
        true => last_recall,
        false => Vec::new(),
    };
    metrics::plot(
        metrics.path(),
        &run.join("loss.svg"),
        &format!("{} — {}", cfg.model.name, run.display()),
    )?;
    let wall_s = clock.elapsed().as_secs_f64();
    let steps_run = state.step.saturating_sub(start_step);
    let summary = Summary {
        run: run.clone(),
        steps: state.step,
        total_steps: t.steps,
        final_loss: recent.iter().sum::<f64>() / recent.len().max(1) as f64,
        val_loss,
        recall_before,
        recall_after,
        wall_s,
        tokens_per_s: (steps_run * tokens_per_step) as f64 / wall_s.max(1e-9),
        params: model.params.numel(),
        device,
        dtype,
        interrupted,
        profile: opts.profile.then_some(profile),
        data: data.origin.clone(),
    };
    std::fs::write(run.join("summary.txt"), summary.report())?;
    Ok(summary)
}

fn progress_bar(show: bool, at: u64, total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(total),
        match show {
            true => ProgressDrawTarget::stderr(),
            false => ProgressDrawTarget::hidden(),
        },
    );
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} {msg} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_position(at);
    bar
}

impl Summary {
    /// The short report printed at the end and kept as `summary.txt`.
    pub fn report(&self) -> String {
        let mut s = format!(
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
        s += &format!("final train loss {:.4}", self.final_loss);
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
        }
        if self.interrupted || self.steps < self.total_steps {
            s += &format!("continue with: swax train --out {run} --resume\n");
        }
        s
    }
}

/// `runs/NAME`, or `runs/NAME-2`, `-3`, ... : the first that does not exist yet.
pub fn fresh_run_dir(root: &Path, name: &str) -> PathBuf {
    let first = root.join(name);
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|i| root.join(format!("{name}-{i}")))
        .find(|p| !p.exists())
        .expect("some suffix is free")
}
