//! Recall-training data: generated training rows of exactly T + 1 tokens, each a function of
//! (seed, split, index), so a run needs no files and resumes from a row count.
//!
//! - `mqar`: multi-query associative recall in Zoology's layout (`tasks::mqar`), supervised on
//!   the queried values only, as Zoology trains it (the rest of the row is random tokens).
//! - `passkey`: filler with pass keys (under several names and wordings) stated and asked for
//!   later, at distances log-uniform from a few tokens to the row's length.
//! - `recall-mix`: the same with every kind of fact: the corpus's codes and towns, pass keys and
//!   special numbers.
//!
//! Held out from the evaluation tasks: MQAR rows come from another random stream than its
//! evaluation samples, and the text rows use other filler and other wordings than the passkey
//! and needle tasks. Held-out probes (`probes`) are validation rows, disjoint from training rows.

use std::str::FromStr;

use crate::corpus::{Corpus, CorpusConfig, FactMix};
use crate::dataset::Split;
use crate::error::{DataError, Result};
use crate::loader::{Batch, Fnv, LoaderState, IGNORE};
use crate::rng::Rng;
use crate::sample::TaskSample;
use crate::tasks::mqar::{mqar_from, MqarConfig};
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallKind {
    Mqar,
    Passkey,
    Mix,
}

impl RecallKind {
    pub const ALL: [RecallKind; 3] = [RecallKind::Mqar, RecallKind::Passkey, RecallKind::Mix];

    pub fn name(self) -> &'static str {
        match self {
            RecallKind::Mqar => "mqar",
            RecallKind::Passkey => "passkey",
            RecallKind::Mix => "recall-mix",
        }
    }
}

impl FromStr for RecallKind {
    type Err = DataError;
    fn from_str(s: &str) -> Result<RecallKind> {
        RecallKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                DataError::Config(format!(
                    "unknown recall data {s:?}: expected mqar, passkey or recall-mix"
                ))
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecallConfig {
    pub kind: RecallKind,
    /// Tokens per row: the sequence length T plus one (inputs and shifted targets).
    pub len: usize,
    pub seed: u64,
    /// MQAR's key-value pairs per row (0: T / 16, as the evaluation's MQAR at that length).
    pub mqar_pairs: usize,
}

/// A training row: its tokens, its answers, and whether only the answers are supervised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub sample: TaskSample,
    pub answers_only: bool,
}

impl Row {
    /// Inputs (all tokens but the last) and targets (the next token, or [`IGNORE`] where the
    /// row is not supervised).
    pub fn inputs_targets(&self) -> (&[u32], Vec<u32>) {
        let t = &self.sample.tokens;
        let n = t.len() - 1;
        let targets = match self.answers_only {
            false => t[1..].to_vec(),
            true => {
                let mut y = vec![IGNORE; n];
                for a in &self.sample.answers {
                    for (j, &tok) in a.tokens.iter().enumerate() {
                        y[a.pos - 1 + j] = tok;
                    }
                }
                y
            }
        };
        (&t[..n], targets)
    }
}

/// Separates the training MQAR stream from the validation one (the evaluation's is a third).
const MQAR_STREAM: [u64; 2] = [0x4d51_5452, 0x4d51_5641];

pub struct RecallData {
    tok: Box<dyn Tokenizer>,
    cfg: RecallConfig,
}

impl std::fmt::Debug for RecallData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecallData")
            .field("tokenizer", &self.tok.kind())
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl RecallData {
    pub fn new(tok: Box<dyn Tokenizer>, cfg: RecallConfig) -> Result<RecallData> {
        if cfg.len < 16 {
            return Err(DataError::Config(format!(
                "recall rows need a sequence length of at least 15 tokens, not {}",
                cfg.len.saturating_sub(1)
            )));
        }
        let data = RecallData { tok, cfg };
        // Settings under which no row can be made fail here, not at the first batch.
        data.row(Split::Train, 0)?;
        Ok(data)
    }

    pub fn config(&self) -> &RecallConfig {
        &self.cfg
    }

    fn mqar_config(&self) -> MqarConfig {
        let pairs = match self.cfg.mqar_pairs {
            0 => ((self.cfg.len - 1) / 16).clamp(1, 64),
            n => n,
        };
        MqarConfig {
            len: self.cfg.len,
            num_kv_pairs: pairs,
            power_a: 0.01,
        }
    }

    fn corpus(&self, facts: FactMix) -> Result<Corpus<'_>> {
        Corpus::new(
            &*self.tok,
            CorpusConfig {
                seed: self.cfg.seed,
                facts,
                ..CorpusConfig::default()
            },
        )
    }

    /// Row `index` of `split`.
    pub fn row(&self, split: Split, index: u64) -> Result<Row> {
        let (sample, answers_only) = match self.cfg.kind {
            RecallKind::Mqar => {
                let mut rng = Rng::derive(self.cfg.seed, &[MQAR_STREAM[split as usize], index]);
                (mqar_from(&*self.tok, &self.mqar_config(), &mut rng)?, true)
            }
            RecallKind::Passkey => (
                self.corpus(FactMix::Passkey)?
                    .row(split, index, self.cfg.len),
                false,
            ),
            RecallKind::Mix => (
                self.corpus(FactMix::All)?.row(split, index, self.cfg.len),
                false,
            ),
        };
        Ok(Row {
            sample,
            answers_only,
        })
    }

    /// Rows `first..first + b` of `split` as a batch.
    pub fn batch(&self, split: Split, first: u64, b: usize) -> Result<Batch> {
        let t = self.cfg.len - 1;
        let mut batch = Batch {
            b,
            t,
            inputs: Vec::with_capacity(b * t),
            targets: Vec::with_capacity(b * t),
        };
        for index in first..first + b as u64 {
            let row = self.row(split, index)?;
            let (inputs, targets) = row.inputs_targets();
            batch.inputs.extend_from_slice(inputs);
            batch.targets.extend(targets);
        }
        Ok(batch)
    }

    /// `count` held-out validation rows that hold at least one answer, cut to their last answer
    /// (the scoring runs the prefix up to it).
    pub fn probes(&self, count: usize) -> Result<Vec<TaskSample>> {
        let tries = 64 + 16 * count as u64;
        let mut probes = Vec::with_capacity(count);
        for index in 0..tries {
            if probes.len() == count {
                break;
            }
            let mut sample = self.row(Split::Val, index)?.sample;
            let Some(last) = sample.answers.last() else {
                continue;
            };
            sample.tokens.truncate(last.pos + last.tokens.len());
            probes.push(sample);
        }
        if probes.len() < count {
            return Err(DataError::Config(format!(
                "only {} of {count} {} rows of {} tokens hold an answer: raise data.seq_len",
                probes.len(),
                self.cfg.kind.name(),
                self.cfg.len - 1
            )));
        }
        Ok(probes)
    }
}

/// Batches of B training rows, row after row; its whole position is the count of rows drawn.
/// With `world` ranks, each global step deals `world * B` consecutive rows, B to each rank.
#[derive(Debug)]
pub struct RowLoader {
    data: RecallData,
    b: usize,
    rank: usize,
    world: usize,
    rows: u64,
}

impl RowLoader {
    pub fn new(data: RecallData, b: usize, rank: usize, world: usize) -> Result<RowLoader> {
        if b == 0 || rank >= world {
            return Err(DataError::Config(format!(
                "B must be positive and rank below world (B = {b}, rank {rank} of {world})"
            )));
        }
        Ok(RowLoader {
            data,
            b,
            rank,
            world,
            rows: 0,
        })
    }

    /// A loader continuing where the one that saved `state` stopped.
    pub fn resume(
        data: RecallData,
        b: usize,
        rank: usize,
        world: usize,
        state: LoaderState,
    ) -> Result<RowLoader> {
        let mut loader = RowLoader::new(data, b, rank, world)?;
        for (field, expected, found) in [
            ("seed", loader.data.cfg.seed, state.seed),
            ("t", loader.data.cfg.len as u64 - 1, state.t),
            ("tokens", 0, state.tokens),
        ] {
            if expected != found {
                return Err(DataError::StateMismatch {
                    field,
                    expected,
                    found,
                });
            }
        }
        loader.rows = state.rows;
        Ok(loader)
    }

    pub fn state(&self) -> LoaderState {
        LoaderState {
            seed: self.data.cfg.seed,
            t: self.data.cfg.len as u64 - 1,
            tokens: 0,
            epoch: 0,
            shard: 0,
            window: 0,
            rows: self.rows,
        }
    }

    /// A digest (16 hex digits) of the data, as `Loader::fingerprint`: the first rows' tokens,
    /// which change with the kind, the length, the seed, the tokenizer or the generator.
    pub fn fingerprint(&self) -> String {
        let mut hash = Fnv::default();
        for index in 0..8 {
            if let Ok(row) = self.data.row(Split::Train, index) {
                row.sample
                    .tokens
                    .iter()
                    .for_each(|&t| hash.add(u64::from(t)));
            }
        }
        format!("{:016x}", hash.0)
    }

    pub fn next_batch(&mut self) -> Result<Batch> {
        let first = self.rows + (self.rank * self.b) as u64;
        let batch = self.data.batch(Split::Train, first, self.b)?;
        self.rows += (self.world * self.b) as u64;
        Ok(batch)
    }
}
