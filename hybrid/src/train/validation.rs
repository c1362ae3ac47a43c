//! Validation during training, without a tape: the loss over fixed batches, and the recall
//! check — exact-match accuracy on the answers of held-out corpus documents (facts stated once
//! and asked for again later), split by whether the fact lies within the attention window.
use swax_data::{Batch, TaskSample};
use swax_nn::Weights;
use swax_tensor::{DType, Device, Result};

use crate::batch::{self, ids};
use crate::model::Model;

/// The mean loss over `batches` at `window`.
pub fn val_loss(
    model: &Model,
    batches: &[Batch],
    window: usize,
    dtype: DType,
    device: Device,
) -> Result<f64> {
    let w = Weights::inference(&model.params, dtype)?;
    let mut total = 0.0;
    for batch in batches {
        let (x, y) = batch::to_device(batch, device)?;
        total += model.loss(&w, &x, &y, window)?.to_scalar()?;
    }
    Ok(total / batches.len().max(1) as f64)
}

/// Exact-match recall: answers whose every token the model predicts (greedy, teacher-forced).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Recall {
    /// Answers, and those right, whose fact is within the window (attention can see it).
    pub near: (usize, usize),
    /// ... and beyond it (only a recurrent state can carry it).
    pub far: (usize, usize),
    /// Answer tokens predicted right, of all answer tokens.
    pub tokens: (usize, usize),
}

impl Recall {
    pub fn accuracy(&self) -> f64 {
        share((self.near.0 + self.far.0, self.near.1 + self.far.1))
    }

    pub fn near_accuracy(&self) -> f64 {
        share(self.near)
    }

    pub fn far_accuracy(&self) -> f64 {
        share(self.far)
    }

    pub fn describe(&self) -> String {
        let pct = |c| 100.0 * share(c);
        format!(
            "{:.1}% of {} answers exact ({:.1}% of answer tokens); within the window {:.1}% of {}, beyond it {:.1}% of {}",
            100.0 * self.accuracy(),
            self.near.0 + self.far.0,
            pct(self.tokens),
            pct(self.near),
            self.near.0,
            pct(self.far),
            self.far.0
        )
    }
}

/// `(count, right)` as a fraction (0 of 0 is 0).
fn share((n, ok): (usize, usize)) -> f64 {
    ok as f64 / n.max(1) as f64
}

/// Runs every probe (padded to the longest, `b` at a time) at `window` and scores its answers.
pub fn recall(
    model: &Model,
    probes: &[TaskSample],
    b: usize,
    window: usize,
    dtype: DType,
    device: Device,
) -> Result<Recall> {
    let w = Weights::inference(&model.params, dtype)?;
    let t = probes.iter().map(|p| p.tokens.len()).max().unwrap_or(1);
    let mut r = Recall::default();
    for group in probes.chunks(b.max(1)) {
        // Padding goes after each probe: causal layers never let it reach the answers.
        let mut flat = Vec::with_capacity(group.len() * t);
        for p in group {
            flat.extend_from_slice(&p.tokens);
            flat.resize(flat.len() + t - p.tokens.len(), 0);
        }
        let logits = model.logits(&w, &ids(&flat, group.len(), t, device)?, window)?;
        let pred = logits.argmax(-1, false)?.to_vec::<u32>()?;
        for (row, p) in group.iter().enumerate() {
            for a in &p.answers {
                let right = a
                    .tokens
                    .iter()
                    .enumerate()
                    .filter(|&(j, &tok)| pred[row * t + a.pos - 1 + j] == tok)
                    .count();
                r.tokens.0 += a.tokens.len();
                r.tokens.1 += right;
                let bucket = if a.distance() < window {
                    &mut r.near
                } else {
                    &mut r.far
                };
                bucket.0 += 1;
                bucket.1 += usize::from(right == a.tokens.len());
            }
        }
    }
    Ok(r)
}
