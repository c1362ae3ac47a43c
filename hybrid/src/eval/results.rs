//! What `swax eval` writes to `results.json` and `swax report` reads back: per task, length and
//! depth the answers and the exact ones; the loss by position bucket on held-out text.
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
    /// The attention window of the evaluation.
    pub window: usize,
    pub tokenizer: String,
    pub tasks: Vec<TaskCell>,
    pub loss: Option<LossCurve>,
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
}

impl TaskCell {
    /// Exact-match accuracy in percent.
    pub fn accuracy(&self) -> f64 {
        100.0 * self.correct as f64 / self.answers.max(1) as f64
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

    /// A short name for tables and legends: the run folder's name and the window.
    pub fn label(&self) -> String {
        let name = std::path::Path::new(&self.run)
            .file_name()
            .map_or(self.model.clone(), |n| n.to_string_lossy().into_owned());
        format!("{name} w={}", self.window)
    }

    fn cells<'a>(&'a self, task: &'a str) -> impl Iterator<Item = &'a TaskCell> + 'a {
        self.tasks.iter().filter(move |c| c.task == task)
    }

    fn pooled<'a>(&self, cells: impl Iterator<Item = &'a TaskCell>) -> Option<f64> {
        let (n, ok) = cells.fold((0, 0), |(n, ok), c| (n + c.answers, ok + c.correct));
        (n > 0).then(|| 100.0 * ok as f64 / n as f64)
    }
}
