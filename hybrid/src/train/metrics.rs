//! The run's record: one JSON object per line in `metrics.jsonl` (training steps carry `loss`,
//! evaluations `val_loss` and recall), and the curves drawn from it as `loss.svg` (`plot`).
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod plot;
pub use plot::plot;

pub struct Metrics {
    path: PathBuf,
    /// None: records are dropped (a rank other than 0 of a data-parallel run).
    file: Option<File>,
}

impl Metrics {
    /// Opens `run/metrics.jsonl` for appending, first dropping any line past step `keep_until`
    /// (a resumed run rewrites the steps after its checkpoint).
    pub fn open(run: &Path, keep_until: Option<u64>) -> std::io::Result<Metrics> {
        let path = run.join("metrics.jsonl");
        let kept = keep_until.and_then(|until| Some((until, std::fs::read_to_string(&path).ok()?)));
        if let Some((until, text)) = kept {
            let kept: String = text
                .lines()
                .filter(|l| step_of(l).is_some_and(|s| s <= until))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&path, kept).map_err(at(&path))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(at(&path))?;
        Ok(Metrics {
            path,
            file: Some(file),
        })
    }

    /// A record that keeps nothing: only rank 0 of a run writes its metrics.
    pub fn discard(run: &Path) -> Metrics {
        Metrics {
            path: run.join("metrics.jsonl"),
            file: None,
        }
    }

    pub fn log(&mut self, record: Value) -> std::io::Result<()> {
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        writeln!(file, "{record}")
            .and_then(|()| file.flush())
            .map_err(at(&self.path))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The error with the file's path in its message (an I/O error names none: "No space left on
/// device" alone does not say which disk).
fn at(path: &Path) -> impl Fn(std::io::Error) -> std::io::Error + '_ {
    move |e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn step_of(line: &str) -> Option<u64> {
    serde_json::from_str::<Value>(line)
        .ok()?
        .get("step")?
        .as_u64()
}

/// The (step, value) pairs of `key` in a metrics file.
pub fn series(path: &Path, key: &str) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some((v.get("step")?.as_f64()?, v.get(key)?.as_f64()?))
        })
        .collect()
}
