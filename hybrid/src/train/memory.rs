//! Lower bounds on the memory a training run, an evaluation or a generation needs, checked
//! against what the device has free before anything is allocated or written: a model, a batch, a
//! length or a count that cannot fit ends in a message naming the sizes and the keys or options
//! to change, rather than an allocation failure that aborts the process. Only what is surely
//! needed is counted, so work refused here could not have run; work that passes may still run
//! out.
use swax_tensor::{DType, Device};

use super::{compute_dtype, Result};
use crate::config::Config;

const GIB: f64 = (1u64 << 30) as f64;

/// What a run surely needs, in bytes (as f64: the products of huge settings overflow integers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Need {
    pub params: f64,
    /// The f32 weights, their gradients and AdamW's two moments.
    pub param_bytes: f64,
    /// Kept for the backward pass of one micro-batch.
    pub activation_bytes: f64,
}

impl Need {
    pub fn of(cfg: &Config, device: Device) -> Need {
        let m = &cfg.model;
        let (d, v, layers, ff) = (
            m.d_model as f64,
            m.vocab_size as f64,
            m.n_layers as f64,
            m.d_ff as f64,
        );
        // The embedding and the output head; per layer the SwiGLU MLP's three matrices and at
        // least the mixer's query and output projections.
        let params = 2.0 * v * d + layers * (3.0 * d * ff + 2.0 * d * d);
        let tokens = cfg.data.batch_size as f64 * cfg.data.seq_len as f64;
        let elem = match compute_dtype(cfg, device) {
            DType::BF16 => 2.0,
            _ => 4.0,
        };
        // The logits and their gradient of one group of `loss_rows` tokens (the loss never holds
        // the whole batch's); per layer at least its input and the MLP's two hidden activations.
        let loss_rows = (m.loss_rows as f64).min(tokens);
        let activations = 2.0 * loss_rows * v + tokens * layers * (d + 2.0 * ff);
        Need {
            params,
            param_bytes: 16.0 * params,
            activation_bytes: elem * activations,
        }
    }

    pub fn bytes(&self) -> f64 {
        self.param_bytes + self.activation_bytes
    }
}

/// Refuses `cfg` on `device` when [`Need`] exceeds the memory free there (also when the device
/// cannot be reached). Where the free memory cannot be read, nothing is refused.
pub fn check(cfg: &Config, device: Device) -> Result<()> {
    let need = Need::of(cfg, device);
    fits("the run", need.bytes(), device, || {
        format!(
            "{:.3e} parameters (model.d_model {}, model.n_layers {}, model.d_ff {}, \
             model.vocab_size {}) take {:.1} GiB with their gradients and AdamW moments (16 bytes \
             each), and a micro-batch of data.batch_size {} x data.seq_len {} tokens at least \
             {:.1} GiB of activations; lower data.batch_size (raising train.grad_accum keeps the \
             tokens per step), data.seq_len or the model's size",
            need.params,
            cfg.model.d_model,
            cfg.model.n_layers,
            cfg.model.d_ff,
            cfg.model.vocab_size,
            need.param_bytes / GIB,
            cfg.data.batch_size,
            cfg.data.seq_len,
            need.activation_bytes / GIB,
        )
    })
}

/// Bytes of the activations and the logits of `tokens` tokens read without a tape: per layer at
/// least its input and the MLP's two hidden activations, and the logits in f32.
fn inference_bytes(cfg: &Config, device: Device, tokens: f64) -> f64 {
    let m = &cfg.model;
    let elem = match compute_dtype(cfg, device) {
        DType::BF16 => 2.0,
        _ => 4.0,
    };
    let per_token = m.n_layers as f64 * (m.d_model as f64 + 2.0 * m.d_ff as f64);
    tokens * (elem * per_token + 4.0 * m.vocab_size as f64)
}

/// Refuses an evaluation of `cfg`'s model at `lengths` when it cannot fit: the weights, one
/// sequence's token ids (or, for the loss, `samples` held-out ones of the longest length, which
/// are held together) and the activations of one piece of `piece` tokens (0: the whole
/// sequence).
pub fn check_eval(
    cfg: &Config,
    device: Device,
    lengths: &[usize],
    samples: usize,
    piece: usize,
    loss: bool,
) -> Result<()> {
    let longest = lengths.iter().copied().max().unwrap_or(0) as f64;
    let read = match piece {
        0 => longest,
        p => longest.min(p as f64),
    };
    let ids = 4.0 * longest * if loss { samples as f64 } else { 1.0 };
    let weights = 4.0 * Need::of(cfg, device).params;
    let activations = inference_bytes(cfg, device, read);
    fits(
        "the evaluation",
        weights + ids + activations,
        device,
        || {
            format!(
            "the longest length, {longest} tokens, holds {:.1} GiB of token ids{}, and a piece of \
             {read} tokens {:.1} GiB of activations and logits, beside {:.1} GiB of weights; \
             lower the lengths, the samples or the piece (eval: --lengths, --samples, --piece; a \
             study: eval.lengths, eval.samples, eval.piece)",
            ids / GIB,
            match loss {
                true => format!(" ({samples} held-out sequences for the loss)"),
                false => String::new(),
            },
            activations / GIB,
            weights / GIB,
        )
        },
    )
}

/// Refuses a generation of `batch` rows after a prompt of `prompt` tokens read in pieces of
/// `piece` (0: at once) when it cannot fit: the weights, and every row's activations and logits
/// for a piece of the prompt.
pub fn check_generate(
    cfg: &Config,
    device: Device,
    batch: usize,
    prompt: usize,
    piece: usize,
) -> Result<()> {
    let read = match piece {
        0 => prompt,
        p => prompt.min(p),
    }
    .max(1) as f64;
    let weights = 4.0 * Need::of(cfg, device).params;
    let rows = batch as f64 * inference_bytes(cfg, device, read);
    fits("the generation", weights + rows, device, || {
        format!(
            "--batch {batch} rows reading a piece of {read} prompt tokens hold {:.1} GiB of \
             activations and logits (model.vocab_size {}), beside {:.1} GiB of weights; lower \
             --batch",
            rows / GIB,
            cfg.model.vocab_size,
            weights / GIB,
        )
    })
}

/// Refuses `what` (the work, for the message) when its `bytes` exceed the memory free on
/// `device`; `why` says what takes them and what to change. Where the free memory cannot be
/// read, nothing is refused.
fn fits(what: &str, bytes: f64, device: Device, why: impl FnOnce() -> String) -> Result<()> {
    let Some((free, place)) = free_bytes(device)? else {
        return Ok(());
    };
    if bytes <= free {
        return Ok(());
    }
    Err(format!(
        "{what} needs at least {:.1} GiB, and {place} has {:.1} GiB free: {}",
        bytes / GIB,
        free / GIB,
        why()
    )
    .into())
}

/// The memory free on `device` in bytes and a name for it: on the CPU, what the kernel reports
/// available plus free swap (Linux; None elsewhere); on a GPU, what its driver reports free.
fn free_bytes(device: Device) -> Result<Option<(f64, String)>> {
    match device {
        Device::Cpu => {
            let Ok(info) = std::fs::read_to_string("/proc/meminfo") else {
                return Ok(None);
            };
            let kib = |key: &str| -> Option<f64> {
                let line = info.lines().find(|l| l.starts_with(key))?;
                line.split_whitespace().nth(1)?.parse().ok()
            };
            Ok(kib("MemAvailable:").map(|avail| {
                (
                    1024.0 * (avail + kib("SwapFree:").unwrap_or(0.0)),
                    "this machine".into(),
                )
            }))
        }
        Device::Cuda(n) => {
            let gpu = swax_tensor::cuda::device(n).map_err(|e| format!("cuda:{n}: {e}"))?;
            let (free, _) = gpu.mem_info().map_err(|e| format!("cuda:{n}: {e}"))?;
            Ok(Some((free as f64, format!("cuda:{n}"))))
        }
    }
}
