//! Long-context evaluation tasks, deterministic by seed, at an exact length in tokens:
//! RULER-style needle-in-a-haystack, passkey retrieval and MQAR. Each sample is a
//! [`TaskSample`](crate::TaskSample): the ids, and each answer's position, tokens and source.
//!
//! The text tasks share one assembly: an intro, a haystack of whole sentences cut to the length
//! left over, needles inserted at the sentence boundaries nearest their depths, then the
//! question and the answers.

pub mod mqar;
pub mod niah;
pub mod passkey;

use std::ops::Range;

use crate::error::{DataError, Result};
use crate::sample::{Answer, Builder, TaskSample};
use crate::tokenizer::Tokenizer;

/// A fact hidden in the haystack: its ids, where its value sits among them, and its depth
/// (0 = before the first haystack token, 1 = after the last).
pub(crate) struct Needle {
    tokens: Vec<u32>,
    value: Range<usize>,
    depth: f64,
}

impl Needle {
    /// `prefix` + `value` + `suffix`, encoded part by part.
    pub fn new(tok: &dyn Tokenizer, parts: [&str; 3], depth: f64) -> Needle {
        let mut b = Builder::new(tok);
        b.text(parts[0]);
        let start = b.text(parts[1]);
        let end = b.len();
        b.text(parts[2]);
        Needle {
            tokens: b.tokens,
            value: start..end,
            depth,
        }
    }
}

/// Checks depths given by the caller, or draws one per needle.
pub(crate) fn depths(given: Option<&[f64]>, n: usize, rng: &mut crate::Rng) -> Result<Vec<f64>> {
    match given {
        None => Ok((0..n).map(|_| rng.unit()).collect()),
        Some(d) if d.len() == n && d.iter().all(|x| (0.0..=1.0).contains(x)) => Ok(d.to_vec()),
        Some(d) => Err(DataError::Config(format!(
            "{} depths given for {n} needles; each must be in [0, 1]: {d:?}",
            d.len()
        ))),
    }
}

/// The question and its answers, assembled before the haystack so that its length is known.
pub(crate) struct Tail<'a> {
    pub b: Builder<'a>,
    /// (position in the tail, index of the needle whose value it repeats)
    pub asks: Vec<(usize, usize)>,
}

impl<'a> Tail<'a> {
    pub fn new(tok: &'a dyn Tokenizer) -> Self {
        Tail {
            b: Builder::new(tok),
            asks: Vec::new(),
        }
    }

    /// Appends the value of needle `index` (its text, `value`) as an answer.
    pub fn answer(&mut self, value: &str, index: usize) {
        let pos = self.b.text(value);
        self.asks.push((pos, index));
    }
}

/// Builds a sample of exactly `len` tokens: `intro`, then haystack sentences from `sentence`
/// with `needles` inserted, then `tail`.
pub(crate) fn assemble(
    tok: &dyn Tokenizer,
    len: usize,
    intro: &str,
    needles: &[Needle],
    tail: Tail,
    mut sentence: impl FnMut() -> String,
) -> Result<TaskSample> {
    let mut b = Builder::new(tok);
    b.text(intro);
    let fixed = b.len() + tail.b.len() + needles.iter().map(|n| n.tokens.len()).sum::<usize>();
    let hay = len.checked_sub(fixed).ok_or_else(|| {
        DataError::Config(format!(
            "length {len} is too short: intro, needles and question take {fixed} tokens"
        ))
    })?;

    let mut filler = Builder::new(tok);
    let mut bounds = vec![0];
    while filler.len() < hay {
        filler.text(&sentence());
        bounds.push(filler.len().min(hay));
    }
    filler.tokens.truncate(hay);
    let at: Vec<usize> = needles
        .iter()
        .map(|n| {
            let target = n.depth * hay as f64;
            let nearest = bounds.partition_point(|&x| (x as f64) < target);
            [nearest.saturating_sub(1), nearest.min(bounds.len() - 1)]
                .into_iter()
                .map(|i| bounds[i])
                .min_by(|x, y| {
                    (*x as f64 - target)
                        .abs()
                        .total_cmp(&(*y as f64 - target).abs())
                })
                .unwrap_or(0)
        })
        .collect();
    let mut order: Vec<usize> = (0..needles.len()).collect();
    order.sort_by_key(|&i| at[i]);
    let mut starts = vec![0; needles.len()];
    let mut cursor = 0;
    for i in order {
        b.ids(&filler.tokens[cursor..at[i]]);
        cursor = at[i];
        starts[i] = b.ids(&needles[i].tokens);
    }
    b.ids(&filler.tokens[cursor..]);

    let offset = b.ids(&tail.b.tokens);
    let answers = tail
        .asks
        .iter()
        .map(|&(pos, i)| Answer {
            pos: offset + pos,
            tokens: needles[i].tokens[needles[i].value.clone()].to_vec(),
            source: starts[i] + needles[i].value.start,
        })
        .collect();
    Ok(TaskSample {
        tokens: b.tokens,
        answers,
    })
}
