//! Where `swax eval` keeps results, so that no evaluation silently replaces another: by window
//! and by checkpoint step. `RUN/eval/wW/` holds the results of the checkpoint evaluated last at
//! window W (what `swax report` reads); those of another step move to `RUN/eval/wW/step-N/`
//! before it is written. Two evaluations of one step merge: a cell (task, length, depth) or loss
//! curve evaluated again takes the new result, the others stay. Two evaluations saving at once
//! take turns (a lock on `RUN/eval/wW`), so each merges what the other wrote.
use std::path::{Path, PathBuf};

use super::report::write_eval;
use super::results::EvalResults;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const RESULTS: &str = "results.json";

/// What [`save`] did, for the user.
#[derive(Debug)]
pub struct Saved {
    /// The files written.
    pub files: Vec<PathBuf>,
    /// Earlier results of the same step merged in.
    pub merged: bool,
    /// Where the results of another step were moved.
    pub moved: Option<PathBuf>,
}

/// The folder of `r`'s results in `run`: `eval/wW`, or `eval/wW-on-NAME` for a loss on data
/// other than the run's own (NAME: the data's folder or source name), so that one never
/// replaces the other.
pub fn folder(run: &Path, r: &EvalResults) -> PathBuf {
    let name = match &r.other_data {
        None => format!("w{}", r.window),
        Some(data) => {
            let base = Path::new(data)
                .file_name()
                .map_or(data.as_str().into(), |n| n.to_string_lossy());
            let safe: String = base
                .chars()
                .map(|c| match c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    true => c,
                    false => '_',
                })
                .collect();
            format!("w{}-on-{safe}", r.window)
        }
    };
    run.join("eval").join(name)
}

/// Refuses `dir` when results cannot be written there (a read-only run folder or file system, a
/// file in the way), by writing and removing a probe file in it or in the nearest folder above
/// it that exists: an evaluation checks this before it runs, not after.
pub fn check_writable(dir: &Path) -> Result<()> {
    let existing = dir
        .ancestors()
        .map(|a| match a.as_os_str().is_empty() {
            true => Path::new("."),
            false => a,
        })
        .find(|a| a.exists())
        .unwrap_or(Path::new("."));
    let cannot = |why: String| -> Result<()> {
        Err(format!(
            "{}: the results cannot be written there: {why}",
            dir.display()
        )
        .into())
    };
    if !existing.is_dir() {
        return cannot(format!("{} is a file", existing.display()));
    }
    let probe = existing.join(format!(".swax-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            std::fs::remove_file(&probe).map_err(|e| format!("{}: {e}", probe.display()))?;
            Ok(())
        }
        Err(e) => cannot(format!("{}: {e}", existing.display())),
    }
}

/// Writes `new` into `dir` (`RUN/eval/wW`) as the module's comment says.
pub fn save(dir: &Path, new: EvalResults) -> Result<Saved> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _turn = swax_data::FolderLock::wait(dir)?;
    let archive = |step: u64| dir.join(format!("step-{step:07}"));
    let mut moved = None;
    // This step's results kept by an earlier evaluation, merged here and then removed there.
    let mut absorbed = None;
    let (results, merged) = match read(&dir.join(RESULTS))? {
        Some(old) if old.step == new.step => (merge(old, new), true),
        here => {
            if let Some(old) = here {
                let to = archive(old.step);
                let kept = match read(&to.join(RESULTS))? {
                    Some(older) => merge(older, old),
                    None => old,
                };
                write_eval(&to, &kept)?;
                clear_rendering(dir)?;
                moved = Some(to);
            }
            let from = archive(new.step);
            match read(&from.join(RESULTS))? {
                Some(older) => {
                    absorbed = Some(from);
                    (merge(older, new), true)
                }
                None => (new, false),
            }
        }
    };
    let files = write_eval(dir, &results)?;
    if let Some(from) = absorbed {
        std::fs::remove_dir_all(&from).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    Ok(Saved {
        files,
        merged,
        moved,
    })
}

/// The results in `path`, None when there is no such file; unreadable ones are an error, not
/// replaced.
fn read(path: &Path) -> Result<Option<EvalResults>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        format!(
            "{}: {e} (move it away to evaluate into this folder)",
            path.display()
        )
        .into()
    })
}

/// `new` with the cells and loss curve of `old` that it does not evaluate again.
fn merge(old: EvalResults, mut new: EvalResults) -> EvalResults {
    let same = |a: &super::results::TaskCell, b: &super::results::TaskCell| {
        a.task == b.task && a.length == b.length && a.depth == b.depth
    };
    let mut tasks: Vec<_> = old
        .tasks
        .into_iter()
        .filter(|o| !new.tasks.iter().any(|n| same(o, n)))
        .collect();
    tasks.append(&mut new.tasks);
    new.tasks = tasks;
    new.loss = new.loss.or(old.loss);
    new
}

/// Removes the files `write_eval` drew from results that moved (tables and plots; folders of
/// other steps stay).
fn clear_rendering(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        let drawn = path
            .extension()
            .is_some_and(|x| x == "svg" || x == "md" || x == "json");
        if drawn && path.is_file() {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}
