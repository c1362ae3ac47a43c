//! The embedded default corpus: English-like documents, generated from a seed (no downloaded
//! data), whose prediction needs long-range recall. Filler sentences from a small grammar carry
//! facts stated once ("The code of the blue door is 48213.") and stated again later, where the
//! value can only be predicted by recalling the first statement. Recall distances are drawn
//! log-uniformly from a few tokens to the length of the document, far beyond the training
//! attention windows (128 to 2048), and are measured in tokens of the given tokenizer.
//!
//! Documents are addressed by (seed, split, index): train and validation documents come from
//! disjoint streams, and any document can be generated without the ones before it.

pub(crate) mod grammar;

use std::collections::HashSet;

use crate::dataset::Split;
use crate::error::{DataError, Result};
use crate::rng::Rng;
use crate::sample::{Answer, Builder, TaskSample};
use crate::tokenizer::Tokenizer;

use grammar::{COLORS, NAMES, OBJECTS, TOWNS};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CorpusConfig {
    pub seed: u64,
    /// Document lengths in tokens are log-uniform in `min_doc_tokens..=max_doc_tokens`.
    pub min_doc_tokens: usize,
    pub max_doc_tokens: usize,
    /// Probability that a sentence states a new fact rather than filler.
    pub fact_rate: f64,
    /// Shortest planned gap, in tokens, between a fact's value and its recall.
    pub min_distance: usize,
}

impl Default for CorpusConfig {
    fn default() -> Self {
        CorpusConfig {
            seed: 0,
            min_doc_tokens: 256,
            max_doc_tokens: 16384,
            fact_rate: 0.2,
            min_distance: 4,
        }
    }
}

/// A generated document (without its end-of-text separator) and the recalls in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub tokens: Vec<u32>,
    pub recalls: Vec<Answer>,
}

/// A fact: a key that may appear once per document, and the value bound to it.
#[derive(Debug, Clone, Copy)]
enum Fact {
    Code {
        color: usize,
        object: usize,
        code: u32,
    },
    Home {
        name: usize,
        town: usize,
    },
}

impl Fact {
    fn random(rng: &mut Rng) -> Fact {
        let index = |rng: &mut Rng, n: usize| rng.below(n as u64) as usize;
        if rng.below(2) == 0 {
            Fact::Code {
                color: index(rng, COLORS.len()),
                object: index(rng, OBJECTS.len()),
                code: 10000 + rng.below(90000) as u32,
            }
        } else {
            Fact::Home {
                name: index(rng, NAMES.len()),
                town: index(rng, TOWNS.len()),
            }
        }
    }

    fn key(self) -> usize {
        match self {
            Fact::Code { color, object, .. } => color * OBJECTS.len() + object,
            Fact::Home { name, .. } => COLORS.len() * OBJECTS.len() + name,
        }
    }

    /// The sentence up to the value, and the value; a period follows.
    fn parts(self) -> (String, String) {
        match self {
            Fact::Code {
                color,
                object,
                code,
            } => (
                format!(" The code of the {} {} is", COLORS[color], OBJECTS[object]),
                format!(" {code}"),
            ),
            Fact::Home { name, town } => (
                format!(" {} lives in", NAMES[name]),
                format!(" {}", TOWNS[town]),
            ),
        }
    }
}

/// A fact stated and not yet recalled: recalled once the document reaches `due`.
struct Pending {
    fact: Fact,
    source: usize,
    due: usize,
}

const SPLIT_STREAM: [u64; 2] = [0x0074_7261_696e, 0x0000_0076_616c]; // "train", "val"

pub struct Corpus<'a> {
    tok: &'a dyn Tokenizer,
    cfg: CorpusConfig,
}

impl<'a> Corpus<'a> {
    pub fn new(tok: &'a dyn Tokenizer, cfg: CorpusConfig) -> Result<Self> {
        if cfg.min_doc_tokens == 0 || cfg.min_doc_tokens > cfg.max_doc_tokens {
            return Err(DataError::Config(format!(
                "document lengths {}..={} must be positive and ordered",
                cfg.min_doc_tokens, cfg.max_doc_tokens
            )));
        }
        if !(0.0..=1.0).contains(&cfg.fact_rate) || cfg.min_distance == 0 {
            return Err(DataError::Config(format!(
                "fact_rate {} must be in [0, 1] and min_distance {} positive",
                cfg.fact_rate, cfg.min_distance
            )));
        }
        Ok(Corpus { tok, cfg })
    }

    /// Document `index` of `split`.
    pub fn document(&self, split: Split, index: u64) -> Document {
        let stream = SPLIT_STREAM[split as usize];
        let mut rng = Rng::derive(self.cfg.seed, &[stream, index]);
        let target = rng.log_uniform(self.cfg.min_doc_tokens, self.cfg.max_doc_tokens);
        let mut doc = Builder::new(self.tok);
        let mut pending: Vec<Pending> = Vec::new();
        let mut used = HashSet::new();
        let mut recalls = Vec::new();
        loop {
            let len = doc.len();
            if let Some(i) = pending.iter().position(|p| p.due <= len) {
                let p = pending.swap_remove(i);
                let (prefix, value) = p.fact.parts();
                doc.text(&prefix);
                let pos = doc.text(&value);
                recalls.push(Answer {
                    pos,
                    tokens: doc.tokens[pos..].to_vec(),
                    source: p.source,
                });
                doc.text(".");
                continue;
            }
            if len >= target && pending.is_empty() {
                break;
            }
            let room = target.saturating_sub(len);
            let fact = Fact::random(&mut rng);
            if room > self.cfg.min_distance
                && rng.unit() < self.cfg.fact_rate
                && used.insert(fact.key())
            {
                let (prefix, value) = fact.parts();
                doc.text(&prefix);
                let source = doc.text(&value);
                doc.text(".");
                let due = source + rng.log_uniform(self.cfg.min_distance, room);
                pending.push(Pending { fact, source, due });
            } else {
                doc.text(&grammar::filler(&mut rng));
            }
        }
        Document {
            tokens: doc.tokens,
            recalls,
        }
    }

    /// Exactly `n_tokens` of `split`: documents 0, 1, ... each preceded by the end-of-text token,
    /// the last one cut short. For a training run given no data.
    pub fn stream(&self, split: Split, n_tokens: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(n_tokens);
        let mut index = 0;
        while out.len() < n_tokens {
            out.push(self.tok.eot());
            out.extend(self.document(split, index).tokens);
            index += 1;
        }
        out.truncate(n_tokens);
        out
    }

    /// `count` held-out recall probes (validation documents), each at most `max_len` tokens
    /// long, beginning with the end-of-text token as in training, with every recall that fits.
    pub fn probes(&self, count: usize, max_len: usize) -> Result<Vec<TaskSample>> {
        // A bound on the documents tried, so settings under which no recall fits fail rather
        // than loop forever.
        let tries = 64 + 16 * count as u64;
        let mut probes = Vec::with_capacity(count);
        for index in 0..tries {
            if probes.len() == count {
                break;
            }
            let doc = self.document(Split::Val, index);
            let answers: Vec<Answer> = doc
                .recalls
                .into_iter()
                .map(|a| Answer {
                    pos: a.pos + 1,
                    source: a.source + 1,
                    tokens: a.tokens,
                })
                .filter(|a| a.pos + a.tokens.len() <= max_len)
                .collect();
            let Some(last) = answers.last() else {
                continue;
            };
            let end = last.pos + last.tokens.len();
            let mut tokens = Vec::with_capacity(end);
            tokens.push(self.tok.eot());
            tokens.extend_from_slice(&doc.tokens[..end - 1]);
            probes.push(TaskSample { tokens, answers });
        }
        if probes.len() < count {
            return Err(DataError::Config(format!(
                "only {} of {count} probes have a recall within {max_len} tokens",
                probes.len()
            )));
        }
        Ok(probes)
    }
}
