//! The training benchmark: trains a config for a few steps through `swax train`'s own trainer
//! (`swax_hybrid::train::train`, into a scratch run folder that is removed afterwards) at each
//! fixed window and batch asked for, and reports tokens/s, MFU and peak GPU memory; one JSON line
//! per case is appended to `bench/results/training.jsonl` as soon as the case is measured.
//!
//!   bench-train --config swax-small --windows 128,2048 --peer peer.jsonl
//!   bench-train --config swax-1.4b --batch 4,8,12,16 --windows 2048 --fit
//!
//! - tokens/s: the median of the timed steps' own tokens/s, as the trainer logs them (a step from
//!   drawing its batch to the loss and gradient norm back on the host), the first `--warmup`
//!   steps (kernel compilation, the pool filling) left out.
//! - MFU: 6 x parameters x tokens/s over 989e12 FLOP/s, the H200's dense bf16 peak (datasheet);
//!   the attention and mLSTM work beyond their projections is not counted.
//! - Memory: the pool's peak in use over the run (`PoolStats::peak_in_use`, reset and the cache
//!   emptied before each case) and what it held from the driver at the end, and the card's
//!   memory used as nvidia-smi reports it every 100 ms (CUDA context and other processes
//!   included), where nvidia-smi runs.
//!
//! The trainer runs as `swax train` does, with what would not be timed turned off: no
//! validation, recall probes or samples, no checkpoint (`train.checkpoints=false`), and the
//! window fixed (`train.p_short=0`). `--set` overrides come after the
//! benchmark's own, so they win. `--peer FILE` (the JSON lines `bench/peers/train_peer.py`
//! writes) fills each line's `peer` and `peer_tokens_per_s` from the peer's line of the same
//! case. `--fit` tries the batches smallest first and stops at the first that fails to train
//! (out of memory, or refused by the trainer's memory check), printing why: the largest batch
//! that fits.
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use serde_json::{json, Value};
use swax_bench::config_args::ConfigArgs;
use swax_bench::nvidia_smi::MemorySampler;
use swax_bench::record;
use swax_hybrid::config::Config;
use swax_hybrid::train::{self, metrics, Options};
use swax_tensor::Device;

/// The H200's dense bf16 peak, FLOP/s (datasheet): MFU's denominator.
const PEAK_FLOPS: f64 = 989e12;
const GIB: f64 = (1u64 << 30) as f64;
/// How often nvidia-smi reports the card's memory.
const SAMPLE_MS: u64 = 100;

static NEVER: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    model: ConfigArgs,
    /// Sequences per micro-batch, one case each (default: the config's data.batch_size).
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
    /// T (default: the config's data.seq_len).
    #[arg(long)]
    seq_len: Option<usize>,
    /// The attention windows, one case each.
    #[arg(long, value_delimiter = ',', default_value = "128,2048")]
    windows: Vec<usize>,
    /// Steps run before the timed ones.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Timed steps.
    #[arg(long, default_value_t = 10)]
    steps: u64,
    /// The peer's results (JSON lines with `case`, `peer`, `tokens_per_s`, `peak_gib`).
    #[arg(long)]
    peer: Option<PathBuf>,
    /// Try the batches smallest first, stopping at the first that fails to train.
    #[arg(long)]
    fit: bool,
    /// `cpu`, `cuda`; default: the GPU if there is one.
    #[arg(long)]
    device: Option<String>,
    /// Where the scratch run folders go (default: the system's temporary folder).
    #[arg(long)]
    scratch: Option<PathBuf>,
    #[arg(long, default_value = "bench/results/training.jsonl")]
    results: PathBuf,
}

/// One (batch, window) case's figures.
struct Measured {
    params: usize,
    dtype: String,
    step_tokens_per_s: Vec<f64>,
    tokens_per_s: f64,
    /// Pool: peak in use and held at the end, bytes (None on the CPU).
    peak_bytes: Option<usize>,
    reserved_bytes: Option<usize>,
    /// nvidia-smi's peak in MiB, or why there is none.
    nvidia_smi: Result<u64, String>,
}

fn gpu(device: Device) -> Option<swax_cuda::CudaDevice> {
    match device {
        Device::Cuda(i) => swax_tensor::cuda::device(i).ok(),
        Device::Cpu => None,
    }
}

/// The figures of the run in `out`: each step's tokens/s after the warm-up, and their median.
fn timed_steps(out: &std::path::Path, warmup: u64) -> Result<(Vec<f64>, f64), String> {
    let path = out.join("metrics.jsonl");
    let mut steps: Vec<f64> = metrics::series(&path, "tokens_per_s")
        .into_iter()
        .filter(|&(step, _)| step > warmup as f64)
        .map(|(_, tps)| tps)
        .collect();
    if steps.is_empty() {
        return Err(format!("{}: no timed step was logged", path.display()));
    }
    let logged = steps.clone();
    steps.sort_by(f64::total_cmp);
    Ok((logged, steps[steps.len() / 2]))
}

/// Trains `cfg` for its steps on `device` in a scratch folder and measures it.
fn measure(cfg: &Config, a: &Args, device: Device) -> Result<Measured, String> {
    let mut scratch = tempfile::Builder::new();
    scratch.prefix("bench-train-");
    let dir = match &a.scratch {
        Some(root) => scratch.tempdir_in(root),
        None => scratch.tempdir(),
    }
    .map_err(|e| format!("a scratch run folder: {e}"))?;
    let out = dir.path().join("run");
    if let Some(d) = gpu(device) {
        d.empty_cache().map_err(|e| e.to_string())?;
        d.reset_peak();
    }
    let sampler = match device {
        Device::Cuda(i) => MemorySampler::start(i, SAMPLE_MS),
        Device::Cpu => Err("on the CPU".to_string()),
    };
    let opts = Options {
        out: out.clone(),
        device,
        resume: false,
        allow_data_change: false,
        stop_at: None,
        progress: false,
        profile: false,
        stop: &NEVER,
    };
    let trained = train::train(cfg, &opts);
    let nvidia_smi = sampler.and_then(|s| {
        s.stop()
            .ok_or_else(|| "nvidia-smi reported no memory figure".to_string())
    });
    let summary = trained.map_err(|e| e.to_string())?;
    let stats = gpu(device).map(|d| d.pool_stats());
    let (step_tokens_per_s, tokens_per_s) = timed_steps(&out, a.warmup)?;
    Ok(Measured {
        params: summary.params,
        dtype: format!("{:?}", summary.dtype),
        step_tokens_per_s,
        tokens_per_s,
        peak_bytes: stats.map(|s| s.peak_in_use),
        reserved_bytes: stats.map(|s| s.reserved),
        nvidia_smi,
    })
}

/// `key=value` settings that make the trainer run `steps` steps at batch `b` and window `w`
/// with nothing untimed in them and no checkpoint.
fn bench_sets(base: &Config, a: &Args, b: usize, w: usize) -> Vec<String> {
    let t = a.seq_len.unwrap_or(base.data.seq_len);
    let steps = a.warmup + a.steps;
    // The embedded corpus is generated up front: as much as the run reads, no more.
    let tokens = steps as usize * base.train.grad_accum * b * (t + 1);
    let mut sets = vec![
        format!("data.batch_size={b}"),
        format!("data.seq_len={t}"),
        format!("data.corpus_train_tokens={tokens}"),
        "data.corpus_val_tokens=0".into(),
        format!("train.steps={steps}"),
        format!("train.w_short={w}"),
        format!("train.w_long={w}"),
        "train.p_short=0".into(),
        "train.eval_every=0".into(),
        "train.eval_batches=0".into(),
        "train.recall_probes=0".into(),
        "train.sample_every=0".into(),
        "train.save_every=0".into(),
        "train.checkpoints=false".into(),
    ];
    sets.extend(a.model.sets.iter().cloned());
    sets
}

fn gib(bytes: Option<usize>) -> String {
    bytes.map_or("-".into(), |b| format!("{:.2}", b as f64 / GIB))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    if a.steps == 0 {
        return Err("--steps must be at least 1".into());
    }
    let base = a.model.resolve()?;
    let device = match a.device.as_deref() {
        Some("cpu") => Device::Cpu,
        Some(_) => Device::Cuda(0),
        None if swax_tensor::cuda::device(0).is_ok() => Device::Cuda(0),
        None => Device::Cpu,
    };
    let mut batches = match a.batch.is_empty() {
        true => vec![base.data.batch_size],
        false => a.batch.clone(),
    };
    if a.fit {
        batches.sort_unstable();
    }
    let m = &base.model;
    println!(
        "{} ({} x{} layers, d_model {}) on {device}: {} warm-up + {} timed steps per case, \
         median tokens/s; MFU = 6 x params x tokens/s / {:.0} TFLOP/s (the H200's dense bf16 \
         peak); GiB: the pool's peak in use and its reserve at the end, the card's peak by \
         nvidia-smi every {SAMPLE_MS} ms",
        m.name,
        m.pattern,
        m.n_layers,
        m.d_model,
        a.warmup,
        a.steps,
        PEAK_FLOPS / 1e12
    );
    println!("| case | B | T | window | tokens/s | MFU | pool peak | pool reserve | nvidia-smi peak | peer tokens/s | peer peak |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (date, commit) = (record::today(), record::commit());
    let mut appended = 0;
    let mut largest: Option<(usize, Option<usize>)> = None;
    'batches: for &b in &batches {
        for &w in &a.windows {
            let cfg = Config::resolve(Some(&a.model.config), &bench_sets(&base, &a, b, w))?;
            let t = cfg.data.seq_len;
            let case = match b == base.data.batch_size {
                true => format!("{}-w{w}", m.name),
                false => format!("{}-w{w}-b{b}", m.name),
            };
            let r = match measure(&cfg, &a, device) {
                Ok(r) => r,
                Err(e) if a.fit => {
                    println!("{case}: batch {b} at T {t}, window {w} did not train: {e}");
                    break 'batches;
                }
                Err(e) => return Err(format!("{case}: {e}").into()),
            };
            let peer = match &a.peer {
                Some(path) => record::find_case(path, &case)?,
                None => None,
            };
            let peer_field = |key: &str| peer.as_ref().and_then(|p| p.get(key)).cloned();
            let peer_tps = peer_field("tokens_per_s").and_then(|v| v.as_f64());
            let mfu = 6.0 * r.params as f64 * r.tokens_per_s / PEAK_FLOPS;
            let smi_gib = r.nvidia_smi.as_ref().ok().map(|&mib| mib as f64 / 1024.0);
            println!(
                "| {case} | {b} | {t} | {w} | {:.0} | {:.1}% | {} | {} | {} | {} | {} |",
                r.tokens_per_s,
                100.0 * mfu,
                gib(r.peak_bytes),
                gib(r.reserved_bytes),
                match &r.nvidia_smi {
                    Ok(_) => format!("{:.2}", smi_gib.unwrap_or_default()),
                    Err(why) => format!("- ({why})"),
                },
                peer_tps.map_or("-".into(), |v| format!("{v:.0}")),
                peer_field("peak_gib")
                    .and_then(|v| v.as_f64())
                    .map_or("-".into(), |v| format!("{v:.2}")),
            );
            if a.peer.is_some() && peer.is_none() {
                println!("  (the peer's results have no line for case {case})");
            }
            largest = Some((b, r.peak_bytes));
            // Each case's line goes out as soon as it is measured: a later case that runs out
            // of memory or out of the caller's time loses none of the earlier ones.
            let line = json!({
                "bench": "training", "case": case, "tokens_per_s": r.tokens_per_s, "mfu": mfu,
                "peak_gib": r.peak_bytes.map(|p| p as f64 / GIB),
                "peer": peer_field("peer").unwrap_or(Value::Null),
                "peer_tokens_per_s": peer_tps,
                "peer_peak_gib": peer_field("peak_gib").unwrap_or(Value::Null),
                "date": date, "commit": commit,
                "config": m.name, "pattern": m.pattern, "n_layers": m.n_layers,
                "d_model": m.d_model, "params": r.params, "device": record::device(device),
                "dtype": r.dtype, "batch": b, "seq_len": t, "grad_accum": cfg.train.grad_accum,
                "window": w, "warmup_steps": a.warmup, "timed_steps": a.steps,
                "step_tokens_per_s": r.step_tokens_per_s, "mfu_peak_flops": PEAK_FLOPS,
                "reserved_gib": r.reserved_bytes.map(|p| p as f64 / GIB),
                "nvidia_smi_peak_gib": smi_gib,
                "nvidia_smi": r.nvidia_smi.as_ref().err(),
            });
            record::append(&a.results, &[line])?;
            appended += 1;
        }
    }
    if a.fit {
        match largest {
            Some((b, peak)) => println!(
                "largest batch that trained: {b} (pool peak {} GiB)",
                gib(peak)
            ),
            None => println!("none of the batches {batches:?} trained"),
        }
    }
    if appended > 0 {
        println!("appended {appended} lines to {}", a.results.display());
    }
    Ok(())
}
