//! Multi-query associative recall in Zoology's layout (Arora et al., 2023): `num_kv_pairs`
//! key-value pairs `k1 v1 k2 v2 ...`, then the query region, where each key appears once more at
//! an even offset drawn from a power law (short gaps likelier, Zoology's `power_a`) and the token
//! after it must be its value. Everything else in the query region is random tokens.
//!
//! Keys and values are ids of the tokenizer's vocabulary without its end-of-text token (which
//! would read as a document boundary): keys from the lower half, values from the upper half, as
//! Zoology splits its vocabulary. Unlike Zoology, whose inputs hold noise after a query and whose
//! labels hold the value, the value is written into the sequence, so the answer is an ordinary
//! next-token prediction at a known position.

use crate::error::{DataError, Result};
use crate::rng::Rng;
use crate::sample::{Answer, TaskSample};
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MqarConfig {
    /// Exact length of the sample in tokens.
    pub len: usize,
    pub num_kv_pairs: usize,
    /// Gap `g` (in pairs of tokens) has weight `power_a * (g + 1)^(power_a - 1)`; Zoology: 0.01.
    pub power_a: f64,
}

/// `k` distinct values of `lo..hi`, in random order.
fn distinct(rng: &mut Rng, lo: usize, hi: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (lo..hi).collect();
    for i in 0..k {
        let j = i + rng.below((all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(k);
    all
}

/// `k` distinct gaps in `0..space`, weighted as Zoology's, in the order drawn (Efraimidis and
/// Spirakis: the `k` largest `ln(u) / w` are a weighted draw without replacement, largest first).
fn gaps(rng: &mut Rng, space: usize, k: usize, a: f64) -> Vec<usize> {
    let mut keyed: Vec<(f64, usize)> = (0..space)
        .map(|g| {
            let w = a * ((g + 1) as f64).powf(a - 1.0);
            ((1.0 - rng.unit()).ln() / w, g)
        })
        .collect();
    keyed.sort_by(|x, y| y.0.total_cmp(&x.0));
    keyed.into_iter().take(k).map(|(_, g)| g).collect()
}

/// The evaluation sample `seed`.
pub fn mqar(tok: &dyn Tokenizer, cfg: &MqarConfig, seed: u64) -> Result<TaskSample> {
    mqar_from(tok, cfg, &mut Rng::derive(seed, &[0x4d51_4152]))
}

/// A sample drawn from `rng`: the training rows draw theirs from another stream than the
/// evaluation's, so no training row is an evaluation sample.
pub(crate) fn mqar_from(
    tok: &dyn Tokenizer,
    cfg: &MqarConfig,
    rng: &mut Rng,
) -> Result<TaskSample> {
    let MqarConfig {
        len,
        num_kv_pairs: kv,
        power_a,
    } = *cfg;
    // Ids without the end-of-text token: index i maps to i, or i + 1 from the eot on.
    let eot = tok.eot() as usize;
    let id = |i: usize| (if i < eot { i } else { i + 1 }) as u32;
    let ids = tok.vocab_size() as usize - 1;
    let half = ids / 2;
    if kv == 0 || 4 * kv > len || kv >= half || !(power_a > 0.0 && power_a <= 1.0) {
        return Err(DataError::Config(format!(
            "MQAR needs 1 <= pairs < {half} (keys in the vocabulary), 4 * pairs <= len and \
             power_a in (0, 1]: pairs {kv}, len {len}, power_a {power_a}"
        )));
    }
    let keys = distinct(rng, 1, half, kv);
    let values = distinct(rng, half, ids, kv);
    let context = 2 * kv;
    let mut tokens: Vec<u32> = (0..len)
        .map(|_| id(rng.below(ids as u64) as usize))
        .collect();
    for j in 0..kv {
        tokens[2 * j] = id(keys[j]);
        tokens[2 * j + 1] = id(values[j]);
    }
    let mut answers: Vec<Answer> = gaps(rng, (len - context) / 2, kv, power_a)
        .into_iter()
        .zip(0..kv)
        .map(|(g, j)| {
            let query = context + 2 * g;
            tokens[query] = id(keys[j]);
            tokens[query + 1] = id(values[j]);
            Answer {
                pos: query + 1,
                tokens: vec![id(values[j])],
                source: 2 * j + 1,
            }
        })
        .collect();
    answers.sort_by_key(|a| a.pos);
    Ok(TaskSample { tokens, answers })
}
