//! Evaluating one loaded checkpoint at one window: what to run (a [`Plan`]: tasks, lengths,
//! depths, samples, the loss by position) and running it to [`EvalResults`]. `swax eval` and
//! `swax study` both go through here.
use std::time::Instant;

use swax_data::{Tokenizer, TokenizerKind};
use swax_tensor::DType;

use super::generated::{eval_generated, Generation};
use super::results::{EvalResults, LossCurve, TaskCell};
use super::run::{eval_task, held_out, loss_curve, Forward, InPieces, OneShot, Task};
use crate::config::Config;
use crate::loaded::Loaded;
use crate::train::data::Source;
use crate::train::{compute_dtype, memory};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub tasks: Vec<Task>,
    /// The loss by position at the longest length, too.
    pub loss: bool,
    pub lengths: Vec<usize>,
    /// Needle depths of the tasks that have them.
    pub depths: Vec<f64>,
    pub window: usize,
    /// Samples per task, length and depth; held-out sequences for the loss.
    pub samples: usize,
    pub seed: u64,
    /// Tokens per piece (0: one pass per sequence).
    pub piece: usize,
    /// Positions per bucket of the loss curve.
    pub bucket: usize,
    /// The held-out text of the loss, as `data.source` names it (None: the run's own).
    pub data: Option<String>,
    /// Also score the text tasks by generation (RULER's string_match_all over up to this many
    /// generated tokens); 0: teacher-forced exact match only.
    pub generate_tokens: usize,
}

/// The evaluation that fits what the run was trained on: an MQAR run's is MQAR recall at each
/// length (within the window and beyond it); a text run's the loss by position and the passkey
/// and needle tasks.
pub fn default_tasks(cfg: &Config) -> Vec<String> {
    let tasks: &[&str] = match Source::parse(&cfg.data.source).is_text() {
        true => &["niah", "passkey", "loss"],
        false => &["mqar"],
    };
    tasks.iter().map(|t| t.to_string()).collect()
}

/// What to know before reading `plan`'s scores of a run trained on `cfg`'s data: what it was
/// trained on, then each measure that asks it to read what it never read.
pub fn notes(cfg: &Config, plan: &Plan) -> Vec<String> {
    let trained = Source::parse(&cfg.data.source);
    let mut notes = vec![format!("the model was trained on {}", trained.describe())];
    let text_tasks: Vec<&str> = plan
        .tasks
        .iter()
        .filter(|t| t.has_depth())
        .map(|t| t.name())
        .collect();
    if !trained.is_text() && !text_tasks.is_empty() {
        notes.push(format!(
            "{} ask for facts in English text, which this model never read: their scores say \
             nothing of what it learned (expect 0%)",
            text_tasks.join(" and ")
        ));
    }
    if trained.is_text() && plan.tasks.contains(&Task::Mqar) {
        notes.push(
            "mqar's rows are token ids, not text, which this model never read: its score says \
             nothing of what it learned"
                .into(),
        );
    }
    let held_out = Source::parse(plan.data.as_deref().unwrap_or(&cfg.data.source));
    if plan.loss && !held_out.is_text() {
        notes.push(
            "the loss scores every token of the MQAR rows, keys and random filler included, \
             which no model can predict (training scores only the answers): it is far above \
             the loss of the answers"
                .into(),
        );
    } else if plan.loss && !trained.is_text() {
        notes.push("the loss is on text, which this model never read".into());
    }
    notes
}

/// Runs `plan` on `loaded`, telling `progress` what each part took; a plan that cannot fit in
/// the device's memory is refused first (`memory::check_eval`).
pub fn evaluate(
    loaded: &Loaded,
    plan: &Plan,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalResults> {
    let cfg = &loaded.cfg;
    memory::check_eval(
        cfg,
        loaded.device,
        &plan.lengths,
        plan.samples,
        plan.piece,
        plan.loss,
    )?;
    let kind = &cfg.data.tokenizer;
    let tok = kind.open(&loaded.run)?;
    let dtype = compute_dtype(cfg, loaded.device);
    let f = forward(loaded, plan, dtype);
    let cells = retrieval(loaded, plan, dtype, &*f, &*tok, progress)?;
    let data = plan.data.as_deref().unwrap_or(&cfg.data.source);
    let loss = match (plan.loss, plan.lengths.iter().max()) {
        (true, Some(&len)) => Some(loss_by_position(loaded, plan, &*f, data, len, progress)?),
        _ => None,
    };
    Ok(EvalResults {
        run: loaded.run.display().to_string(),
        checkpoint: loaded.checkpoint.display().to_string(),
        step: loaded.step,
        model: cfg.model.name.clone(),
        pattern: cfg.model.pattern.clone(),
        train_len: cfg.data.seq_len,
        trained_on: cfg.data.source.clone(),
        window: plan.window,
        tokenizer: kind.name().into(),
        tasks: cells,
        other_data: (plan.loss && !same_source(data, &cfg.data.source)).then(|| data.to_string()),
        loss,
    })
}

/// The model's forward at the plan's window: the whole sequence at once, or in pieces through
/// the decoding caches (`plan.piece`).
fn forward<'m>(loaded: &'m Loaded, plan: &Plan, dtype: DType) -> Box<dyn Forward + 'm> {
    let (model, window, device) = (&loaded.model, plan.window, loaded.device);
    match plan.piece {
        0 => Box::new(OneShot {
            model,
            window,
            dtype,
            device,
        }),
        piece => Box::new(InPieces {
            model,
            window,
            piece,
            dtype,
            device,
        }),
    }
}

/// Every retrieval task of the plan at each length (and depth, where the task has one), scored
/// teacher-forced and, where the plan asks, by generation.
fn retrieval(
    loaded: &Loaded,
    plan: &Plan,
    dtype: DType,
    f: &dyn Forward,
    tok: &dyn Tokenizer,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<TaskCell>> {
    let (model, window, device) = (&loaded.model, plan.window, loaded.device);
    let mut cells = Vec::new();
    for &task in &plan.tasks {
        let depths: Vec<Option<f64>> = match task.has_depth() {
            true => plan.depths.iter().map(|&d| Some(d)).collect(),
            false => vec![None],
        };
        'lengths: for &len in &plan.lengths {
            for &depth in &depths {
                let clock = Instant::now();
                let samples = plan.samples;
                match eval_task(f, tok, task, len, depth, samples, plan.seed, window) {
                    Ok(mut cell) => {
                        // MQAR's answers follow keys the prompt has not reached: it is scored
                        // teacher-forced only.
                        if plan.generate_tokens > 0 && task.has_depth() {
                            let g = Generation {
                                model,
                                window,
                                dtype,
                                device,
                                max_tokens: plan.generate_tokens,
                                piece: plan.piece.max(1).min(len),
                            };
                            let seed = plan.seed;
                            cell.generated =
                                Some(eval_generated(&g, tok, task, len, depth, samples, seed)?);
                        }
                        progress(&format!(
                            "  {} len {len} depth {}: {:.1}%{} ({})",
                            task.name(),
                            depth.map_or("-".into(), |d| format!("{d:.2}")),
                            cell.accuracy(),
                            cell.generated.map_or(String::new(), |g| format!(
                                ", generated {:.1}%",
                                100.0 * g
                            )),
                            throughput(len * samples, clock)
                        ));
                        cells.push(cell);
                    }
                    // A task that cannot be laid out at a short length is left out, not fatal.
                    Err(e) => {
                        progress(&format!("  {} len {len}: skipped ({e})", task.name()));
                        continue 'lengths;
                    }
                }
            }
        }
    }
    Ok(cells)
}

/// The held-out loss by position over `len` tokens of `data`.
fn loss_by_position(
    loaded: &Loaded,
    plan: &Plan,
    f: &dyn Forward,
    data: &str,
    len: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<LossCurve> {
    let seqs = held_out(&loaded.cfg, plan.data.as_deref(), len, plan.samples)?;
    let clock = Instant::now();
    // A byte token is a byte of text only where the data is text.
    let unit = match (&loaded.cfg.data.tokenizer, Source::parse(data).is_text()) {
        (TokenizerKind::Bytes, true) => "bits/byte",
        _ => "bits/token",
    };
    let curve = LossCurve {
        data: data.to_string(),
        ..loss_curve(f, &seqs, plan.bucket, unit)?
    };
    progress(&format!(
        "  loss len {len}: {}",
        throughput(len * seqs.len(), clock)
    ));
    if let Some(b) = curve.buckets.iter().find(|b| !b.bits.is_finite()) {
        progress(&format!(
            "  warning: the loss overflowed ({}) from position {}: results.json holds \
             null there",
            b.bits, b.start
        ));
    }
    Ok(curve)
}

/// Tokens per second since `clock` (every token is read back through the logits, so the device
/// work is finished), for the progress lines.
fn throughput(tokens: usize, clock: Instant) -> String {
    let secs = clock.elapsed().as_secs_f64();
    format!(
        "{tokens} tokens in {secs:.2} s, {:.0} tokens/s",
        tokens as f64 / secs.max(1e-9)
    )
}

/// Whether two `data.source` values name the same data: the same words, or the same folder
/// reached by other paths.
fn same_source(a: &str, b: &str) -> bool {
    let real = |s: &str| std::path::Path::new(s).canonicalize().ok();
    a == b || real(a).is_some_and(|p| Some(p) == real(b))
}
