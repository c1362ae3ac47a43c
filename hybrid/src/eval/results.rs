//! What `swax eval` writes to `results.json` and `swax report` reads back: per task, length and
//! depth the answers and the exact ones; the loss by position bucket on held-out data.
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalResults {
    /// The run folder the model came from.
    pub run: String,
    /// The checkpoint folder evaluated, and its step.
    pub checkpoint: String,
    pub step: u64,
    pub model: String,
    pub pattern: String,
    /// The sequence length the model was trained at.
    pub train_len: usize,
    /// The data it was trained on, as `data.source` names it (empty in results from before it
    /// was recorded).
    #[serde(default)]
    pub trained_on: String,
    /// The attention window of the evaluation.
    pub window: usize,
    pub tokenizer: String,
    pub tasks: Vec<TaskCell>,
    pub loss: Option<LossCurve>,
    /// The data of the loss when it is not the run's own (`swax eval --data`), which keeps
    /// such results apart from those on the run's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_data: Option<String>,
}

/// One task at one length and depth (`None` for MQAR, whose keys are spread over the sequence).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskCell {
    pub task: String,
    pub length: usize,
    pub depth: Option<f64>,
    pub samples: usize,
    pub answers: usize,
    /// Answers whose every token the greedy model predicts.
    pub correct: usize,
    /// Of those, the answers whose fact lies within the window (less than `window` tokens back),
    /// and the exact ones among them; the rest lie beyond it.
    #[serde(default)]
    pub near_answers: usize,
    #[serde(default)]
    pub near_correct: usize,
    /// With `--scoring generate`: RULER's string_match_all of the generated answers, in [0, 1],
    /// averaged over the samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<f64>,
}

impl TaskCell {
    /// Exact-match accuracy in percent.
    pub fn accuracy(&self) -> f64 {
        100.0 * self.correct as f64 / self.answers.max(1) as f64
    }

    /// Answers beyond the window, and the exact ones among them.
    pub fn far(&self) -> (usize, usize) {
        (
            self.answers - self.near_answers,
            self.correct - self.near_correct,
        )
    }
}

/// Mean loss per position bucket over held-out sequences of `length` tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossCurve {
    pub length: usize,
    pub samples: usize,
    /// "bits/byte" for a byte-level tokenizer, else "bits/token".
    pub unit: String,
    pub buckets: Vec<LossBucket>,
    /// The held-out data, as `data.source` names it (empty in results from before it was
    /// recorded).
    #[serde(default)]
    pub data: String,
}

/// Positions `start..end` (of the predicted token), their mean loss in bits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossBucket {
    pub start: usize,
    pub end: usize,
    /// JSON has no NaN or infinity: a loss that overflowed is written `null` and read back NaN.
    #[serde(deserialize_with = "nan_if_null")]
    pub bits: f64,
}

fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl EvalResults {
    /// The tasks present, in order of first appearance.
    pub fn task_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for c in &self.tasks {
            if !names.contains(&c.task) {
                names.push(c.task.clone());
            }
        }
        names
    }

    /// The lengths `task` was run at, ascending.
    pub fn lengths(&self, task: &str) -> Vec<usize> {
        let mut v: Vec<usize> = self.cells(task).map(|c| c.length).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The depths `task` was run at, ascending (empty for depthless tasks).
    pub fn depths(&self, task: &str) -> Vec<f64> {
        let mut v: Vec<f64> = self.cells(task).filter_map(|c| c.depth).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    /// Accuracy in percent of `task` at `length`, over all its depths.
    pub fn accuracy(&self, task: &str, length: usize) -> Option<f64> {
        self.pooled(self.cells(task).filter(|c| c.length == length))
    }

    /// Accuracy in percent of `task` at `length` and `depth`.
    pub fn accuracy_at(&self, task: &str, length: usize, depth: f64) -> Option<f64> {
        self.pooled(
            self.cells(task)
                .filter(|c| c.length == length && c.depth == Some(depth)),
        )
    }

    /// The generation score in percent of `task` at `length`, over its depths' samples.
    pub fn generated(&self, task: &str, length: usize) -> Option<f64> {
        let cells: Vec<&TaskCell> = self
            .cells(task)
            .filter(|c| c.length == length && c.generated.is_some())
            .collect();
        let n: usize = cells.iter().map(|c| c.samples).sum();
        let sum: f64 = cells
            .iter()
            .map(|c| c.generated.unwrap_or(0.0) * c.samples as f64)
            .sum();
        (n > 0).then(|| 100.0 * sum / n as f64)
    }

    /// Accuracy in percent of `task` at `length` over the answers within the window (`near`) or
    /// beyond it, pooled over depths; None where there are none.
    pub fn accuracy_by_reach(&self, task: &str, length: usize, near: bool) -> Option<f64> {
        let cells = self.cells(task).filter(|c| c.length == length);
        split_pooled(cells, near)
    }

    /// Accuracy in percent over every task and length, within the window or beyond it.
    pub fn overall_by_reach(&self, near: bool) -> Option<f64> {
        split_pooled(self.tasks.iter(), near)
    }

    /// The mean loss over the first bucket of the loss curve: with buckets of the training length,
    /// the loss at the training length (the model's in-window quality).
    pub fn first_bucket_bits(&self) -> Option<f64> {
        self.loss.as_ref()?.buckets.first().map(|b| b.bits)
    }

    /// A short name for tables and legends: the run folder's name and the window, and the data
    /// where it is not the run's own.
    pub fn label(&self) -> String {
        let name = std::path::Path::new(&self.run)
            .file_name()
            .map_or(self.model.clone(), |n| n.to_string_lossy().into_owned());
        match &self.other_data {
            Some(data) => format!("{name} w={} on {data}", self.window),
            None => format!("{name} w={}", self.window),
        }
    }

    fn cells<'a>(&'a self, task: &'a str) -> impl Iterator<Item = &'a TaskCell> + 'a {
        self.tasks.iter().filter(move |c| c.task == task)
    }

    fn pooled<'a>(&self, cells: impl Iterator<Item = &'a TaskCell>) -> Option<f64> {
        let (n, ok) = cells.fold((0, 0), |(n, ok), c| (n + c.answers, ok + c.correct));
        (n > 0).then(|| 100.0 * ok as f64 / n as f64)
    }
}

/// Accuracy in percent of the answers within the window (`near`) or beyond it, over `cells`.
fn split_pooled<'a>(cells: impl Iterator<Item = &'a TaskCell>, near: bool) -> Option<f64> {
    let (n, ok) = cells.fold((0, 0), |(n, ok), c| {
        let (cn, cok) = match near {
            true => (c.near_answers, c.near_correct),
            false => c.far(),
        };
        (n + cn, ok + cok)
    });
    (n > 0).then(|| 100.0 * ok as f64 / n as f64)
}
