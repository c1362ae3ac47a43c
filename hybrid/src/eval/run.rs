//! Running a model on the evaluation: the tasks at each length and depth, scored from one
//! teacher-forced pass each (`score`), and the loss by position on held-out sequences. The
//! model is behind [`Forward`] (token ids in, logits out), so the scoring runs the same on a
//! checkpoint, on hand-made test predictors, or on any other way of producing the logits.
use swax_data::{
    mqar, niah, passkey, MqarConfig, NiahConfig, NiahKind, PasskeyConfig, Split, TaskSample,
    Tokenizer,
};
use swax_nn::Weights;
use swax_tensor::{DType, Device, Tensor};

use super::results::{LossBucket, LossCurve, TaskCell};
use super::score::{exact_answers, scored_prefix};
use crate::batch::ids;
use crate::config::Config;
use crate::model::{Model, SequenceState};
use crate::train::data::{recall_data, Source, VAL_ROWS};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Something that gives next-token logits for a sequence of token ids, piece by piece: `each`
/// gets the logits `[Tp, V]` of consecutive pieces in order (with the position of each piece's
/// first row), so a caller that scores a piece as it comes holds one piece's logits at a time.
pub trait Forward {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()>;
}

/// The whole sequence in one pass, without a tape (`Weights::inference`).
pub struct OneShot<'a> {
    pub model: &'a Model,
    pub window: usize,
    pub dtype: DType,
    pub device: Device,
}

impl Forward for OneShot<'_> {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()> {
        let w = Weights::inference(&self.model.params, self.dtype)?;
        let t = tokens.len();
        let logits = self
            .model
            .logits(&w, &ids(tokens, 1, t, self.device)?, self.window)?;
        let v = logits.dims()[2];
        each(0, &logits.reshape(vec![t, v])?)
    }
}

/// The sequence in pieces of `piece` tokens, each layer carrying its window tail or recurrent
/// state to the next (`Model::forward_piece`): the same logits as [`OneShot`], while the
/// activations held stay those of one piece.
pub struct InPieces<'a> {
    pub model: &'a Model,
    pub window: usize,
    pub piece: usize,
    pub dtype: DType,
    pub device: Device,
}

impl Forward for InPieces<'_> {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()> {
        let w = Weights::inference(&self.model.params, self.dtype)?;
        let mut state = SequenceState::default();
        let step = self.piece.max(1);
        for (i, piece) in tokens.chunks(step).enumerate() {
            let x = ids(piece, 1, piece.len(), self.device)?;
            let logits = self.model.forward_piece(&w, &x, self.window, &mut state)?;
            let v = logits.dims()[2];
            each(i * step, &logits.reshape(vec![piece.len(), v])?)?;
        }
        Ok(())
    }
}

/// The logits `[T, V]` of the whole sequence, joined from `f`'s pieces (for tests and small
/// inputs: scoring never needs them all at once).
pub fn all_logits(f: &dyn Forward, tokens: &[u32]) -> Result<Tensor> {
    let mut parts = Vec::new();
    f.pieces(tokens, &mut |_, logits| {
        parts.push(logits.clone());
        Ok(())
    })?;
    Ok(Tensor::concat(&parts.iter().collect::<Vec<_>>(), 0)?)
}

/// The negative log-likelihood (nats, f32) of each row's target under logits `[T, V]`:
/// `lse(row) - row[target]`, computed where the logits are, so only T numbers come back.
pub fn row_nll(logits: &Tensor, targets: &[u32]) -> Result<Vec<f32>> {
    let (t, v) = (logits.dims()[0], logits.dims()[1]);
    if targets.len() != t {
        return Err(format!("{} targets for {t} logit rows", targets.len()).into());
    }
    if let Some(&bad) = targets.iter().find(|&&y| y as usize >= v) {
        return Err(format!("target token {bad} is outside the vocabulary of {v}").into());
    }
    // The flat index of a row's target must fit a U32 id: take the rows in blocks.
    let rows = (u32::MAX as usize / v.max(1)).max(1);
    let mut out = Vec::with_capacity(t);
    for start in (0..t).step_by(rows) {
        let n = rows.min(t - start);
        let block = logits.narrow(0, start, n)?;
        let tg = &targets[start..start + n];
        let ys = Tensor::from_vec(tg.to_vec(), vec![n], block.device())?;
        let (_, stats) = block.cross_entropy(&ys, None)?;
        let at: Vec<u32> = tg
            .iter()
            .enumerate()
            .map(|(r, &y)| (r * v) as u32 + y)
            .collect();
        let picked = block
            .reshape(vec![n * v])?
            .index_select(0, &Tensor::from_vec(at, vec![n], block.device())?)?;
        let nll = stats
            .lse
            .to_dtype(DType::F32)?
            .sub(&picked.to_dtype(DType::F32)?)?;
        out.extend(nll.to_vec::<f32>()?);
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// RULER's single needle in a haystack, at each depth.
    Niah,
    /// Passkey retrieval, at each depth.
    Passkey,
    /// Multi-query associative recall (no depth: its queries are spread by a power law).
    Mqar,
}

impl Task {
    pub const ALL: [Task; 3] = [Task::Niah, Task::Passkey, Task::Mqar];

    pub fn name(self) -> &'static str {
        match self {
            Task::Niah => "niah",
            Task::Passkey => "passkey",
            Task::Mqar => "mqar",
        }
    }

    pub fn has_depth(self) -> bool {
        self != Task::Mqar
    }

    /// Sample `seed` of this task at `len` tokens (`depth` for the depth tasks).
    pub fn sample(
        self,
        tok: &dyn Tokenizer,
        len: usize,
        depth: f64,
        seed: u64,
    ) -> swax_data::Result<TaskSample> {
        match self {
            Task::Niah => niah(
                tok,
                &NiahConfig {
                    kind: NiahKind::Single,
                    len,
                    depths: Some(vec![depth]),
                },
                seed,
            ),
            Task::Passkey => passkey(
                tok,
                &PasskeyConfig {
                    len,
                    depth: Some(depth),
                },
                seed,
            ),
            // Zoology's power law; pairs grow with the length up to 64, and stay under half
            // the vocabulary (keys come from its lower half).
            Task::Mqar => {
                let half = (tok.vocab_size() as usize - 1) / 2;
                let pairs = (len / 16).clamp(1, 64).min(half.saturating_sub(1).max(1));
                mqar(
                    tok,
                    &MqarConfig {
                        len,
                        num_kv_pairs: pairs,
                        power_a: 0.01,
                    },
                    seed,
                )
            }
        }
    }
}

impl std::str::FromStr for Task {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Task, String> {
        Task::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown task {s:?}: expected niah, passkey, mqar or loss"))
    }
}

/// Greedy argmax after every token of `tokens`, taken piece by piece where the logits are.
pub fn predictions(f: &dyn Forward, tokens: &[u32]) -> Result<Vec<u32>> {
    let mut pred = Vec::with_capacity(tokens.len());
    f.pieces(tokens, &mut |_, logits| {
        pred.extend(logits.argmax(-1, false)?.to_vec::<u32>()?);
        Ok(())
    })?;
    Ok(pred)
}

/// Per answer of `sample`, whether the greedy model gets it exactly (one pass over its prefix).
pub fn score_sample(f: &dyn Forward, sample: &TaskSample) -> Result<Vec<bool>> {
    Ok(exact_answers(
        sample,
        &predictions(f, scored_prefix(sample))?,
    )?)
}

/// The seed of sample `i` at `len` and `depth`: a different stream per (length, depth, sample),
/// the same for every model.
pub fn sample_seed(seed: u64, len: usize, depth: Option<f64>, i: u64) -> u64 {
    let depth_key = depth.map_or(0, |d| (d * 1e6) as u64);
    seed ^ (len as u64).rotate_left(24) ^ depth_key.rotate_left(44) ^ i
}

/// `samples` samples of `task` at `len` and `depth`, each run once and scored by exact match;
/// answers whose fact lies less than `window` tokens back are also counted apart (attention
/// could see the fact; beyond the window only a recurrent state can carry it).
#[allow(clippy::too_many_arguments)]
pub fn eval_task(
    f: &dyn Forward,
    tok: &dyn Tokenizer,
    task: Task,
    len: usize,
    depth: Option<f64>,
    samples: usize,
    seed: u64,
    window: usize,
) -> Result<TaskCell> {
    let mut cell = TaskCell {
        task: task.name().into(),
        length: len,
        depth,
        samples,
        answers: 0,
        correct: 0,
        near_answers: 0,
        near_correct: 0,
        generated: None,
    };
    for i in 0..samples as u64 {
        let seed = sample_seed(seed, len, depth, i);
        let sample = task.sample(tok, len, depth.unwrap_or(0.0), seed)?;
        let exact = score_sample(f, &sample)?;
        for (a, &ok) in sample.answers.iter().zip(&exact) {
            cell.answers += 1;
            cell.correct += usize::from(ok);
            if a.distance() < window {
                cell.near_answers += 1;
                cell.near_correct += usize::from(ok);
            }
        }
    }
    Ok(cell)
}

/// Mean loss in bits per bucket of `bucket` positions over `seqs` (each L + 1 tokens: the
/// model reads the first L and predicts the last L). Bucket k holds the predictions made after
/// reading positions `k * bucket ..`, i.e. with that much context.
pub fn loss_curve(
    f: &dyn Forward,
    seqs: &[Vec<u32>],
    bucket: usize,
    unit: &str,
) -> Result<LossCurve> {
    let len = seqs.first().map_or(0, |s| s.len().saturating_sub(1));
    if len == 0 {
        return Err("the loss by position: no held-out tokens to score".into());
    }
    let bucket = bucket.max(1);
    let n = len.div_ceil(bucket);
    let mut sums = vec![0.0f64; n];
    for seq in seqs {
        if seq.len() != len + 1 {
            return Err(format!(
                "held-out sequences differ in length: {} and {}",
                seq.len(),
                len + 1
            )
            .into());
        }
        f.pieces(&seq[..len], &mut |start, logits| {
            let rows = logits.dims()[0];
            let nll = row_nll(logits, &seq[start + 1..start + 1 + rows])?;
            for (r, x) in nll.into_iter().enumerate() {
                sums[(start + r) / bucket] += f64::from(x);
            }
            Ok(())
        })?;
    }
    let count = seqs.len() as f64;
    Ok(LossCurve {
        length: len,
        samples: seqs.len(),
        unit: unit.into(),
        data: String::new(),
        buckets: (0..n)
            .map(|k| {
                let (start, end) = (k * bucket, ((k + 1) * bucket).min(len));
                LossBucket {
                    start,
                    end,
                    bits: sums[k] / (count * (end - start) as f64) / std::f64::consts::LN_2,
                }
            })
            .collect(),
    })
}

/// `samples` held-out sequences of `len + 1` tokens from the validation split of the run's data
/// (or of `data`, a source as `data.source` names one), as the trainer's validation draws them.
pub fn held_out(
    cfg: &Config,
    data: Option<&str>,
    len: usize,
    samples: usize,
) -> Result<Vec<Vec<u32>>> {
    let mut c = cfg.clone();
    if let Some(source) = data {
        c.data.source = source.to_string();
    }
    // Generated rows are made at the length asked, every token of them scored (the trainer
    // scores only MQAR's answers; the loss by position reads the whole row).
    if let Source::Recall(kind) = Source::parse(&c.data.source) {
        let rows = recall_data(&c, kind, len + 1)?;
        return (0..samples as u64)
            .map(|i| Ok(rows.row(Split::Val, VAL_ROWS + i)?.sample.tokens))
            .collect();
    }
    c.data.seq_len = len;
    c.data.batch_size = 1;
    c.train.eval_batches = samples;
    c.train.recall_probes = 0;
    // Only the validation split is read: keep the generated training stream small, and the
    // validation stream long enough for the samples.
    c.data.corpus_train_tokens = 2 * (len + 1);
    c.data.corpus_val_tokens = c.data.corpus_val_tokens.max(2 * samples * (len + 1));
    let d = crate::train::data::open(&c, None, crate::train::data::Part::WHOLE)?;
    let seqs: Vec<Vec<u32>> = d
        .val
        .into_iter()
        .map(|b| {
            let mut s = b.inputs;
            s.push(*b.targets.last().expect("a batch has tokens"));
            s
        })
        .collect();
    // A loss over no tokens is no measurement: say so rather than record it.
    if seqs.is_empty() {
        return Err(format!(
            "the loss by position: {} holds no held-out sequence of {} tokens (its validation \
             split is empty or shorter); use data with a validation split, a shorter length, \
             or --tasks without loss",
            c.data.source,
            len + 1
        )
        .into());
    }
    Ok(seqs)
}
