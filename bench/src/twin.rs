//! The swax side of the parity check against the PyTorch twin (`hybrid/python/modeling_swax.py`,
//! `bench/peers/twin_parity.py`, docs/parity.md): what a run of a config starts from and what it
//! sees, written where plain PyTorch reads it. The program is `twin-dump`. Into its folder:
//!
//! - `config.toml`: the resolved config; `swax train --config DIR/config.toml` trains the run the
//!   twin's training is compared with.
//! - `model.safetensors`: the initial weights, written as a checkpoint writes them, of
//!   `Model::new` with the config's seed: what `swax train` starts from.
//! - `rows.safetensors`: the trainer's batches of the first `steps` steps, from the same loader:
//!   `inputs` and `targets` U32 `[steps, grad_accum, B, T]` (an ignored target is `u32::MAX`),
//!   and `windows` U32 `[steps]`, each step's attention window.
//! - `step0.safetensors`: for step 0's first micro-batch at step 0's window, `logits` f32
//!   `[B, T, V]`, `loss` f32 `[1]` and, for every parameter, `grad.NAME` f32: the gradient of
//!   that loss (not divided by `grad_accum`). Its metadata names the compute dtype.
use std::collections::HashMap;
use std::path::Path;

use swax_autograd::Tape;
use swax_hybrid::batch;
use swax_hybrid::config::Config;
use swax_hybrid::model::Model;
use swax_hybrid::train::checkpoint::save_model;
use swax_hybrid::train::data::{self, Part};
use swax_hybrid::train::{compute_dtype, window_schedule};
use swax_nn::{checkpoint, Weights};
use swax_tensor::{DType, Device, Tensor};

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// What [`dump`] measured: step 0's loss, in the dtype it ran in.
#[derive(Debug, Clone, Copy)]
pub struct Dumped {
    pub loss: f64,
    pub dtype: DType,
}

/// Writes the four files of the module's doc for `cfg`'s first `steps` steps into `out`
/// (created if need be), the model run on `device`.
pub fn dump(cfg: &Config, steps: u64, device: Device, out: &Path) -> Result<Dumped> {
    if steps == 0 {
        return Err("--steps must be at least 1: step 0's batch is dumped".into());
    }
    let model = Model::new(&cfg.model, cfg.train.seed, device)?;
    dump_model(cfg, &model, steps, device, out)
}

/// [`dump`] of a trained run's latest checkpoint (or a checkpoint folder): its config, and its
/// weights in `model.safetensors` and behind `step0.safetensors`' logits. What the Hugging Face
/// parity check (bench/peers/hf_parity.py) compares an export of that run with.
pub fn dump_trained(run: &Path, steps: u64, device: Device, out: &Path) -> Result<Dumped> {
    if steps == 0 {
        return Err("--steps must be at least 1: step 0's batch is dumped".into());
    }
    let loaded = swax_hybrid::loaded::load(run, device)?;
    dump_model(&loaded.cfg, &loaded.model, steps, device, out)
}

fn dump_model(
    cfg: &Config,
    model: &Model,
    steps: u64,
    device: Device,
    out: &Path,
) -> Result<Dumped> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    checkpoint::write_atomic(&out.join("config.toml"), cfg.to_toml().as_bytes())?;
    save_model(&out.join("model.safetensors"), &model.params)?;

    let (accum, b, t) = (cfg.train.grad_accum, cfg.data.batch_size, cfg.data.seq_len);
    let mut loader = data::open(cfg, None, Part::WHOLE)?.train;
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    let mut first = None;
    for _ in 0..steps as usize * accum {
        let batch = loader.next_batch()?;
        inputs.extend_from_slice(&batch.inputs);
        targets.extend_from_slice(&batch.targets);
        first.get_or_insert(batch);
    }
    let windows = window_schedule(cfg);
    let windows: Vec<u32> = (0..steps).map(|s| windows.window(s) as u32).collect();
    let window = windows[0] as usize;
    let rows_shape = vec![steps as usize, accum, b, t];
    let rows = [
        (
            "inputs",
            Tensor::from_vec(inputs, rows_shape.clone(), Device::Cpu)?,
        ),
        (
            "targets",
            Tensor::from_vec(targets, rows_shape, Device::Cpu)?,
        ),
        (
            "windows",
            Tensor::from_vec(windows, vec![steps as usize], Device::Cpu)?,
        ),
    ]
    .map(|(name, t)| (name.to_string(), t));
    checkpoint::save(&out.join("rows.safetensors"), &rows, HashMap::new())?;

    let dtype = compute_dtype(cfg, device);
    let (x, y) = batch::to_device(&first.expect("steps >= 1"), device)?;
    let logits = model.logits(&Weights::inference(&model.params, dtype)?, &x, window)?;
    let tape = Tape::new();
    let w = Weights::training(&tape, &model.params, dtype)?;
    let loss = model.loss(&w, &x, &y, window)?;
    let grads = tape.backward(&loss)?;
    let mut step0 = vec![
        ("logits".to_string(), logits.to_dtype(DType::F32)?),
        ("loss".to_string(), loss.reshape(vec![1])?),
    ];
    for p in model.params.iter() {
        let g = grads
            .get(&p.value)
            .ok_or_else(|| format!("parameter {} has no gradient", p.name))?;
        step0.push((format!("grad.{}", p.name), g.to_dtype(DType::F32)?));
    }
    let meta = HashMap::from([
        ("dtype".to_string(), format!("{dtype:?}").to_lowercase()),
        ("device".to_string(), device.to_string()),
        ("window".to_string(), window.to_string()),
    ]);
    checkpoint::save(&out.join("step0.safetensors"), &step0, meta)?;
    Ok(Dumped {
        loss: loss.to_scalar()?,
        dtype,
    })
}
