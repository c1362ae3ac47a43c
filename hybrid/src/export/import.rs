//! `swax import HF_DIR --out RUN`: an exported folder (perhaps changed in PyTorch) back to a
//! swax run folder with one checkpoint, which `swax eval`, `swax generate` and `swax train
//! --resume` load. The config is `swax_run`'s tables with the `[model]` fields read from the
//! top of `config.json` (what the modeling file ran); the weights are the safetensors' tensors
//! as they are. Every parameter of the model must be there in f32 under its name and shape,
//! and nothing else: a missing, misshapen or unexpected tensor is an error naming it. The
//! optimizer's moments start at zero: an export carries none.
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use swax_data::LoaderState;
use swax_nn::checkpoint as tensors;
use swax_tensor::{DType, Device};

use super::{refuse_filled, write_then_rename, MODEL_TYPE, PREFIX};
use crate::config::Config;
use crate::model::Model;
use crate::train::checkpoint::{self, State};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// What [`import`] wrote.
#[derive(Debug)]
pub struct Imported {
    pub run: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub tensors: usize,
}

/// The run config an export's `config.json` describes; errors name the file and the key.
pub fn config_of(dir: &Path) -> Result<(Config, u64)> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Err(format!(
            "{}: not a Hugging Face export (no config.json); `swax import` reads a folder that \
             `swax export RUN --hf` wrote",
            dir.display()
        )
        .into());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let at = |what: String| format!("{}: {what}", path.display());
    let top = json
        .as_object()
        .ok_or_else(|| at("not a JSON object".into()))?;
    match top.get("model_type").and_then(Value::as_str) {
        Some(MODEL_TYPE) => {}
        other => {
            return Err(at(format!(
                "model_type is {other:?}, not {MODEL_TYPE:?}: not a swax export"
            ))
            .into())
        }
    }
    let run = top
        .get("swax_run")
        .and_then(Value::as_object)
        .ok_or_else(|| at("lacks swax_run, the run's config tables".into()))?;
    let mut tables = Map::new();
    for table in ["model", "data", "train", "optim"] {
        let t = run
            .get(table)
            .ok_or_else(|| at(format!("swax_run lacks its {table} table")))?;
        tables.insert(table.into(), t.clone());
    }
    // The model the modeling file ran is the one at the top: a field changed there (in
    // PyTorch) wins over the copy in swax_run, and one missing there is an error.
    if let Some(Value::Object(model)) = tables.get_mut("model") {
        for (key, value) in model.iter_mut() {
            *value = top
                .get(key)
                .ok_or_else(|| at(format!("lacks the model field {key}")))?
                .clone();
        }
    }
    let cfg: Config =
        serde_json::from_value(Value::Object(tables)).map_err(|e| at(format!("swax_run: {e}")))?;
    cfg.check().map_err(|e| at(e.to_string()))?;
    let step = top.get("swax_step").and_then(Value::as_u64).unwrap_or(0);
    Ok((cfg, step))
}

/// Reads the export `dir` into a new run folder `out`.
pub fn import(dir: &Path, out: &Path) -> Result<Imported> {
    refuse_filled(out)?;
    let (cfg, step) = config_of(dir)?;
    let file = dir.join("model.safetensors");
    let (mut weights, _) = tensors::load(&file)?;
    let mut model = Model::new(&cfg.model, cfg.train.seed, Device::Cpu)?;
    let names: Vec<(String, Vec<usize>)> = model
        .params
        .iter()
        .map(|p| (p.name.clone(), p.value.dims().to_vec()))
        .collect();
    let mut wrong = Vec::new();
    for (i, (name, dims)) in names.iter().enumerate() {
        let key = format!("{PREFIX}{name}");
        match weights.remove(&key) {
            None => wrong.push(format!("missing: {key}")),
            Some(t) if t.dims() != dims.as_slice() => {
                wrong.push(format!("{key}: shape {:?}, the model's {dims:?}", t.dims()))
            }
            Some(t) if t.dtype() != DType::F32 => wrong.push(format!(
                "{key}: dtype {:?}, expected f32 (swax keeps its weights in f32)",
                t.dtype()
            )),
            Some(t) => model.params.set(i, t),
        }
    }
    let mut unexpected: Vec<String> = weights
        .into_keys()
        .map(|k| format!("unexpected: {k}"))
        .collect();
    unexpected.sort();
    wrong.extend(unexpected);
    if !wrong.is_empty() {
        return Err(format!(
            "{} does not fit the model of its config.json:\n  {}",
            file.display(),
            wrong.join("\n  ")
        )
        .into());
    }
    // The moments are zeros whatever the betas: only their shapes matter here.
    let o = &cfg.optim;
    let opt = swax_nn::optim::AdamW::new(
        &model.params,
        swax_nn::optim::AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            max_grad_norm: (o.grad_clip > 0.0).then_some(o.grad_clip),
        },
    )?;
    let state = State {
        step,
        adamw_step: 0,
        loader: LoaderState {
            seed: cfg.train.seed,
            t: 0,
            tokens: 0,
            epoch: 0,
            shard: 0,
            window: 0,
            rows: 0,
        },
        tokens_seen: 0,
        elapsed_s: 0.0,
        data: None,
    };
    let tensors = model.params.len();
    let checkpoint_dir = write_then_rename(out, |tmp| {
        swax_nn::checkpoint::write_atomic(&tmp.join("config.toml"), cfg.to_toml().as_bytes())?;
        super::tokenizer::import_files(&cfg, dir, tmp)?;
        let ckpt = checkpoint::save(tmp, &cfg, &model.params, &opt, &state)?;
        Ok(ckpt.file_name().map(PathBuf::from).unwrap_or_default())
    })?;
    Ok(Imported {
        run: out.to_path_buf(),
        checkpoint: out.join("checkpoints").join(checkpoint_dir),
        step,
        tensors,
    })
}
