//! The trainer behind `swax train`: the stochastic window per step, gradient accumulation,
//! AdamW with clipping on the parameters' device, periodic validation, atomic checkpoints and
//! exact resume, metrics as JSON lines, a progress bar, and a summary at the end.
//!
//! One step: draw the window (`window.rs`), run `grad_accum` micro-batches each on its own tape
//! (loss scaled by 1/grad_accum, gradients summed in place; with several ranks, each runs its
//! share of them and the sums go over the ranks: `distributed.rs`), take the AdamW step, and queue the
//! reads of the step's loss and gradient norm (`deferred.rs`). They are collected and logged a
//! step late, after the next step is queued, so the host never waits for the device to drain;
//! a non-finite value stops the run, writing nothing more (the last checkpoint stays the last
//! good one: values are collected before every checkpoint).
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
pub mod run_dir;
pub mod validation;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use swax_autograd::Tape;
use swax_nn::optim::{AdamW, AdamWConfig, Schedule};
use swax_nn::Weights;
use swax_tensor::counters::{self, Counts};
use swax_tensor::{DType, Device};

use crate::batch;
use crate::config::Config;
use crate::model::Model;
use crate::window::WindowSchedule;
use checkpoint::{DataRecord, State};
use deferred::{Deferred, StepRecord, StepResult};
use distributed::{Buckets, Collective, Solo, StepGrads};
use metrics::Metrics;
use run_dir::RunDir;
use validation::Recall;

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

/// A stopwatch that, when on, synchronizes the device before reading the clock, so each lap is
/// the device time of the work queued since the last one.
struct Laps {
    device: Device,
    on: bool,
    last: Instant,
    /// The device syncs the laps made, left out of the profile's counts.
    syncs: u64,
}

impl Laps {
    fn lap(&mut self) -> swax_tensor::Result<f64> {
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

fn train_rank(cfg: &Config, opts: &Options, group: &mut dyn Collective) -> Result<Summary> {
    let run = &opts.out;
    let rank0 = group.rank() == 0;
    let micro = distributed::micro_batches(cfg.train.grad_accum, group.world())?;
    let mut folder = match rank0 {
        true => RunDir::open(run, opts.resume)?,
        false => RunDir::follow(run, opts.resume)?,
    };
    let cfg = &folder.settle(cfg)?;
    let device = opts.device;
    memory::check(cfg, device)?;
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
    distributed::share_params(group, &mut model.params)?;
    let part = data::Part {
        rank: group.rank(),
        world: group.world(),
    };
    let mut data = run_dir::open_data(cfg, resumed.as_ref(), opts.allow_data_change, part)?;
    let data_record = DataRecord {
        origin: data.origin.clone(),
        fingerprint: data.train.fingerprint(),
    };
    let start_step = resumed.as_ref().map_or(0, |s| s.step);
    let end = opts.stop_at.unwrap_or(cfg.train.steps).min(cfg.train.steps);
    if start_step >= end {
        // Nothing to train: the run folder stays as it is.
        return Ok(Summary {
            final_loss: final_loss(run, start_step),
            ..Summary::of_state(cfg, opts, &model, dtype, &data, resumed.as_ref())
        });
    }
    let mut metrics = match rank0 {
        true => {
            folder.commit(cfg)?;
            let mut metrics = Metrics::open(run, Some(start_step))?;
            folder.record_changes(&mut metrics, start_step)?;
            metrics
        }
        false => Metrics::discard(run),
    };

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
                .map(|&w| {
                    Ok((
                        w,
                        validation::recall(model, &data.probes, b, w, dtype, device)?,
                    ))
                })
                .collect(),
        }
    };
    let recall_before = match (&resumed, rank0) {
        (None, true) => recall(&model)?,
        _ => Vec::new(),
    };

    let mut state = resumed.unwrap_or(State {
        step: 0,
        adamw_step: 0,
        loader: data.train.state(),
        tokens_seen: 0,
        elapsed_s: 0.0,
        data: None,
    });
    state.data = Some(data_record);
    let bar = progress_bar(opts.progress && rank0, start_step, t.steps);
    let clock = Instant::now();
    let elapsed_before = state.elapsed_s;
    let mut val_loss = None;
    let mut last_recall = Vec::new();
    let mut interrupted = false;
    let mut laps = Laps {
        device,
        on: opts.profile,
        last: Instant::now(),
        syncs: 0,
    };
    let mut profile = StepProfile::default();
    let reduce_dtype = match t.reduce_dtype.as_str() {
        "bf16" => DType::BF16,
        _ => DType::F32,
    };
    let buckets = Buckets::plan(&model.params, reduce_dtype);
    let mut deferred = Deferred::new(device, micro)?;
    // Collects the pending step's loss and norm, sums its loss over the ranks with whether any
    // rank was asked to stop (every rank calls this at the same points), stops on a non-finite
    // value, logs it. Returns whether the ranks are to stop.
    let settle = |deferred: &mut Deferred,
                  metrics: &mut Metrics,
                  group: &mut dyn Collective|
     -> Result<bool> {
        let Some(r) = deferred.collect()? else {
            return Ok(false);
        };
        let asked = f64::from(u8::from(opts.stop.load(Ordering::SeqCst)));
        let summed = group.sum_host(&[r.loss_sum, asked])?;
        log_step(&r, summed[0] / t.grad_accum as f64, metrics, &bar, run)?;
        Ok(summed[1] > 0.0)
    };

    for step in start_step..end {
        let step_clock = Instant::now();
        let counted = counters::counts();
        let syncs_before = laps.syncs;
        laps.lap()?;
        let window = windows.window(step);
        let lr = lrs.lr(step);
        let mut losses = Vec::with_capacity(micro);
        let mut grads = StepGrads::new(&buckets, &model.params);
        for i in 0..micro {
            let batch = data.train.next_batch()?;
            let tape = Tape::new();
            let w = Weights::training(&tape, &model.params, dtype)?;
            let (x, y) = batch::to_device(&batch, device)?;
            profile.data += laps.lap()?;
            let loss = model.loss(&w, &x, &y, window)?;
            profile.forward += laps.lap()?;
            let scaled = tape.scale(&loss, 1.0 / t.grad_accum as f64)?;
            grads.backward(&tape, &scaled, i + 1 == micro, group)?;
            profile.backward += laps.lap()?;
            losses.push(loss);
        }
        let grads = grads.finish(&model.params, group)?;
        profile.backward += laps.lap()?;
        let stats = opt.step(&mut model.params, &grads, lr)?;
        state.step = step + 1;
        state.adamw_step = opt.step;
        state.tokens_seen += tokens_per_step;
        state.loader = data.train.state();
        // The step before's reads were queued ahead of this step's work: waiting for them
        // leaves this step running.
        interrupted |= settle(&mut deferred, &mut metrics, group)?;
        profile.optimizer += laps.lap()?;
        state.elapsed_s = elapsed_before + clock.elapsed().as_secs_f64();
        let record = StepRecord {
            step,
            window,
            lr,
            tokens: state.tokens_seen,
            tokens_per_s: tokens_per_step as f64 / step_clock.elapsed().as_secs_f64().max(1e-9),
            elapsed_s: state.elapsed_s,
            allreduce_exposed_s: group.exposed_s(),
        };
        deferred.start(record, &losses, &stats.grad_norm)?;
        if opts.profile {
            let mut c = counters::counts().since(&counted);
            c.syncs = c.syncs.saturating_sub(laps.syncs - syncs_before);
            profile.gpu = profile.gpu + c;
            profile.steps += 1;
        }

        let done = state.step == end;
        let due = (t.eval_every > 0 && state.step % t.eval_every == 0) || done;
        if due {
            // Validation reads the parameters this step made: they must be finite.
            interrupted |= settle(&mut deferred, &mut metrics, group)?;
        }
        if due && rank0 {
            // At w_long, and at this step's window: a model that trained only at a short window
            // is judged at its own window too.
            let mut val_windows = vec![t.w_long, window];
            val_windows.dedup();
            if !data.val.is_empty() {
                for &w in &val_windows {
                    let v = validation::val_loss(&model, &data.val, w, dtype, device)?;
                    metrics.log(json!({"step": state.step, "val_loss": v, "window": w}))?;
                    if w == t.w_long {
                        val_loss = Some(v);
                    }
                }
            }
            if t.sample_every > 0 && state.step % t.sample_every == 0 {
                if let Some(text) = sample(cfg, &model, &data, dtype, device)? {
                    bar.println(format!("step {}: {text:?}", state.step));
                    metrics.log(json!({"step": state.step, "sample": text}))?;
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
            if let Some(v) = val_loss {
                bar.set_message(format!("val {v:.4}"));
            }
        }
        let save = t.checkpoints
            && (done || interrupted || (t.save_every > 0 && state.step % t.save_every == 0));
        if save {
            // Never save parameters whose step has not been seen finite.
            interrupted |= settle(&mut deferred, &mut metrics, group)?;
        }
        if save && rank0 {
            checkpoint::save(run, cfg, &model.params, &opt, &state)?;
        }
        bar.set_position(state.step);
        if interrupted {
            break;
        }
    }
    settle(&mut deferred, &mut metrics, group)?;
    bar.finish_and_clear();
    // The final step's validation scored the probes: that is the recall after training.
    let recall_after = match state.step == t.steps {
        true => last_recall,
        false => Vec::new(),
    };
    let summary = Summary {
        steps_run: state.step - start_step,
        final_loss: final_loss(run, state.step),
        val_loss,
        recall_before,
        recall_after,
        interrupted,
        profile: opts.profile.then_some(profile),
        ..Summary::of_state(cfg, opts, &model, dtype, &data, Some(&state))
    };
    if !rank0 {
        return Ok(summary);
    }
    metrics::plot(
        metrics.path(),
        &run.join("loss.svg"),
        &format!("{} — {}", cfg.model.name, run.display()),
    )?;
    swax_nn::checkpoint::write_atomic(&run.join("summary.txt"), summary.report().as_bytes())?;
    Ok(summary)
}

/// Logs a step whose values have reached the host, or stops the run at a non-finite one.
fn log_step(
    r: &StepResult,
    loss: f64,
    metrics: &mut Metrics,
    bar: &ProgressBar,
    run: &Path,
) -> Result<()> {
    let StepRecord {
        step,
        window,
        lr,
        tokens,
        tokens_per_s,
        elapsed_s,
        allreduce_exposed_s,
    } = r.record;
    // A non-finite loss or gradient norm made the step's update non-finite too.
    if !(loss.is_finite() && r.grad_norm.is_finite()) {
        bar.abandon();
        let kept = checkpoint::latest(run).map_or("none was written yet".to_string(), |d| {
            d.display().to_string()
        });
        let what = match loss.is_finite() {
            true => format!("the gradient norm is {}", r.grad_norm),
            false => format!("the loss is {loss}"),
        };
        return Err(format!(
            "{what} at step {step} (window {window}, lr {lr:.3e}): stopping. The last good \
             checkpoint is kept ({kept}); try a lower optim.lr or optim.grad_clip, or \
             train.dtype=\"f32\""
        )
        .into());
    }
    let mut line = json!({
        "step": step + 1, "loss": loss, "lr": lr, "window": window,
        "grad_norm": r.grad_norm, "tokens": tokens, "tokens_per_s": tokens_per_s,
        "elapsed_s": elapsed_s,
    });
    if let Some(s) = allreduce_exposed_s {
        line["allreduce_exposed_s"] = json!(s);
    }
    metrics.log(line)?;
    bar.set_message(format!(
        "loss {loss:.4} | w {window:>4} | {tokens_per_s:.0} tok/s"
    ));
    Ok(())
}

/// The mean training loss of the run's last (up to) 20 steps up to `step`, from its metrics, so
/// that it covers the run whatever the invocations it took.
fn final_loss(run: &Path, step: u64) -> Option<f64> {
    let losses: Vec<f64> = metrics::series(&run.join("metrics.jsonl"), "loss")
        .into_iter()
        .filter(|&(s, _)| s <= step as f64)
        .map(|(_, loss)| loss)
        .collect();
    let last = &losses[losses.len().saturating_sub(20)..];
    (!last.is_empty()).then(|| last.iter().sum::<f64>() / last.len() as f64)
}

/// A short greedy continuation of the start of the first held-out sequence (a probe, else a
/// validation row), as text; None when there is neither.
fn sample(
    cfg: &Config,
    model: &Model,
    data: &data::Data,
    dtype: DType,
    device: Device,
) -> Result<Option<String>> {
    let start = match (data.probes.first(), data.val.first()) {
        (Some(p), _) => &p.tokens[..],
        (None, Some(b)) => &b.inputs[..b.t],
        (None, None) => return Ok(None),
    };
    let tok = cfg
        .data
        .tokenizer
        .parse::<swax_data::TokenizerKind>()?
        .build()?;
    let prompt = &start[..start.len().min(32)];
    let req = crate::generate::Request {
        max_tokens: 48,
        sampling: crate::generate::Sampling::GREEDY,
        batch: 1,
        window: cfg.train.w_long,
        piece: cfg.data.seq_len,
        stop: Some(tok.eot()),
    };
    let out = crate::generate::generate(model, prompt, &req, dtype, device, &mut |_, _| {})?;
    Ok(Some(format!(
        "{}|{}",
        tok.decode(prompt)?,
        tok.decode(&out[0])?
    )))
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
    /// What the run's state says (before any step, without `state`): the figures over the whole
    /// run; the caller fills in this invocation's.
    fn of_state(
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
