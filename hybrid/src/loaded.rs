//! A trained model loaded from its run folder or checkpoint folder, with the config it was
//! trained with, for what reads a model without training it (`swax eval`, `swax generate`,
//! `swax study`'s evaluations). The trainer resumes through `train::checkpoint` instead.
use std::path::{Path, PathBuf};

use swax_tensor::Device;

use crate::config::Config;
use crate::model::Model;
use crate::train::checkpoint;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A trained model as a checkpoint left it.
pub struct Loaded {
    pub cfg: Config,
    pub model: Model,
    pub run: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub device: Device,
}

/// Loads a run folder's latest checkpoint, or a checkpoint folder (`RUN/checkpoints/step-N`, or
/// one copied elsewhere, whose results then go into it), with the config it was trained with
/// (checked), onto `device`.
pub fn load(path: &Path, device: Device) -> Result<Loaded> {
    if path.is_file() {
        return Err(format!(
            "{}: a file; evaluate a run folder or a checkpoint folder",
            path.display()
        )
        .into());
    }
    let (run, dir) = match checkpoint::latest_dir(path)? {
        Some(dir) => (path.to_path_buf(), dir),
        None if path.join("model.safetensors").is_file() => {
            let run = path
                .parent()
                .filter(|p| p.file_name().is_some_and(|n| n == "checkpoints"))
                .and_then(Path::parent)
                .unwrap_or(path);
            (run.to_path_buf(), path.to_path_buf())
        }
        None => {
            return Err(format!(
                "{}: neither a run with a checkpoint nor a checkpoint folder",
                path.display()
            )
            .into())
        }
    };
    let cfg = checkpoint::config_of(&dir)?;
    let mut model = Model::new(&cfg.model, cfg.train.seed, device)?;
    let (mut weights, _) = swax_nn::checkpoint::load(&dir.join("model.safetensors"))?;
    let names: Vec<(String, Vec<usize>)> = model
        .params
        .iter()
        .map(|p| (p.name.clone(), p.value.dims().to_vec()))
        .collect();
    for (i, (name, dims)) in names.into_iter().enumerate() {
        let t = weights
            .remove(&name)
            .ok_or_else(|| format!("{}: lacks {name}", dir.display()))?;
        if t.dims() != dims {
            return Err(format!(
                "{}: {name} is {:?}, the model's {dims:?}",
                dir.display(),
                t.dims()
            )
            .into());
        }
        model.params.set(i, t.to_device(device)?);
    }
    let step = checkpoint::read_state(&dir)?.step;
    Ok(Loaded {
        cfg,
        model,
        run,
        checkpoint: dir,
        step,
        device,
    })
}
