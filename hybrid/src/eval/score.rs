//! Exact-match scoring of the greedy answer from one teacher-forced pass: an answer counts when
//! the argmax at every one of its positions is its token. Greedy decoding would produce exactly
//! those tokens (each step's input is the previous right token), so this is greedy exact match
//! at the cost of one forward pass, and a partly right answer counts as wrong.
use swax_data::TaskSample;

/// Per answer of `sample`, whether it is exact, given `pred[t]` = the argmax after token `t`.
pub fn exact_answers(sample: &TaskSample, pred: &[u32]) -> Result<Vec<bool>, String> {
    sample
        .answers
        .iter()
        .map(|a| {
            let n = a.tokens.len();
            if a.pos == 0 || a.pos + n - 1 > pred.len() {
                return Err(format!(
                    "answer at {}..{} needs predictions 0..{} but there are {}",
                    a.pos,
                    a.pos + n,
                    a.pos + n - 1,
                    pred.len()
                ));
            }
            Ok(pred[a.pos - 1..a.pos - 1 + n] == a.tokens[..])
        })
        .collect()
}

/// The tokens a sample must be run on to score it: up to its last answer's last token but one.
pub fn scored_prefix(sample: &TaskSample) -> &[u32] {
    let end = sample
        .answers
        .iter()
        .map(|a| a.pos + a.tokens.len() - 1)
        .max()
        .unwrap_or(0);
    &sample.tokens[..end.min(sample.tokens.len())]
}
