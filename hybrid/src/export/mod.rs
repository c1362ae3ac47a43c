//! A run in Hugging Face's format and back (docs/export.md). `swax export RUN --hf OUT` writes
//! a folder that transformers loads with `trust_remote_code=True`: `config.json` (every field of
//! the run's `[model]` table, the window, the tokenizer, the rest of the run's config under
//! `swax_run`), `model.safetensors` (the checkpoint's f32 tensors as they are, each under
//! `model.` and its swax name: the names of the modeling file, whose linear weights are
//! `[in, out]` as swax's), the tokenizer's files, and the two Python files of `hybrid/python/`:
//! `modeling_swax.py` is the repository's one PyTorch model, the twin the parity check holds
//! swax to, embedded here as it is. `swax import` ([`import`]) reads such a folder back into a
//! run folder whose checkpoint `swax eval` and `swax generate` load, bit for bit.
//!
//! Both write into a temporary folder beside the destination and rename it into place at the
//! end: a failure leaves nothing half-written, and an existing destination that is not empty is
//! refused.
mod import;
mod tokenizer;

pub use tokenizer::eot_text;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use swax_nn::checkpoint;
use swax_tensor::{Device, Tensor};

use crate::config::Config;
use crate::loaded;

pub use import::{import, Imported};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The modeling and configuration files of an export: the single source of the PyTorch model.
pub const MODELING_PY: &str = include_str!("../../python/modeling_swax.py");
pub const CONFIGURATION_PY: &str = include_str!("../../python/configuration_swax.py");

/// `model_type` in `config.json`: what `AutoConfig` dispatches on.
pub const MODEL_TYPE: &str = "swax";
/// The prefix of every tensor's name in the export: the model is `SwaxForCausalLM.model`.
pub const PREFIX: &str = "model.";

/// What [`export`] wrote.
#[derive(Debug)]
pub struct Exported {
    pub out: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub tensors: usize,
    pub files: Vec<String>,
}

/// Writes the Hugging Face folder of the latest checkpoint of `run` (or of the checkpoint
/// folder `run`) to `out`.
pub fn export(run: &Path, out: &Path) -> Result<Exported> {
    refuse_filled(out)?;
    let loaded = loaded::load(run, Device::Cpu)?;
    let cfg = &loaded.cfg;
    let tensors: Vec<(String, Tensor)> = loaded
        .model
        .params
        .iter()
        .map(|p| (format!("{PREFIX}{}", p.name), p.value.clone()))
        .collect();
    let step = loaded.step;
    let eot = tokenizer::eot(cfg, &loaded.run)?;
    let files = write_then_rename(out, |dir| {
        let mut files = Vec::new();
        let mut put = |name: &str, bytes: &[u8]| -> Result<()> {
            checkpoint::write_atomic(&dir.join(name), bytes)?;
            files.push(name.to_string());
            Ok(())
        };
        put(
            "config.json",
            serde_json::to_string_pretty(&hf_config(cfg, step, eot)?)?.as_bytes(),
        )?;
        put(
            "generation_config.json",
            serde_json::to_string_pretty(&generation_config(eot))?.as_bytes(),
        )?;
        put("configuration_swax.py", CONFIGURATION_PY.as_bytes())?;
        put("modeling_swax.py", MODELING_PY.as_bytes())?;
        for (name, bytes) in tokenizer::files(cfg, &loaded.run)? {
            put(&name, &bytes)?;
        }
        // transformers refuses safetensors whose metadata names no framework it knows. One key
        // only: the metadata is a map written in its own order, so a second key would make two
        // exports of one run differ in their bytes (the step is in config.json).
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        checkpoint::save(&dir.join("model.safetensors"), &tensors, meta)?;
        files.push("model.safetensors".into());
        Ok(files)
    })?;
    Ok(Exported {
        out: out.to_path_buf(),
        checkpoint: loaded.checkpoint,
        step,
        tensors: tensors.len(),
        files,
    })
}

/// `config.json`: the `[model]` table's fields at the top (what the modeling file reads), the
/// window S and R run at (the run's long window, as `swax generate` uses), the tokenizer, and
/// the data, train and optim tables under `swax_run`; `eot` is the tokenizer's end of text.
pub fn hf_config(cfg: &Config, step: u64, eot: u32) -> Result<Value> {
    let mut top = Map::new();
    top.insert("model_type".into(), json!(MODEL_TYPE));
    top.insert("architectures".into(), json!(["SwaxForCausalLM"]));
    top.insert(
        "auto_map".into(),
        json!({
            "AutoConfig": "configuration_swax.SwaxConfig",
            "AutoModelForCausalLM": "modeling_swax.SwaxForCausalLM",
        }),
    );
    let Value::Object(model) = serde_json::to_value(&cfg.model)? else {
        return Err("the model config did not serialize to an object".into());
    };
    top.extend(model);
    top.insert("window".into(), json!(cfg.train.w_long));
    top.insert("tokenizer".into(), json!(cfg.data.tokenizer.name()));
    top.insert("eos_token_id".into(), json!(eot));
    top.insert("bos_token_id".into(), json!(eot));
    top.insert("tie_word_embeddings".into(), json!(false));
    top.insert("use_cache".into(), json!(true));
    top.insert("torch_dtype".into(), json!("float32"));
    top.insert(
        "swax_run".into(),
        json!({
            "model": serde_json::to_value(&cfg.model)?,
            "data": serde_json::to_value(&cfg.data)?,
            "train": serde_json::to_value(&cfg.train)?,
            "optim": serde_json::to_value(&cfg.optim)?,
        }),
    );
    top.insert("swax_step".into(), json!(step));
    Ok(Value::Object(top))
}

/// `generation_config.json`: greedy by default, stopping at the end of text, as `swax generate`.
fn generation_config(eot: u32) -> Value {
    json!({
        "bos_token_id": eot,
        "eos_token_id": eot,
        "do_sample": false,
    })
}

/// Refuses a destination that exists and is not an empty folder.
pub(crate) fn refuse_filled(out: &Path) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        return Err(format!("{}: exists and is not a folder", out.display()).into());
    }
    let mut entries = std::fs::read_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
    if entries.next().is_some() {
        return Err(format!(
            "{}: exists and is not empty; give a new or empty folder",
            out.display()
        )
        .into());
    }
    Ok(())
}

/// Runs `fill` on a temporary folder beside `out`, then renames it to `out` (replacing an
/// empty folder there). On any error the temporary folder is removed.
pub(crate) fn write_then_rename<T>(out: &Path, fill: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let name = out
        .file_name()
        .ok_or_else(|| format!("{}: names no folder", out.display()))?
        .to_string_lossy()
        .into_owned();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let tmp = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    }
    std::fs::create_dir(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let done = fill(&tmp).and_then(|value| {
        refuse_filled(out)?;
        if out.exists() {
            std::fs::remove_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
        }
        std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display()))?;
        Ok(value)
    });
    if done.is_err() {
        // Best effort: the error that matters is the one being returned.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    done
}
