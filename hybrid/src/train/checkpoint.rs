//! A run's checkpoints: `checkpoints/step-NNNNNNN/` holding `model.safetensors` (the f32
//! weights under their parameter names), `optimizer.safetensors` (AdamW's moments, `m.NAME` and
//! `v.NAME`), `config.toml` (the config the weights were trained with, so that the folder alone
//! can be evaluated) and `state.json` (the step, the optimizer's step count, the loader's
//! position, the seeds, the data's fingerprint). Each file is written atomically, `state.json`
//! last, the folder is complete before `checkpoints/latest` (written atomically too) names it,
//! and only then are older folders removed: a crash at any point leaves `latest` naming a whole
//! checkpoint, and what it left half-written is cleared at the next start ([`clear_leftovers`]).
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use swax_data::LoaderState;
use swax_nn::checkpoint;
use swax_nn::optim::AdamW;
use swax_nn::Params;
use swax_tensor::{Device, Tensor};

use crate::config::Config;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Checkpoints kept: the latest and the newest before it.
const KEEP: usize = 2;

/// The files of a whole checkpoint folder (`state.json`, written last, among them); folders
/// written before configs were kept in them lack `config.toml`.
const FILES: [&str; 3] = ["model.safetensors", "optimizer.safetensors", "state.json"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Steps completed: the run continues at this step.
    pub step: u64,
    pub adamw_step: u64,
    pub loader: LoaderState,
    pub tokens_seen: u64,
    /// Training time so far, for tokens/s and the summary across resumes.
    pub elapsed_s: f64,
    /// The data trained on, to refuse resuming on other data; absent in checkpoints from
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataRecord>,
}

/// Which data a run trains on: where it came from, and the training loader's fingerprint
/// (`swax_data::Loader::fingerprint`), which is what is compared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataRecord {
    pub origin: String,
    pub fingerprint: String,
}

fn dir_name(step: u64) -> String {
    format!("step-{step:07}")
}

/// The step of a checkpoint folder's name (`step-` and digits), None for any other name.
fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    match !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        true => digits.parse().ok(),
        false => None,
    }
}

/// `path: error`, for I/O errors that would not name their file.
fn at(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

/// Writes the checkpoint of `state.step` (trained with `cfg`) under `run/checkpoints/` and
/// makes it the latest.
pub fn save(
    run: &Path,
    cfg: &Config,
    params: &Params,
    opt: &AdamW,
    state: &State,
) -> Result<PathBuf> {
    let root = run.join("checkpoints");
    let dir = root.join(dir_name(state.step));
    std::fs::create_dir_all(&dir).map_err(at(&dir))?;
    let named = |prefix: &str, values: &[Tensor]| -> Vec<(String, Tensor)> {
        params
            .iter()
            .zip(values)
            .map(|(p, v)| (format!("{prefix}{}", p.name), v.clone()))
            .collect()
    };
    save_model(&dir.join("model.safetensors"), params)?;
    let meta = HashMap::from([("format".to_string(), "swax".to_string())]);
    let mut moments = named("m.", &opt.m);
    moments.extend(named("v.", &opt.v));
    checkpoint::save(&dir.join("optimizer.safetensors"), &moments, meta)?;
    checkpoint::write_atomic(&dir.join("config.toml"), cfg.to_toml().as_bytes())?;
    checkpoint::write_atomic(
        &dir.join("state.json"),
        serde_json::to_string_pretty(state)?.as_bytes(),
    )?;
    checkpoint::write_atomic(&root.join("latest"), dir_name(state.step).as_bytes())?;
    prune(&root, state.step)?;
    Ok(dir)
}

/// Writes `params`' values under their names to `path` (a checkpoint's `model.safetensors`).
pub fn save_model(path: &Path, params: &Params) -> Result<()> {
    let weights: Vec<(String, Tensor)> = params
        .iter()
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect();
    let meta = HashMap::from([("format".to_string(), "swax".to_string())]);
    Ok(checkpoint::save(path, &weights, meta)?)
}

/// The checkpoint folders (`step-N`) under `root`, by step.
fn step_dirs(root: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut dirs = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(dirs),
        Err(e) => return Err(at(root)(e).into()),
    };
    for entry in entries {
        let path = entry.map_err(at(root))?.path();
        let step = path.file_name().and_then(|n| step_of(&n.to_string_lossy()));
        if let (Some(step), true) = (step, path.is_dir()) {
            dirs.push((step, path));
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// The whole checkpoint folders of `run` (see [`FILES`]), by step.
pub fn complete(run: &Path) -> Result<Vec<PathBuf>> {
    Ok(step_dirs(&run.join("checkpoints"))?
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| is_complete(d))
        .collect())
}

fn is_complete(dir: &Path) -> bool {
    FILES.iter().all(|f| dir.join(f).is_file())
}

/// Removes the checkpoints before step `latest` but the newest `KEEP - 1`. By step, not by name
/// (a name outgrows its seven digits at step 10^7), and never the one `latest` names: folders
/// past it are no history this run continues (it rewrites them as it reaches their steps).
fn prune(root: &Path, latest: u64) -> Result<()> {
    let older: Vec<PathBuf> = step_dirs(root)?
        .into_iter()
        .filter(|(step, _)| *step < latest)
        .map(|(_, d)| d)
        .collect();
    let excess = older.len().saturating_sub(KEEP - 1);
    for d in &older[..excess] {
        std::fs::remove_dir_all(d).map_err(at(d))?;
    }
    Ok(())
}

/// Removes what a process killed while writing left in `run`: `write_atomic`'s temporary files
/// (in the run folder, `checkpoints/` and each checkpoint folder) and checkpoint folders it left
/// incomplete. Returns what it removed. The caller holds the run's lock: no other process is
/// writing them.
pub fn clear_leftovers(run: &Path) -> Result<Vec<PathBuf>> {
    let root = run.join("checkpoints");
    // The folder `latest` names stays whatever it holds: resuming says what is wrong with it.
    let latest = std::fs::read_to_string(root.join("latest")).ok();
    let named =
        |dir: &Path| latest.as_deref().map(str::trim) == dir.file_name().and_then(|n| n.to_str());
    let mut removed = Vec::new();
    let steps = step_dirs(&root)?;
    for (_, dir) in &steps {
        if !is_complete(dir) && !named(dir) {
            std::fs::remove_dir_all(dir).map_err(at(dir))?;
            removed.push(dir.clone());
        }
    }
    let folders = [run.to_path_buf(), root.clone()]
        .into_iter()
        .chain(steps.into_iter().map(|(_, d)| d))
        .filter(|d| d.is_dir());
    for dir in folders {
        for entry in std::fs::read_dir(&dir).map_err(at(&dir))? {
            let path = entry.map_err(at(&dir))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| checkpoint::is_temporary(&n)) && path.is_file() {
                std::fs::remove_file(&path).map_err(at(&path))?;
                removed.push(path);
            }
        }
    }
    Ok(removed)
}

/// The checkpoint folder `run/checkpoints/latest` names; None when there is no `latest`, an
/// error naming the file when it names no whole checkpoint folder of this run.
pub fn latest_dir(run: &Path) -> Result<Option<PathBuf>> {
    let root = run.join("checkpoints");
    let file = root.join("latest");
    let name = match std::fs::read_to_string(&file) {
        Ok(name) => name,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(at(&file)(e).into()),
    };
    let name = name.trim();
    if step_of(name).is_none() {
        return Err(format!(
            "{} names {name:?}, not a checkpoint folder (step-N in the same folder)",
            file.display()
        )
        .into());
    }
    let dir = root.join(name);
    if let Some(missing) = FILES.iter().find(|f| !dir.join(f).is_file()) {
        return Err(format!(
            "{} names {name}, but {} has no {missing}; point it at a whole checkpoint folder \
             (the others in {}) to resume from that one",
            file.display(),
            dir.display(),
            root.display()
        )
        .into());
    }
    Ok(Some(dir))
}

/// The latest checkpoint's folder, if the run has a whole one.
pub fn latest(run: &Path) -> Option<PathBuf> {
    latest_dir(run).ok().flatten()
}

/// A checkpoint folder's `state.json`; errors name the file.
pub fn read_state(dir: &Path) -> Result<State> {
    let path = dir.join("state.json");
    let text = std::fs::read_to_string(&path).map_err(at(&path))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// The config a checkpoint folder's weights were trained with: its own `config.toml`, or, for
/// folders from before checkpoints kept one, that of the run whose `checkpoints/` holds it.
pub fn config_of(dir: &Path) -> Result<Config> {
    let own = dir.join("config.toml");
    if own.is_file() {
        return Ok(Config::load(&own)?);
    }
    let run = dir
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "checkpoints"))
        .and_then(Path::parent);
    match run {
        Some(run) => Ok(Config::load(&run.join("config.toml"))?),
        None => Err(format!(
            "{}: no config.toml in this checkpoint folder, and it is not in a run's \
             checkpoints/ folder, whose config.toml would say how it was trained; copy the \
             run's config.toml into it",
            dir.display()
        )
        .into()),
    }
}

/// Loads the latest checkpoint into `params` and `opt` (same names and shapes), on `device`.
pub fn load(run: &Path, params: &mut Params, opt: &mut AdamW, device: Device) -> Result<State> {
    let dir = latest_dir(run)?
        .ok_or_else(|| format!("{}: no checkpoint to resume from", run.display()))?;
    let state = read_state(&dir)?;
    let (mut weights, _) = checkpoint::load(&dir.join("model.safetensors"))?;
    let (mut moments, _) = checkpoint::load(&dir.join("optimizer.safetensors"))?;
    let take = |map: &mut HashMap<String, Tensor>, name: &str, like: &Tensor| -> Result<Tensor> {
        let t = map
            .remove(name)
            .ok_or_else(|| format!("{}: checkpoint lacks {name}", dir.display()))?;
        if t.dims() != like.dims() {
            return Err(format!(
                "{}: {name} has shape {:?}, the model {:?}",
                dir.display(),
                t.dims(),
                like.dims()
            )
            .into());
        }
        Ok(t.to_device(device)?)
    };
    let names: Vec<(String, Tensor)> = params
        .iter()
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect();
    for (i, (name, like)) in names.iter().enumerate() {
        params.set(i, take(&mut weights, name, like)?);
        opt.m[i] = take(&mut moments, &format!("m.{name}"), like)?;
        opt.v[i] = take(&mut moments, &format!("v.{name}"), like)?;
    }
    opt.step = state.adamw_step;
    Ok(state)
}
