//! Generation-scored evaluation, as RULER scores its tasks: the model reads the sample up to its
//! first answer and generates (greedy, up to a limit, stopping at the end-of-text token); the
//! score is `string_match_all`, the fraction of the reference answers found in the generated
//! text. Beside teacher-forced exact match (`score`), it tells whether the model also produces
//! the answer unprompted, and tolerates answers worded otherwise.
use swax_data::{TaskSample, Tokenizer};
use swax_tensor::{DType, Device};

use super::run::{sample_seed, Task};
use crate::generate::{generate, Request, Sampling};
use crate::model::Model;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// RULER's `string_match_all`: the share of `references` that occur in `output` (ignoring case
/// and the spaces around each reference); 0 without references.
pub fn string_match_all(output: &str, references: &[String]) -> f64 {
    let out = output.to_lowercase();
    let found = references
        .iter()
        .filter(|r| out.contains(&r.trim().to_lowercase()))
        .count();
    found as f64 / references.len().max(1) as f64
}

/// How a model generates: where, in what precision, at which window, and how many tokens.
#[derive(Clone, Copy, Debug)]
pub struct Generation<'a> {
    pub model: &'a Model,
    pub window: usize,
    pub dtype: DType,
    pub device: Device,
    /// Tokens generated per sample (RULER: 128).
    pub max_tokens: usize,
    /// Prompt tokens read per forward pass.
    pub piece: usize,
}

/// The generated text after `sample`'s tokens up to its first answer, and its score against the
/// sample's answers.
pub fn score_generated(g: &Generation, tok: &dyn Tokenizer, sample: &TaskSample) -> Result<f64> {
    let Some(first) = sample.answers.first() else {
        return Ok(0.0);
    };
    let req = Request {
        max_tokens: g.max_tokens,
        sampling: Sampling::GREEDY,
        batch: 1,
        window: g.window,
        piece: g.piece,
        stop: Some(tok.eot()),
    };
    let prompt = &sample.tokens[..first.pos];
    let out = generate(g.model, prompt, &req, g.dtype, g.device, &mut |_, _| {})?;
    let text = tok.decode(&out[0])?;
    let references = sample
        .answers
        .iter()
        .map(|a| tok.decode(&a.tokens))
        .collect::<swax_data::Result<Vec<_>>>()?;
    Ok(string_match_all(&text, &references))
}

/// The mean generation score of `samples` samples of `task` at `len` and `depth`: the samples
/// teacher-forced scoring draws (`sample_seed`).
#[allow(clippy::too_many_arguments)]
pub fn eval_generated(
    g: &Generation,
    tok: &dyn Tokenizer,
    task: Task,
    len: usize,
    depth: Option<f64>,
    samples: usize,
    seed: u64,
) -> Result<f64> {
    let mut total = 0.0;
    for i in 0..samples as u64 {
        let sample = task.sample(
            tok,
            len,
            depth.unwrap_or(0.0),
            sample_seed(seed, len, depth, i),
        )?;
        total += score_generated(g, tok, &sample)?;
    }
    Ok(total / samples.max(1) as f64)
}
