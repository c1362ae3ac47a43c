//! The training loader: batches of B sequences of T + 1 tokens (inputs, and targets shifted by
//! one) cut from shards at random offsets.
//!
//! Each epoch visits the shards in a shuffled order; within a shard, a random phase picks where
//! the T-token grid starts and a random permutation orders the windows of that grid, so every
//! epoch sees each region once, aligned differently. Everything derives from the seed, the epoch
//! and the shard index, so the position in the stream (epoch, shard, window) is all a checkpoint
//! needs to resume exactly. With `world` ranks, each global step deals `world * B` consecutive
//! windows, B to each rank in rank order; every rank advances through all of them, so their
//! states stay identical and one checkpointed state resumes them all.

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};
use crate::rng::Rng;
use crate::shard::Shard;

const ORDER_STREAM: u64 = 0x5348_4152_4453; // separates shard-order draws from window draws
const WINDOW_STREAM: u64 = 0x5749_4e44_4f57;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderConfig {
    /// B: sequences per batch on this rank.
    pub b: usize,
    /// T: tokens per sequence.
    pub t: usize,
    pub seed: u64,
    pub rank: usize,
    pub world: usize,
    /// The model's vocabulary: a token at or above it is an error naming its file and offset.
    pub vocab_size: u32,
}

impl LoaderConfig {
    /// A single-process loader.
    pub fn new(b: usize, t: usize, seed: u64, vocab_size: u32) -> Self {
        LoaderConfig {
            b,
            t,
            seed,
            rank: 0,
            world: 1,
            vocab_size,
        }
    }
}

/// A target that is not scored: the rows of `recall::RowLoader` supervise only some tokens.
pub const IGNORE: u32 = u32::MAX;

/// Where a loader stands, small enough for a checkpoint. `seed`, `t` and `tokens` (the total
/// over the shards) are there to refuse resuming on other data or settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderState {
    pub seed: u64,
    pub t: u64,
    pub tokens: u64,
    pub epoch: u64,
    /// Position in this epoch's shard order.
    pub shard: u64,
    /// Position in that shard's window order.
    pub window: u64,
    /// Rows drawn from generated data (`recall::RowLoader`); 0 for shards.
    #[serde(default)]
    pub rows: u64,
}

/// Token ids, row-major `[B, T]`; `targets[i] = ` the token after `inputs[i]`, or [`IGNORE`]
/// where it is not scored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub b: usize,
    pub t: usize,
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
}

/// How many T-windows (each reading T + 1 tokens) a shard of `len` tokens yields per epoch, and
/// the largest phase. One window is given up when there are several, so that the phase can
/// take any of T alignments rather than only the few tokens of slack.
fn windows(len: usize, t: usize) -> (usize, usize) {
    let full = len.saturating_sub(1) / t;
    let slack = len.saturating_sub(1) - full * t;
    if full >= 2 {
        (full - 1, slack + t)
    } else {
        (full, slack)
    }
}

pub struct Loader {
    shards: Vec<Shard>,
    cfg: LoaderConfig,
    tokens: u64,
    epoch: u64,
    /// This epoch's shard order, and the position in it.
    order: Vec<usize>,
    shard: usize,
    /// The current shard's window order and phase, and the position in it.
    windows: Vec<u32>,
    phase: usize,
    window: usize,
    buf: Vec<u32>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("cfg", &self.cfg)
            .field("state", &self.state())
            .finish()
    }
}

impl Loader {
    /// A loader at the start of epoch 0.
    pub fn new(shards: Vec<Shard>, cfg: LoaderConfig) -> Result<Loader> {
        let config = |msg: String| Err(DataError::Config(msg));
        if cfg.b == 0 || cfg.t == 0 {
            return config(format!(
                "B and T must be positive (B = {}, T = {})",
                cfg.b, cfg.t
            ));
        }
        if cfg.rank >= cfg.world {
            return config(format!(
                "rank {} is not below world {}",
                cfg.rank, cfg.world
            ));
        }
        if !shards.iter().any(|s| windows(s.len(), cfg.t).0 > 0) {
            return config(format!(
                "no shard among {} holds T + 1 = {} tokens",
                shards.len(),
                cfg.t + 1
            ));
        }
        let tokens = shards.iter().map(|s| s.len() as u64).sum();
        let mut loader = Loader {
            shards,
            cfg,
            tokens,
            epoch: 0,
            order: Vec::new(),
            shard: 0,
            windows: Vec::new(),
            phase: 0,
            window: 0,
            buf: vec![0; cfg.t + 1],
        };
        loader.start_epoch(0);
        Ok(loader)
    }

    /// A loader continuing exactly where the one that produced `state` stopped.
    pub fn resume(shards: Vec<Shard>, cfg: LoaderConfig, state: LoaderState) -> Result<Loader> {
        let mut loader = Loader::new(shards, cfg)?;
        let check = |field, expected: u64, found: u64| {
            if expected == found {
                Ok(())
            } else {
                Err(DataError::StateMismatch {
                    field,
                    expected,
                    found,
                })
            }
        };
        check("seed", cfg.seed, state.seed)?;
        check("t", cfg.t as u64, state.t)?;
        check("tokens", loader.tokens, state.tokens)?;
        check("rows", 0, state.rows)?;
        // A position beyond this data's shards or windows can only come from other data.
        check(
            "shard",
            state.shard.min(loader.shards.len() as u64),
            state.shard,
        )?;
        loader.start_epoch(state.epoch);
        loader.shard = state.shard as usize;
        loader.enter_shard();
        check(
            "window",
            state.window.min(loader.windows.len() as u64),
            state.window,
        )?;
        loader.window = state.window as usize;
        Ok(loader)
    }

    pub fn state(&self) -> LoaderState {
        LoaderState {
            seed: self.cfg.seed,
            t: self.cfg.t as u64,
            tokens: self.tokens,
            epoch: self.epoch,
            shard: self.shard as u64,
            window: self.window as u64,
            rows: 0,
        }
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.cfg
    }

    /// A digest (16 hex digits) of the tokens this loader reads, to tell a run's data from other
    /// data of the same size: each shard's length, its first and last 64 Ki tokens and 256 runs
    /// of 256 spread between, so it reads at most about 200 Ki tokens a shard, whatever the
    /// shard's size. The same shards give the same digest wherever they lie.
    pub fn fingerprint(&self) -> String {
        const EDGE: usize = 1 << 16;
        const RUNS: usize = 256;
        const RUN: usize = 256;
        let mut hash = Fnv::default();
        let mut buf = Vec::new();
        let mut take = |shard: &Shard, start: usize, n: usize, hash: &mut Fnv| {
            let n = n.min(shard.len() - start);
            buf.resize(n, 0);
            shard
                .read(start, &mut buf)
                .expect("the range lies inside the shard");
            buf.iter().for_each(|&t| hash.add(u64::from(t)));
        };
        for shard in &self.shards {
            let len = shard.len();
            hash.add(len as u64);
            if len <= 2 * EDGE + RUNS * RUN {
                take(shard, 0, len, &mut hash);
                continue;
            }
            take(shard, 0, EDGE, &mut hash);
            let stride = (len - 2 * EDGE) / RUNS;
            for i in 0..RUNS {
                take(shard, EDGE + i * stride, RUN, &mut hash);
            }
            take(shard, len - EDGE, EDGE, &mut hash);
        }
        format!("{:016x}", hash.0)
    }

    fn start_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.order = (0..self.shards.len()).collect();
        Rng::derive(self.cfg.seed, &[ORDER_STREAM, epoch]).shuffle(&mut self.order);
        self.shard = 0;
        self.enter_shard();
    }

    /// Lays out the windows of `order[shard]` (none past the end of the order).
    fn enter_shard(&mut self) {
        self.window = 0;
        self.windows.clear();
        let Some(&index) = self.order.get(self.shard) else {
            return;
        };
        let (count, max_phase) = windows(self.shards[index].len(), self.cfg.t);
        let mut rng = Rng::derive(self.cfg.seed, &[WINDOW_STREAM, self.epoch, index as u64]);
        self.phase = rng.range(0, max_phase);
        self.windows.extend(0..count as u32);
        rng.shuffle(&mut self.windows);
    }

    /// The next window as (shard index, first token), moving on through shards and epochs.
    fn next_window(&mut self) -> (usize, usize) {
        // Terminates: `new` checked that some shard has a window.
        loop {
            if let Some(&w) = self.windows.get(self.window) {
                self.window += 1;
                return (self.order[self.shard], self.phase + w as usize * self.cfg.t);
            }
            if self.shard + 1 < self.order.len() {
                self.shard += 1;
                self.enter_shard();
            } else {
                self.start_epoch(self.epoch + 1);
            }
        }
    }

    /// This rank's part of the next global batch. After an error the state is that of a
    /// partly consumed batch: resume from a state saved before it.
    pub fn next_batch(&mut self) -> Result<Batch> {
        let LoaderConfig {
            b,
            t,
            rank,
            world,
            vocab_size,
            ..
        } = self.cfg;
        let mut batch = Batch {
            b,
            t,
            inputs: Vec::with_capacity(b * t),
            targets: Vec::with_capacity(b * t),
        };
        for row in 0..world * b {
            let (shard, start) = self.next_window();
            if row / b != rank {
                continue;
            }
            let shard = &self.shards[shard];
            shard.read(start, &mut self.buf)?;
            if let Some(i) = self.buf.iter().position(|&tok| tok >= vocab_size) {
                return Err(DataError::OutOfVocab {
                    location: shard.locate(start + i),
                    token: self.buf[i],
                    vocab: vocab_size,
                });
            }
            batch.inputs.extend_from_slice(&self.buf[..t]);
            batch.targets.extend_from_slice(&self.buf[1..]);
        }
        Ok(batch)
    }
}

/// FNV-1a over 64-bit words: stable across versions and platforms, unlike std's hasher.
pub(crate) struct Fnv(pub(crate) u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub(crate) fn add(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
