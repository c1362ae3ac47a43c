//! The generation benchmark: a model with random weights reads a prompt of each context length
//! (prefill, in pieces), then decodes tokens one at a time, for each batch size; it prints
//! prefill tokens/s, the latency of a decoding step and the GPU memory at each phase, and appends
//! one JSON line per case to `bench/results/generate.jsonl`.
//!
//!   bench-generate --config swax-small --batches 1,64 --contexts 4096,32768,131072
//!
//! A decoding step is timed from the token ids on the host to the logits back on the host in f32
//! (what the transformers peer times), again to the greedy ids back on the host (the argmax on
//! the device, what greedy `swax generate` waits per token), and again to sampled ids (the draw
//! on the device at temperature 1, top-k 50, top-p 0.9: `swax_nn::sampling`, with the rows'
//! random u32s uploaded each step); each the median of `--decode-tokens` steps after `--warmup`
//! steps. Memory is the CUDA pool's: the peak while
//! prefilling, the peak while decoding, and the bytes in use once the prompt is read and again
//! after the last step (the weights and the decoding state: flat for windowed and recurrent
//! layers, growing for full attention). The JSON line also holds what a timed step asked of
//! the GPU on average (`swax_cuda::counters`: launches, cuBLAS calls, host syncs, uploads).
//!
//! On the GPU a greedy step's time is also split between the host and the device
//! ([`split_step`]): with the GPU kept busy by products queued first, the host's time to issue
//! the step and the device's time to run it (CUDA events, no gap left by the host) are
//! measured apart. A step whose host time is near its whole time is bound by issuing launches,
//! not by the GPU's work. `--kernels N` also records one such step's timeline
//! (`swax_cuda::timeline`: each launch and cuBLAS call with its device time) and prints the N
//! kernels that took the most, summed over their calls.
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use swax_bench::config_args::ConfigArgs;
use swax_bench::record;
use swax_hybrid::generate::Decoder;
use swax_hybrid::model::Model;
use swax_nn::sampling::{self, Cuts};
use swax_tensor::{DType, Device, Tensor};

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    model: ConfigArgs,
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    batches: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "4096,32768,131072")]
    contexts: Vec<usize>,
    /// The attention window (0: the config's w_long).
    #[arg(long, default_value_t = 0)]
    window: usize,
    /// Tokens of all rows together read per prefill pass (this bounds the activations' memory).
    #[arg(long, default_value_t = 65536)]
    piece_tokens: usize,
    #[arg(long, default_value_t = 64)]
    decode_tokens: usize,
    #[arg(long, default_value_t = 8)]
    warmup: usize,
    /// On the GPU, print the N kernels (and cuBLAS shapes) of one greedy step that took the
    /// most device time, and keep them all in the JSON line (0: none).
    #[arg(long, default_value_t = 0)]
    kernels: usize,
    /// `cpu`, `cuda`; default: the GPU if there is one.
    #[arg(long)]
    device: Option<String>,
    #[arg(long, default_value = "bench/results/generate.jsonl")]
    results: PathBuf,
}

/// The cuts of the sampled step's draw.
const SAMPLED: Cuts = Cuts {
    temperature: 1.0,
    top_k: 50,
    top_p: 0.9,
};

/// The median milliseconds of a decoding step from the token ids on the host to the next ids
/// back on the host, `pick(logits, step)` choosing them on the logits' device.
fn picked_ms(
    dec: &mut Decoder,
    a: &Args,
    (batch, v): (u32, u32),
    pick: impl Fn(&Tensor, u32) -> swax_tensor::Result<Tensor>,
) -> Result<f64, Error> {
    let mut times = Vec::with_capacity(a.decode_tokens);
    for step in 0..(a.warmup + a.decode_tokens) as u32 {
        let next: Vec<u32> = (0..batch).map(|r| (r + step) % v).collect();
        let start = Instant::now();
        pick(&dec.logits(&next)?, step)?.to_vec::<u32>()?;
        if step as usize >= a.warmup {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The products queued ahead of a split step: long enough for the host to issue the whole step
/// while they run.
const BLOCKERS: usize = 8;

/// One greedy step's (host, device, blocked) milliseconds, and its timeline when `timed`
/// (else empty): `BLOCKERS` products of `block` keep the GPU busy, the step is issued behind
/// them between two events, and the events give the device's time for the step alone; the host
/// time is a true issue time only while it stays under the time of the products before it.
fn split_step(
    dec: &mut Decoder,
    next: &[u32],
    block: &Tensor,
    timed: bool,
) -> Result<SplitStep, Error> {
    use swax_cuda::timing::{elapsed_ms, event, record};
    let dev = swax_tensor::cuda::device(0)?;
    let (before, start, end) = (event(&dev)?, event(&dev)?, event(&dev)?);
    record(&dev, &before)?;
    for _ in 0..BLOCKERS {
        block.matmul(block)?;
    }
    record(&dev, &start)?;
    let timeline = match timed {
        true => Some(swax_cuda::timeline::Timeline::start(&dev)?),
        false => None,
    };
    let clock = Instant::now();
    let ids = dec.logits(next)?.argmax(-1, false)?;
    let host_ms = clock.elapsed().as_secs_f64() * 1e3;
    record(&dev, &end)?;
    let spans = match timeline {
        Some(t) => t.finish()?,
        None => Vec::new(),
    };
    let times = (
        host_ms,
        elapsed_ms(&start, &end)?,
        elapsed_ms(&before, &start)?,
    );
    drop(ids);
    Ok((times, spans))
}

/// A split step's (host, device, blocked) milliseconds and its timeline.
type SplitStep = ((f64, f64, f64), Vec<swax_cuda::timeline::Span>);

/// The CUDA pool's statistics, or none on the CPU.
fn pool(device: Device) -> Option<swax_cuda::pool::PoolStats> {
    match device {
        Device::Cuda(i) => swax_tensor::cuda::device(i).ok().map(|d| d.pool_stats()),
        Device::Cpu => None,
    }
}

fn reset_peak(device: Device) {
    if let Device::Cuda(i) = device {
        if let Ok(d) = swax_tensor::cuda::device(i) {
            d.reset_peak();
        }
    }
}

fn gib(bytes: Option<usize>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.2}", b as f64 / (1u64 << 30) as f64)
    })
}

/// What every case of a run shares.
struct Setup<'a> {
    a: &'a Args,
    cfg: &'a swax_hybrid::config::Config,
    model: &'a Model,
    device: Device,
    dtype: DType,
    window: usize,
    /// The vocabulary.
    v: u32,
}

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let a = Args::parse();
    let cfg = a.model.resolve()?;
    let device = match a.device.as_deref() {
        Some("cpu") => Device::Cpu,
        Some(_) => Device::Cuda(0),
        None if swax_tensor::cuda::device(0).is_ok() => Device::Cuda(0),
        None => Device::Cpu,
    };
    let dtype = match device {
        Device::Cuda(_) => DType::BF16,
        Device::Cpu => DType::F32,
    };
    let window = match a.window {
        0 => cfg.train.w_long,
        w => w,
    };
    let model = Model::new(&cfg.model, cfg.train.seed, device)?;
    let s = Setup {
        a: &a,
        cfg: &cfg,
        model: &model,
        device,
        dtype,
        window,
        v: cfg.model.vocab_size as u32,
    };
    println!(
        "{} ({} x{} layers, d_model {}), window {window}, on {device}, {dtype:?}",
        cfg.model.name, cfg.model.pattern, cfg.model.n_layers, cfg.model.d_model
    );
    println!("batch  context  piece  prefill tok/s  decode ms/token  greedy ms/token  sampled ms/token  decode tok/s  peak GiB prefill/decode  in use GiB after prefill/decode  launches/syncs per step");
    let mut lines = Vec::new();
    for &batch in &a.batches {
        // Kernels compiled and the pool filled before anything is timed.
        let mut warm = Decoder::new(&model, window, dtype, device, batch)?;
        let piece = (a.piece_tokens / batch).clamp(1, 4096);
        warm.prefill(&vec![1; piece], piece)?.to_vec::<f32>()?;
        warm.read(&vec![1; batch])?.to_vec::<f32>()?;
        drop(warm);
        for &context in &a.contexts {
            lines.push(case(&s, batch, context)?);
        }
    }
    record::append(&a.results, &lines)?;
    println!("appended {} lines to {}", lines.len(), a.results.display());
    Ok(())
}

/// One batch and context: prefill, then the decoding steps timed to the logits, greedy, sampled
/// and split; prints its row and returns its JSON line.
fn case(s: &Setup, batch: usize, context: usize) -> Result<serde_json::Value, Error> {
    let (a, device, v) = (s.a, s.device, s.v);
    let piece = (a.piece_tokens / batch).clamp(1, context);
    let prompt: Vec<u32> = (0..context as u32).map(|i| (i * 7919 + 13) % v).collect();
    let mut dec = Decoder::new(s.model, s.window, s.dtype, device, batch)?;
    reset_peak(device);
    let start = Instant::now();
    dec.prefill(&prompt, piece)?.to_vec::<f32>()?;
    let prefill_s = start.elapsed().as_secs_f64();
    let after_prefill = pool(device);
    reset_peak(device);
    let (decode_ms, counts) = logits_steps(&mut dec, a, batch, v)?;
    let per_step = |x: u64| x as f64 / a.decode_tokens.max(1) as f64;
    let greedy_ms = picked_ms(&mut dec, a, (batch as u32, v), |logits, _| {
        logits.argmax(-1, false)
    })?;
    let sampled_ms = picked_ms(&mut dec, a, (batch as u32, v), |logits, step| {
        let r: Vec<u32> = (0..batch as u32)
            .map(|row| (row ^ step).wrapping_mul(2_654_435_761))
            .collect();
        let r = Tensor::from_vec(r, vec![batch], device)?;
        sampling::sample(logits, &r, &SAMPLED)
    })?;
    // The decoding memory before the split's products take theirs.
    let after_decode = pool(device);
    // The products a split step is queued behind (none on the CPU).
    let block = match device {
        Device::Cuda(_) => Some(Tensor::ones([8192, 8192], s.dtype, device)?),
        Device::Cpu => None,
    };
    let split = match &block {
        Some(block) => Some(split_medians(&mut dec, a, batch, v, block)?),
        None => None,
    };
    let prefill_tps = (batch * context) as f64 / prefill_s;
    let decode_tps = batch as f64 / decode_ms * 1e3;
    let peak = |s: &Option<swax_cuda::pool::PoolStats>| s.map(|s| s.peak_in_use);
    let held = |s: &Option<swax_cuda::pool::PoolStats>| s.map(|s| s.in_use);
    println!(
        "{batch:>5}  {context:>7}  {piece:>5}  {prefill_tps:>13.0}  {decode_ms:>15.2}  {greedy_ms:>15.2}  {sampled_ms:>16.2}  {decode_tps:>12.0}  {:>11} / {:<11}  {:>12} / {:<12}  {:.0} / {:.1}",
        gib(peak(&after_prefill)),
        gib(peak(&after_decode)),
        gib(held(&after_prefill)),
        gib(held(&after_decode)),
        per_step(counts.launches),
        per_step(counts.syncs),
    );
    if let Some((host, dev, blocked)) = split {
        println!(
            "       greedy step split: host issues it in {host:.2} ms, the device runs it in {dev:.2} ms (behind {blocked:.1} ms of queued products)"
        );
    }
    let kernels = match (&block, a.kernels) {
        (Some(block), n) if n > 0 => kernel_profile(&mut dec, batch, block, n)?,
        _ => Vec::new(),
    };
    let cfg = s.cfg;
    Ok(json!({
        "bench": "generate", "date": record::today(), "commit": record::commit(),
        "device": record::device(device), "config": cfg.model.name, "pattern": cfg.model.pattern,
        "n_layers": cfg.model.n_layers, "d_model": cfg.model.d_model, "dtype": format!("{:?}", s.dtype),
        "batch": batch, "context": context, "window": s.window, "piece": piece,
        "prefill_s": prefill_s, "prefill_tokens_per_s": prefill_tps,
        "decode_ms_per_token": decode_ms, "decode_tokens_per_s": decode_tps,
        "greedy_ms_per_token": greedy_ms, "sampled_ms_per_token": sampled_ms,
        "sampled_cuts": json!({
            "temperature": SAMPLED.temperature, "top_k": SAMPLED.top_k,
            "top_p": SAMPLED.top_p,
        }),
        "greedy_host_issue_ms": split.map(|s| s.0),
        "greedy_device_ms": split.map(|s| s.1),
        "split_blocker_ms": split.map(|s| s.2),
        "kernel_ms": kernels.iter()
            .map(|(l, c, ms)| json!({"kernel": l, "calls": c, "ms": ms}))
            .collect::<Vec<_>>(),
        "decode_steps": a.decode_tokens,
        "launches_per_step": per_step(counts.launches),
        "blas_calls_per_step": per_step(counts.blas_calls),
        "syncs_per_step": per_step(counts.syncs),
        "uploads_per_step": per_step(counts.uploads),
        "peak_bytes_prefill": peak(&after_prefill), "peak_bytes_decode": peak(&after_decode),
        "in_use_bytes_after_prefill": held(&after_prefill),
        "in_use_bytes_after_decode": held(&after_decode),
    }))
}

/// The median milliseconds of a step to the logits on the host, and the launches, calls and
/// syncs of the timed steps (the warm-up left out).
fn logits_steps(
    dec: &mut Decoder,
    a: &Args,
    batch: usize,
    v: u32,
) -> Result<(f64, swax_cuda::counters::Counts), Error> {
    let mut times = Vec::with_capacity(a.decode_tokens);
    let mut counts = swax_cuda::counters::Counts::default();
    for step in 0..a.warmup + a.decode_tokens {
        let next: Vec<u32> = (0..batch as u32).map(|r| (r + step as u32) % v).collect();
        if step == a.warmup {
            counts = swax_cuda::counters::counts();
        }
        let start = Instant::now();
        dec.read(&next)?.to_vec::<f32>()?;
        if step >= a.warmup {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let counts = swax_cuda::counters::counts().since(&counts);
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], counts))
}

/// The medians of the split steps' (host, device, blocked) milliseconds.
fn split_medians(
    dec: &mut Decoder,
    a: &Args,
    batch: usize,
    v: u32,
    block: &Tensor,
) -> Result<(f64, f64, f64), Error> {
    let mut runs = Vec::with_capacity(a.decode_tokens);
    for step in 0..a.decode_tokens {
        let next: Vec<u32> = (0..batch as u32).map(|r| (r + step as u32) % v).collect();
        runs.push(split_step(dec, &next, block, false)?.0);
    }
    let median = |f: fn(&(f64, f64, f64)) -> f64| {
        let mut x: Vec<f64> = runs.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    Ok((median(|r| r.0), median(|r| r.1), median(|r| r.2)))
}

/// One greedy step's kernels by device time, summed per label; prints the `n` costliest.
fn kernel_profile(
    dec: &mut Decoder,
    batch: usize,
    block: &Tensor,
    n: usize,
) -> Result<Vec<(String, usize, f64)>, Error> {
    let next: Vec<u32> = (0..batch as u32).collect();
    let ((_, step_ms, _), spans) = split_step(dec, &next, block, true)?;
    let summed = swax_cuda::timeline::by_label(&spans);
    println!(
        "       one greedy step timed kernel by kernel: {} spans summing to {:.2} ms (the step with its events: {step_ms:.2} ms)",
        spans.len(),
        spans.iter().map(|s| s.ms).sum::<f64>()
    );
    for (label, calls, ms) in summed.iter().take(n) {
        println!("         {ms:>7.3} ms  {calls:>3} x  {label}");
    }
    Ok(summed)
}
