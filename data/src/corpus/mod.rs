//! The embedded default corpus and the recall-training documents: English-like text generated
//! from a seed (no downloaded data) whose prediction needs long-range recall. Filler sentences
//! from a small grammar carry facts stated once ("The code of the blue door is 48213.") and
//! recalled later, where the value can only be predicted by remembering the statement. The
//! distance from a fact's value to its recall's value is drawn log-uniformly from a few tokens to
//! `max_distance` (or the rest of the document), and is measured in tokens of the tokenizer.
//!
//! Documents are addressed by (seed, split, index): train and validation documents come from
//! disjoint streams, and any document can be generated without the ones before it. `row` makes a
//! training sequence of an exact length: one document cut to it, its recalls that fit.

pub(crate) mod facts;
pub(crate) mod grammar;

use std::collections::HashSet;

use crate::dataset::Split;
use crate::error::{DataError, Result};
use crate::rng::Rng;
use crate::sample::{Answer, Builder, TaskSample};
use crate::tokenizer::Tokenizer;

use facts::Fact;
pub use facts::FactMix;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CorpusConfig {
    pub seed: u64,
    /// Document lengths in tokens are log-uniform in `min_doc_tokens..=max_doc_tokens`.
    pub min_doc_tokens: usize,
    pub max_doc_tokens: usize,
    /// Probability that a sentence states a new fact rather than filler.
    pub fact_rate: f64,
    /// Shortest planned distance, in tokens, from a fact's value to its recall's value.
    pub min_distance: usize,
    /// Longest planned distance (0: up to the end of the document). A model trained on T-token
    /// sequences can learn only from recalls within T of their fact.
    pub max_distance: usize,
    pub facts: FactMix,
}

impl Default for CorpusConfig {
    fn default() -> Self {
        CorpusConfig {
            seed: 0,
            min_doc_tokens: 256,
            max_doc_tokens: 16384,
            fact_rate: 0.2,
            min_distance: 4,
            max_distance: 0,
            facts: FactMix::Corpus,
        }
    }
}

/// A generated document (without its end-of-text separator) and the recalls in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub tokens: Vec<u32>,
    pub recalls: Vec<Answer>,
}

/// A fact stated and not yet recalled: its recall sentence, and where that sentence starts so
/// that the recalled value lands at the planned distance.
struct Pending {
    recall: [String; 3],
    source: usize,
    due: usize,
}

const SPLIT_STREAM: [u64; 2] = [0x0074_7261_696e, 0x0000_0076_616c]; // "train", "val"
/// Separates rows from the documents of `document` (the same index gives another text).
const ROW_STREAM: u64 = 0x0072_6f77; // "row"

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
        self.compose(&mut rng, target)
    }

    /// Text of about `target` tokens: filler and facts, each fact recalled once before the end.
    fn compose(&self, rng: &mut Rng, target: usize) -> Document {
        let encoded = |text: &str| self.tok.encode(text).len();
        let mut doc = Builder::new(self.tok);
        let mut pending: Vec<Pending> = Vec::new();
        let mut used = HashSet::new();
        let mut recalls = Vec::new();
        loop {
            let len = doc.len();
            if let Some(i) = pending.iter().position(|p| p.due <= len) {
                let p = pending.swap_remove(i);
                let [prefix, value, suffix] = p.recall;
                doc.text(&prefix);
                let pos = doc.text(&value);
                recalls.push(Answer {
                    pos,
                    tokens: doc.tokens[pos..].to_vec(),
                    source: p.source,
                });
                doc.text(&suffix);
                continue;
            }
            if len >= target && pending.is_empty() {
                break;
            }
            let fact = Fact::random(rng, self.cfg.facts);
            let [before, value, after] = fact.statement(rng);
            let recall = fact.recall(rng);
            // The distance runs from the stated value to the recalled one: at least the rest of
            // the statement and the recall's lead-in, and the recalled value ends by the target.
            let (vlen, lead) = (encoded(&value), encoded(&recall[0]));
            let value_at = len + encoded(&before);
            let lo = self.cfg.min_distance.max(vlen + encoded(&after) + lead);
            let hi = target.saturating_sub(value_at + vlen);
            let hi = match self.cfg.max_distance {
                0 => hi,
                cap => hi.min(cap),
            };
            if hi > lo && rng.unit() < self.cfg.fact_rate && used.insert(fact.key()) {
                doc.text(&before);
                let source = doc.text(&value);
                doc.text(&after);
                let distance = rng.log_uniform(lo, hi);
                pending.push(Pending {
                    due: (source + distance).saturating_sub(lead),
                    recall,
                    source,
                });
            } else {
                doc.text(&grammar::filler(rng));
            }
        }
        Document {
            tokens: doc.tokens,
            recalls,
        }
    }

    /// Training row `index` of `split`: exactly `len` tokens, the end-of-text token and then one
    /// document cut to fit, with the recalls whose values lie wholly inside it (positions in the
    /// row).
    pub fn row(&self, split: Split, index: u64, len: usize) -> TaskSample {
        let stream = SPLIT_STREAM[split as usize];
        let mut rng = Rng::derive(self.cfg.seed, &[stream, ROW_STREAM, index]);
        let doc = self.compose(&mut rng, len.saturating_sub(1));
        let mut tokens = Vec::with_capacity(len);
        tokens.push(self.tok.eot());
        tokens.extend(doc.tokens.into_iter().take(len.saturating_sub(1)));
        let answers = after_eot(doc.recalls, len);
        TaskSample { tokens, answers }
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
            let answers = after_eot(doc.recalls, max_len);
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

/// A document's recalls as positions in a sequence that begins with the end-of-text token and
/// then the document, keeping those whose value ends within `len` tokens.
fn after_eot(recalls: Vec<Answer>, len: usize) -> Vec<Answer> {
    recalls
        .into_iter()
        .map(|a| Answer {
            pos: a.pos + 1,
            source: a.source + 1,
            tokens: a.tokens,
        })
        .filter(|a| a.pos + a.tokens.len() <= len)
        .collect()
}
