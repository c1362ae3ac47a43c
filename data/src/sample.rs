//! Token sequences with answers to score: the shape shared by the default corpus's recall probes
//! and the long-context tasks, and the builder that assembles them part by part so that every
//! answer's position is known by construction rather than searched for after tokenizing.

use crate::tokenizer::Tokenizer;

/// A span the model must predict: `tokens` sit at `pos..pos + tokens.len()`, and were stated
/// earlier at `source..` (the needle, the key-value pair, the fact), `distance()` tokens before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub pos: usize,
    pub tokens: Vec<u32>,
    pub source: usize,
}

impl Answer {
    /// How far back the model has to reach: the axis to plot recall against the window.
    pub fn distance(&self) -> usize {
        self.pos - self.source
    }
}

/// A sequence to run and the answers in it. Exact-match scoring: run `tokens[..a.pos + n - 1]`
/// and compare the predictions at `a.pos - 1 ..` with `a.tokens`; as a prompt for generation,
/// `tokens[..answers[0].pos]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSample {
    pub tokens: Vec<u32>,
    pub answers: Vec<Answer>,
}

/// Appends encoded parts and reports where each landed. Parts are encoded one by one, so with
/// BPE the ids may differ from encoding the joined text: the sample is defined by these ids.
pub(crate) struct Builder<'a> {
    pub tok: &'a dyn Tokenizer,
    pub tokens: Vec<u32>,
}

impl<'a> Builder<'a> {
    pub fn new(tok: &'a dyn Tokenizer) -> Self {
        Builder {
            tok,
            tokens: Vec::new(),
        }
    }

    /// Appends `text`; returns where it starts.
    pub fn text(&mut self, text: &str) -> usize {
        let start = self.tokens.len();
        self.tokens.extend(self.tok.encode(text));
        start
    }

    pub fn ids(&mut self, ids: &[u32]) -> usize {
        let start = self.tokens.len();
        self.tokens.extend_from_slice(ids);
        start
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }
}
