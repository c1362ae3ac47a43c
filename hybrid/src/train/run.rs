//! One rank's run, in its phases: [`Run::open`] (the folder, the model, the optimizer and the
//! data, new or resumed), [`Run::step`] (one optimizer step over the micro-batches),
//! [`Run::validate`], [`Run::checkpoint`] and [`Run::finish`] (the summary and the loss curve).
//! [`Run::train`] calls them in that order; the module comment of `train` says what a step does
//! and why its values are read a step late.
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::json;
use swax_autograd::Tape;
use swax_nn::optim::{AdamW, AdamWConfig, Schedule};
use swax_nn::Weights;
use swax_tensor::{DType, Device, Tensor};

use super::checkpoint::{self, DataRecord, State};
use super::data::{self, Data};
use super::deferred::{Deferred, StepRecord, StepResult};
use super::distributed::{self, Buckets, Collective, StepGrads};
use super::metrics::{self, Metrics};
use super::profile::{Phase, Profiler};
use super::progress::Progress;
use super::run_dir::{self, RunDir};
use super::summary::{final_loss, Summary};
use super::validation::{self, Recall};
use super::{compute_dtype, lr_schedule, memory, window_schedule, Options, Result};
use crate::batch;
use crate::config::{Config, OptimConfig};
use crate::model::Model;
use crate::window::WindowSchedule;

/// What `Run::open` found: a run to train, or one already at its end.
pub(super) enum Opened<'a> {
    Ready(Box<Run<'a>>),
    /// Nothing to train: the run folder stays as it is.
    Done(Box<Summary>),
}

/// A run being trained by one rank.
pub(super) struct Run<'a> {
    /// The config as the run folder settled it (the dataset's tokenizer).
    cfg: Config,
    opts: &'a Options,
    group: &'a mut dyn Collective,
    /// Held to the end: its lock keeps other trainers out of the folder.
    _folder: RunDir,
    rank0: bool,
    /// This rank's micro-batches per step.
    micro: usize,
    dtype: DType,
    model: Model,
    opt: AdamW,
    data: Data,
    state: State,
    start_step: u64,
    /// The step this invocation stops at (`--stop-at`, or `train.steps`).
    end: u64,
    metrics: Metrics,
    windows: WindowSchedule,
    lrs: Schedule,
    buckets: Buckets,
    deferred: Deferred,
    progress: Progress,
    profiler: Profiler,
    /// Training time of this invocation, added to the checkpoint's.
    clock: Instant,
    elapsed_before: f64,
    /// The last validation loss at `w_long`.
    val_loss: Option<f64>,
    recall_before: Vec<(usize, Recall)>,
    last_recall: Vec<(usize, Recall)>,
    /// A stop was asked (on any rank): the run ends after the current step, with a checkpoint.
    interrupted: bool,
}

impl<'a> Run<'a> {
    /// Opens the run folder (locked from here to the end), builds the model and the optimizer,
    /// restores the checkpoint on `--resume`, opens the data and the metrics, and scores the
    /// probes once before a new run's first step. Everything that can be checked is before
    /// the folder is written.
    pub(super) fn open(
        cfg: &Config,
        opts: &'a Options,
        group: &'a mut dyn Collective,
    ) -> Result<Opened<'a>> {
        let (run, device) = (&opts.out, opts.device);
        let rank0 = group.rank() == 0;
        let micro = distributed::micro_batches(cfg.train.grad_accum, group.world())?;
        let mut folder = match rank0 {
            true => RunDir::open(run, opts.resume)?,
            false => RunDir::follow(run, opts.resume)?,
        };
        let cfg = folder.settle(cfg)?;
        memory::check(&cfg, device)?;
        let dtype = compute_dtype(&cfg, device);
        let mut model = Model::new(&cfg.model, cfg.train.seed, device)?;
        let mut opt = adamw(&cfg.optim, &model)?;
        let resumed = match opts.resume {
            true => Some(checkpoint::load(run, &mut model.params, &mut opt, device)?),
            false => None,
        };
        distributed::share_params(group, &mut model.params)?;
        let part = data::Part {
            rank: group.rank(),
            world: group.world(),
        };
        let data = run_dir::open_data(&cfg, resumed.as_ref(), opts.allow_data_change, part)?;
        let start_step = resumed.as_ref().map_or(0, |s| s.step);
        let end = opts.stop_at.unwrap_or(cfg.train.steps).min(cfg.train.steps);
        if start_step >= end {
            return Ok(Opened::Done(Box::new(Summary {
                final_loss: final_loss(run, start_step),
                ..Summary::of_state(&cfg, opts, &model, dtype, &data, resumed.as_ref())
            })));
        }
        let metrics = match rank0 {
            true => open_metrics(&mut folder, &cfg, run, start_step)?,
            false => Metrics::discard(run),
        };
        let windows = window_schedule(&cfg);
        let recall_before = match (&resumed, rank0) {
            (None, true) => recall(&model, &data, &windows, &cfg, dtype, device)?,
            _ => Vec::new(),
        };
        let state = start_state(resumed, &data);
        let progress = Progress::new(opts.progress && rank0, start_step, cfg.train.steps);
        let clock = Instant::now();
        let elapsed_before = state.elapsed_s;
        let profiler = Profiler::new(device, opts.profile);
        let buckets = Buckets::plan(&model.params, cfg.train.reduce_dtype.dtype());
        let deferred = Deferred::new(device, micro)?;
        Ok(Opened::Ready(Box::new(Run {
            lrs: lr_schedule(&cfg),
            cfg,
            opts,
            group,
            _folder: folder,
            rank0,
            micro,
            dtype,
            model,
            opt,
            data,
            state,
            start_step,
            end,
            metrics,
            windows,
            buckets,
            deferred,
            progress,
            profiler,
            clock,
            elapsed_before,
            val_loss: None,
            recall_before,
            last_recall: Vec::new(),
            interrupted: false,
        })))
    }

    /// Runs the steps to the end (or to a stop), validating and saving when due.
    pub(super) fn train(mut self) -> Result<Summary> {
        for step in self.start_step..self.end {
            let window = self.step(step)?;
            let (at, t) = (self.state.step, &self.cfg.train);
            let every = |n: u64| n > 0 && at.is_multiple_of(n);
            let done = at == self.end;
            let (validate, save) = (done || every(t.eval_every), every(t.save_every));
            if validate {
                self.validate(window)?;
            }
            // A stop asked for by then (at this step or its validation) saves too.
            if self.cfg.train.checkpoints && (done || self.interrupted || save) {
                self.checkpoint()?;
            }
            self.progress.set_position(self.state.step);
            if self.interrupted {
                break;
            }
        }
        self.finish()
    }

    /// Step `step` (from 0): the micro-batches' gradients, the AdamW update, and the reads of
    /// its loss and gradient norm queued, to be logged at the next settle. Returns its window.
    fn step(&mut self, step: u64) -> Result<usize> {
        let step_clock = Instant::now();
        self.profiler.start_step()?;
        let window = self.windows.window(step);
        let lr = self.lrs.lr(step);
        let (losses, grads) = self.gradients(window)?;
        let stats = self.opt.step(&mut self.model.params, &grads, lr)?;
        let tokens = self.tokens_per_step();
        self.state.step = step + 1;
        self.state.adamw_step = self.opt.step;
        self.state.tokens_seen += tokens;
        self.state.loader = self.data.train.state();
        // The step before's reads were queued ahead of this step's work: waiting for them
        // leaves this step running.
        self.interrupted |= self.settle()?;
        self.profiler.lap(Phase::Optimizer)?;
        self.state.elapsed_s = self.elapsed_before + self.clock.elapsed().as_secs_f64();
        let record = StepRecord {
            step,
            window,
            lr,
            tokens: self.state.tokens_seen,
            tokens_per_s: tokens as f64 / step_clock.elapsed().as_secs_f64().max(1e-9),
            elapsed_s: self.state.elapsed_s,
            allreduce_exposed_s: self.group.exposed_s(),
        };
        self.deferred.start(record, &losses, &stats.grad_norm)?;
        self.profiler.end_step();
        Ok(window)
    }

    /// The step's micro-batch losses, and its gradients: each micro-batch's forward and
    /// backward on a tape of its own, its loss scaled by 1/grad_accum, the gradients summed
    /// over the micro-batches and the ranks.
    fn gradients(&mut self, window: usize) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        let mut losses = Vec::with_capacity(self.micro);
        let mut grads = StepGrads::new(&self.buckets, &self.model.params);
        for i in 0..self.micro {
            let batch = self.data.train.next_batch()?;
            let tape = Tape::new();
            let w = Weights::training(&tape, &self.model.params, self.dtype)?;
            let (x, y) = batch::to_device(&batch, self.opts.device)?;
            self.profiler.lap(Phase::Data)?;
            let loss = self.model.loss(&w, &x, &y, window)?;
            self.profiler.lap(Phase::Forward)?;
            let scaled = tape.scale(&loss, 1.0 / self.cfg.train.grad_accum as f64)?;
            // On one rank the backward is the tape's; with several, it sends the gradients to
            // the other ranks in buckets as it finishes them (`distributed`).
            match self.group.world() {
                1 => grads.add(&self.model.params, tape.backward(&scaled)?)?,
                _ => grads.backward_sending(&tape, &scaled, i + 1 == self.micro, self.group)?,
            }
            self.profiler.lap(Phase::Backward)?;
            losses.push(loss);
        }
        let grads = grads.finish(&self.model.params, self.group)?;
        self.profiler.lap(Phase::Backward)?;
        Ok((losses, grads))
    }

    /// Validates the parameters of the step just taken (on rank 0): the loss at `w_long` and at
    /// the step's `window` (a model that trained only at a short window is judged at its own
    /// window too), a sample when due, and the recall on the probes.
    fn validate(&mut self, window: usize) -> Result<()> {
        // Validation reads the parameters this step made: they must be finite.
        self.interrupted |= self.settle()?;
        if !self.rank0 {
            return Ok(());
        }
        let (step, device) = (self.state.step, self.opts.device);
        let t = &self.cfg.train;
        let mut val_windows = vec![t.w_long, window];
        val_windows.dedup();
        if !self.data.val.is_empty() {
            for &w in &val_windows {
                let v = validation::val_loss(&self.model, &self.data.val, w, self.dtype, device)?;
                self.metrics
                    .log(json!({"step": step, "val_loss": v, "window": w}))?;
                if w == t.w_long {
                    self.val_loss = Some(v);
                }
            }
        }
        if t.sample_every > 0 && step % t.sample_every == 0 {
            let run = &self.opts.out;
            let sampled = sample(&self.cfg, run, &self.model, &self.data, self.dtype, device)?;
            if let Some(text) = sampled {
                self.progress.println(&format!("step {step}: {text:?}"));
                self.metrics.log(json!({"step": step, "sample": text}))?;
            }
        }
        self.last_recall = recall(
            &self.model,
            &self.data,
            &self.windows,
            &self.cfg,
            self.dtype,
            device,
        )?;
        for (w, r) in &self.last_recall {
            self.metrics.log(json!({
                "step": step, "tokens": self.state.tokens_seen, "window": w,
                "recall": r.accuracy(), "recall_near": r.near_accuracy(),
                "recall_far": r.far_accuracy(), "recall_near_n": r.near.0,
                "recall_far_n": r.far.0,
            }))?;
        }
        if let Some(v) = self.val_loss {
            self.progress.validated(step, v);
        }
        Ok(())
    }

    /// Saves a checkpoint of the step just taken (rank 0 writes it).
    fn checkpoint(&mut self) -> Result<()> {
        // Never save parameters whose step has not been seen finite.
        self.interrupted |= self.settle()?;
        if self.rank0 {
            checkpoint::save(
                &self.opts.out,
                &self.cfg,
                &self.model.params,
                &self.opt,
                &self.state,
            )?;
        }
        Ok(())
    }

    /// Logs the last step, then writes the summary and the loss curve (rank 0).
    fn finish(mut self) -> Result<Summary> {
        // A stop asked now comes after the last step: there is nothing left to stop.
        self.settle()?;
        self.progress.finish();
        let run = &self.opts.out;
        // The final step's validation scored the probes: that is the recall after training.
        let recall_after = match self.state.step == self.cfg.train.steps {
            true => std::mem::take(&mut self.last_recall),
            false => Vec::new(),
        };
        let summary = Summary {
            steps_run: self.state.step - self.start_step,
            final_loss: final_loss(run, self.state.step),
            val_loss: self.val_loss,
            recall_before: std::mem::take(&mut self.recall_before),
            recall_after,
            interrupted: self.interrupted,
            profile: self.profiler.profile(),
            ..Summary::of_state(
                &self.cfg,
                self.opts,
                &self.model,
                self.dtype,
                &self.data,
                Some(&self.state),
            )
        };
        if !self.rank0 {
            return Ok(summary);
        }
        metrics::plot(
            self.metrics.path(),
            &run.join("loss.svg"),
            &format!("{} — {}", self.cfg.model.name, run.display()),
        )?;
        swax_nn::checkpoint::write_atomic(&run.join("summary.txt"), summary.report().as_bytes())?;
        Ok(summary)
    }

    /// Collects the pending step's loss and norm, sums its loss over the ranks with whether any
    /// rank was asked to stop (every rank calls this at the same points), stops on a non-finite
    /// value, logs it. Returns whether the ranks are to stop.
    fn settle(&mut self) -> Result<bool> {
        let Some(r) = self.deferred.collect()? else {
            return Ok(false);
        };
        let asked = f64::from(u8::from(self.opts.stop.load(Ordering::SeqCst)));
        let summed = self.group.sum_host(&[r.loss_sum, asked])?;
        self.log_step(&r, summed[0] / self.cfg.train.grad_accum as f64)?;
        Ok(summed[1] > 0.0)
    }

    /// Logs a step whose values have reached the host, or stops the run at a non-finite one.
    fn log_step(&mut self, r: &StepResult, loss: f64) -> Result<()> {
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
            self.progress.abandon();
            let kept = checkpoint::latest(&self.opts.out)
                .map_or("none was written yet".to_string(), |d| {
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
        self.metrics.log(line)?;
        self.progress.logged(step + 1, loss, window, tokens_per_s);
        Ok(())
    }

    /// Tokens in one step over all ranks: the global batch.
    fn tokens_per_step(&self) -> u64 {
        let d = &self.cfg.data;
        (d.batch_size * d.seq_len * self.cfg.train.grad_accum) as u64
    }
}

/// Writes the run's `config.toml` (creating and locking a new folder) and opens its metrics at
/// `start_step`, with the config changes of a `--resume` logged: the run's first writes.
fn open_metrics(folder: &mut RunDir, cfg: &Config, run: &Path, start_step: u64) -> Result<Metrics> {
    folder.commit(cfg)?;
    let mut metrics = Metrics::open(run, Some(start_step))?;
    folder.record_changes(&mut metrics, start_step)?;
    Ok(metrics)
}

/// The state the run starts from: the checkpoint's, or step 0's; either records the data the
/// run now trains on.
fn start_state(resumed: Option<State>, data: &Data) -> State {
    let record = DataRecord {
        origin: data.origin.clone(),
        fingerprint: data.train.fingerprint(),
    };
    State {
        data: Some(record),
        ..resumed.unwrap_or(State {
            step: 0,
            adamw_step: 0,
            loader: data.train.state(),
            tokens_seen: 0,
            elapsed_s: 0.0,
            data: None,
        })
    }
}

/// AdamW as `optim` configures it, over `model`'s parameters.
fn adamw(o: &OptimConfig, model: &Model) -> Result<AdamW> {
    Ok(AdamW::new(
        &model.params,
        AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            max_grad_norm: (o.grad_clip > 0.0).then_some(o.grad_clip),
        },
    )?)
}

/// Recall on the held-out probes at each window the run trains at (none without probes).
fn recall(
    model: &Model,
    data: &Data,
    windows: &WindowSchedule,
    cfg: &Config,
    dtype: DType,
    device: Device,
) -> swax_tensor::Result<Vec<(usize, Recall)>> {
    if data.probes.is_empty() {
        return Ok(Vec::new());
    }
    let b = cfg.data.batch_size;
    windows
        .trained_windows()
        .into_iter()
        .map(|w| {
            let r = validation::recall(model, &data.probes, b, w, dtype, device)?;
            Ok((w, r))
        })
        .collect()
}

/// A short greedy continuation of the start of the first held-out sequence (a probe, else a
/// validation row), as text with the tokenizer of the run folder `run`; None when there is
/// neither.
fn sample(
    cfg: &Config,
    run: &Path,
    model: &Model,
    data: &Data,
    dtype: DType,
    device: Device,
) -> Result<Option<String>> {
    let start = match (data.probes.first(), data.val.first()) {
        (Some(p), _) => &p.tokens[..],
        (None, Some(b)) => &b.inputs[..b.t],
        (None, None) => return Ok(None),
    };
    let tok = cfg.data.tokenizer.open(run)?;
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
