//! Passkey retrieval (Mohtashami & Jaggi, 2023): a 5-digit pass key stated once inside repeated
//! irrelevant sentences ("The grass is green. The sky is blue. ..."), asked for at the end.

use super::{assemble, depths, Needle, Tail};
use crate::error::Result;
use crate::rng::Rng;
use crate::sample::TaskSample;
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PasskeyConfig {
    /// Exact length of the sample in tokens, answer included.
    pub len: usize,
    /// Depth of the pass key in [0, 1], or `None` to draw it from the seed.
    pub depth: Option<f64>,
}

const INTRO: &str = "There is an important info hidden inside a lot of irrelevant text. Find it \
                     and memorize it. I will quiz you about the important information there.";
const NOISE: [&str; 5] = [
    " The grass is green.",
    " The sky is blue.",
    " The sun is yellow.",
    " Here we go.",
    " There and back again.",
];

pub fn passkey(tok: &dyn Tokenizer, cfg: &PasskeyConfig, seed: u64) -> Result<TaskSample> {
    let mut rng = Rng::derive(seed, &[0x5041_5353]);
    let depth = depths(cfg.depth.as_ref().map(std::slice::from_ref), 1, &mut rng)?[0];
    let key = 10_000 + rng.below(90_000);
    let suffix = format!(". Remember it. {key} is the pass key.");
    let needle = Needle::new(
        tok,
        [" The pass key is", &format!(" {key}"), &suffix],
        depth,
    );
    let mut tail = Tail::new(tok);
    tail.b.text(" What is the pass key? The pass key is");
    tail.answer(&format!(" {key}"), 0);
    tail.b.text(".");
    let mut next = 0;
    assemble(tok, cfg.len, INTRO, &[needle], tail, || {
        next += 1;
        NOISE[(next - 1) % NOISE.len()].to_owned()
    })
}
