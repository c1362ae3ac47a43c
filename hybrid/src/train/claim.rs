//! Which folders a run may write into, so that `--out` never costs the user a file of their own:
//! a new or empty folder, or a run swax made, and never one inside another run (a checkpoint
//! folder, a run's `eval/`), whose files the new run would overwrite or clear as leftovers.
//! Checked before the folder is locked, cleared or written.
use std::path::{Path, PathBuf};

use super::Result;
use crate::config::Config;

/// The file every run folder (and every checkpoint folder) holds.
const CONFIG: &str = "config.toml";
/// What only a checkpoint folder holds, beside its `config.toml`.
const CHECKPOINT_MARK: &str = "state.json";
/// Names shown when a folder is refused.
const SHOWN: usize = 3;

/// Whether `dir` is a run folder swax made: its `config.toml` reads as a swax config (not
/// necessarily one this version accepts), and it is not a checkpoint folder.
pub fn is_run(dir: &Path) -> bool {
    config_of(dir).is_some_and(|read| read.is_ok()) && !dir.join(CHECKPOINT_MARK).exists()
}

/// `dir/config.toml` read as a swax config; None when there is no such file.
fn config_of(dir: &Path) -> Option<std::result::Result<Config, String>> {
    let path = dir.join(CONFIG);
    let text = std::fs::read_to_string(&path).ok()?;
    Some(Config::parse(&text, &path.display().to_string()).map_err(|e| e.to_string()))
}

/// Refuses `path` as a run folder unless it is new, empty (but for a lock file a killed start
/// left) or a run, and outside every other run.
pub fn check(path: &Path) -> Result<()> {
    let real = real_path(path);
    if let Some(run) = real.ancestors().skip(1).find(|a| is_run(a)) {
        return Err(format!(
            "--out {}: inside the run {}; a run is never written into another run's folder \
             (it would overwrite that run's checkpoints or config): pass a folder outside it",
            path.display(),
            run.display()
        )
        .into());
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("--out {}: {e}", path.display()).into()),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("--out {}: {e}", path.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != swax_data::lock::LOCK_FILE {
            names.push(name);
        }
    }
    if names.is_empty() || is_run(path) {
        return Ok(());
    }
    names.sort();
    let more = match names.len() > SHOWN {
        true => format!(" and {} more", names.len() - SHOWN),
        false => String::new(),
    };
    let why = match config_of(path) {
        None => format!("no {CONFIG}"),
        Some(Ok(_)) => format!("a checkpoint folder (it holds {CHECKPOINT_MARK})"),
        Some(Err(e)) => e,
    };
    Err(format!(
        "--out {}: not empty ({}{more}) and not a swax run ({why}); a run folder is a new or \
         empty folder or a run's, so that nothing of yours in it is overwritten or removed: \
         pass another --out",
        path.display(),
        names[..names.len().min(SHOWN)].join(", ")
    )
    .into())
}

/// `path` made absolute, with its deepest existing ancestor resolved (links, `..`), so that
/// its ancestors are the folders it really lies in.
fn real_path(path: &Path) -> PathBuf {
    let Ok(absolute) = std::path::absolute(path) else {
        return path.to_path_buf();
    };
    for base in absolute.ancestors() {
        if let (Ok(resolved), Ok(rest)) = (base.canonicalize(), absolute.strip_prefix(base)) {
            return resolved.join(rest);
        }
    }
    absolute
}
