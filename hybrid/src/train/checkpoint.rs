//! A run's checkpoints: `checkpoints/step-NNNNNNN/` holding `model.safetensors` (the f32
//! weights under their parameter names), `optimizer.safetensors` (AdamW's moments, `m.NAME` and
//! `v.NAME`) and `state.json` (the step, the optimizer's step count, the loader's position, the
//! seeds). Each file is written atomically, the folder is complete before `checkpoints/latest`
//! (written atomically too) names it, and only then are older folders removed: a crash at any
//! point leaves `latest` naming a whole checkpoint.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use swax_data::LoaderState;
use swax_nn::checkpoint;
use swax_nn::optim::AdamW;
use swax_nn::Params;
use swax_tensor::{Device, Tensor};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Checkpoints kept (the newest ones).
const KEEP: usize = 2;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Steps completed: the run continues at this step.
    pub step: u64,
    pub adamw_step: u64,
    pub loader: LoaderState,
    /// The seed of the window schedule's per-step draws (its whole state: see `window.rs`).
    pub window_seed: u64,
    pub tokens_seen: u64,
    /// Training time so far, for tokens/s and the summary across resumes.
    pub elapsed_s: f64,
}

fn dir_name(step: u64) -> String {
    format!("step-{step:07}")
}

/// Writes the checkpoint of `state.step` under `run/checkpoints/` and makes it the latest.
pub fn save(run: &Path, params: &Params, opt: &AdamW, state: &State) -> Result<PathBuf> {
    let root = run.join("checkpoints");
    let dir = root.join(dir_name(state.step));
    std::fs::create_dir_all(&dir)?;
    let named = |prefix: &str, values: &[Tensor]| -> Vec<(String, Tensor)> {
        params
            .iter()
            .zip(values)
            .map(|(p, v)| (format!("{prefix}{}", p.name), v.clone()))
            .collect()
    };
    let weights: Vec<Tensor> = params.iter().map(|p| p.value.clone()).collect();
    let meta = HashMap::from([("format".to_string(), "swax".to_string())]);
    checkpoint::save(
        &dir.join("model.safetensors"),
        &named("", &weights),
        meta.clone(),
    )?;
    let mut moments = named("m.", &opt.m);
    moments.extend(named("v.", &opt.v));
    checkpoint::save(&dir.join("optimizer.safetensors"), &moments, meta)?;
    checkpoint::write_atomic(
        &dir.join("state.json"),
        serde_json::to_string_pretty(state)?.as_bytes(),
    )?;
    checkpoint::write_atomic(&root.join("latest"), dir_name(state.step).as_bytes())?;
    prune(&root)?;
    Ok(dir)
}

/// Removes all but the newest `KEEP` checkpoint folders (and any left half-written).
fn prune(root: &Path) -> Result<()> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
        })
        .collect();
    dirs.sort();
    let excess = dirs.len().saturating_sub(KEEP);
    for d in &dirs[..excess] {
        std::fs::remove_dir_all(d)?;
    }
    Ok(())
}

/// The latest checkpoint's folder, if the run has one.
pub fn latest(run: &Path) -> Option<PathBuf> {
    let root = run.join("checkpoints");
    let name = std::fs::read_to_string(root.join("latest")).ok()?;
    Some(root.join(name.trim()))
}

/// Loads the latest checkpoint into `params` and `opt` (same names and shapes), on `device`.
pub fn load(run: &Path, params: &mut Params, opt: &mut AdamW, device: Device) -> Result<State> {
    let dir =
        latest(run).ok_or_else(|| format!("{}: no checkpoint to resume from", run.display()))?;
    let state: State = serde_json::from_str(&std::fs::read_to_string(dir.join("state.json"))?)?;
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
