//! RULER-style needle in a haystack: needles "One of the special magic numbers for {key} is:
//! {value}." hidden at chosen depths in English-like filler, and a question at the end. Keys are
//! word pairs ("quiet-basket"), values 7-digit numbers, both distinct within a sample.
//!
//! Variants, as in RULER: single (one needle), multi-key (distractor needles with other keys),
//! multi-value (several values for the asked key, answered in the order they appear in the text)
//! and multi-query (several keys asked at once, answered in the order asked). RULER scores the
//! multi-answer variants as sets; exact match here needs an order, hence these.

use std::collections::HashSet;

use super::{assemble, depths, Needle, Tail};
use crate::corpus::grammar::{self, ADJECTIVES, NOUNS};
use crate::error::{DataError, Result};
use crate::rng::Rng;
use crate::sample::TaskSample;
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NiahKind {
    Single,
    /// This many needles with distinct keys; one of them is asked.
    MultiKey(usize),
    /// This many needles sharing the asked key; all values are answered.
    MultiValue(usize),
    /// This many needles with distinct keys; all are asked.
    MultiQuery(usize),
}

impl NiahKind {
    fn needles(self) -> usize {
        match self {
            NiahKind::Single => 1,
            NiahKind::MultiKey(n) | NiahKind::MultiValue(n) | NiahKind::MultiQuery(n) => n,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NiahConfig {
    pub kind: NiahKind,
    /// Exact length of the sample in tokens, answers included.
    pub len: usize,
    /// One depth in [0, 1] per needle, or `None` to draw them from the seed.
    pub depths: Option<Vec<f64>>,
}

const INTRO: &str = "Some special magic numbers are hidden within the following text. Make sure \
                     to memorize it. I will quiz you about the numbers afterwards.";

pub fn niah(tok: &dyn Tokenizer, cfg: &NiahConfig, seed: u64) -> Result<TaskSample> {
    let n = cfg.kind.needles();
    let distinct_keys = ADJECTIVES.len() * NOUNS.len();
    if n == 0 || n > distinct_keys {
        return Err(DataError::Config(format!(
            "a needle-in-a-haystack sample needs 1 to {distinct_keys} needles, not {n}"
        )));
    }
    let mut rng = Rng::derive(seed, &[0x4e49_4148]);
    let depths = depths(cfg.depths.as_deref(), n, &mut rng)?;
    let key_count = if matches!(cfg.kind, NiahKind::MultiValue(_)) {
        1
    } else {
        n
    };
    let mut seen = HashSet::new();
    let keys: Vec<String> =
        std::iter::from_fn(|| Some(format!("{}-{}", rng.pick(ADJECTIVES), rng.pick(NOUNS))))
            .filter(|k| seen.insert(k.clone()))
            .take(key_count)
            .collect();
    let mut seen = HashSet::new();
    let values: Vec<String> =
        std::iter::from_fn(|| Some(format!(" {}", 1_000_000 + rng.below(9_000_000))))
            .filter(|v| seen.insert(v.clone()))
            .take(n)
            .collect();
    let key_of = |i: usize| &keys[i % keys.len()];

    let needles: Vec<Needle> = (0..n)
        .map(|i| {
            let prefix = format!(" One of the special magic numbers for {} is:", key_of(i));
            Needle::new(tok, [&prefix, &values[i], "."], depths[i])
        })
        .collect();

    let asked: Vec<usize> = match cfg.kind {
        NiahKind::Single => vec![0],
        NiahKind::MultiKey(_) => vec![rng.below(n as u64) as usize],
        NiahKind::MultiValue(_) => {
            let mut by_depth: Vec<usize> = (0..n).collect();
            by_depth.sort_by(|&a, &b| depths[a].total_cmp(&depths[b]));
            by_depth
        }
        NiahKind::MultiQuery(_) => (0..n).collect(),
    };
    let mut tail = Tail::new(tok);
    if matches!(cfg.kind, NiahKind::Single | NiahKind::MultiKey(_)) {
        let key = key_of(asked[0]);
        tail.b.text(&format!(
            " What is the special magic number for {key} mentioned in the provided text? The \
             special magic number for {key} mentioned in the provided text is"
        ));
    } else {
        let mut subjects: Vec<&str> = asked.iter().map(|&i| key_of(i).as_str()).collect();
        subjects.dedup();
        let subject = match subjects.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => subjects.concat(),
        };
        tail.b.text(&format!(
            " What are all the special magic numbers for {subject} mentioned in the provided \
             text? The special magic numbers for {subject} mentioned in the provided text are"
        ));
    }
    for (k, &i) in asked.iter().enumerate() {
        if k > 0 {
            tail.b.text(",");
        }
        tail.answer(&values[i], i);
    }
    tail.b.text(".");
    assemble(tok, cfg.len, INTRO, &needles, tail, || {
        grammar::filler(&mut rng)
    })
}
