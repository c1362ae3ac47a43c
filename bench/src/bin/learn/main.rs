//! The learning benchmark: trains each layer pattern on recall data (Zoology's MQAR, or pass keys
//! to copy) at a few learning rates and prints held-out recall against the tokens seen, each
//! pattern at its best rate, beside what Zoology (arXiv 2312.04927) reports: attention solves MQAR
//! at every width, gated recurrences when their state is large enough.
//!
//!   learn --task mqar --patterns S,M,SM --lrs 1e-3,3e-3 --steps 2000
//!
//! Runs go to `--out` (default `bench/runs/learn`), one folder each; a finished run is not
//! trained again, and one cut off continues from its last checkpoint (`--save-every`), so an
//! interrupted benchmark continues where it stopped. Each run's outcome is
//! appended to `bench/results/learn.jsonl`.
//!
//!   learn --check bench/learning-gate.toml [--jobs 16]
//!
//! runs the learning gate (`swax_bench::gate`): every case of the file, several seeds, with the
//! fused kernels and with the reference forms, `--jobs` runs at a time (each a process of this
//! program), then prints each case's verdict beside the figures the file expects, appends a line
//! per case and form to `bench/results/learning-gate.jsonl` (the results are named after the
//! gate's file; `check.rs`), and exits non-zero where a fused
//! form falls short. Run again into the same `--out`, a gate trains only the runs it has not
//! finished, each from its last checkpoint, so one that a time limit cut off goes on where it
//! stopped.
mod check;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use clap::Parser;
use serde_json::{json, Value};
use swax_bench::gate;
use swax_bench::learning::{best_per_pattern, Outcome};
use swax_bench::record;
use swax_hybrid::config::Config;
use swax_hybrid::train::{self, checkpoint, Options};
use swax_tensor::Device;

#[derive(Debug, Parser)]
struct Args {
    /// `mqar` or `passkey` (the recall sources of `swax train --data`).
    #[arg(long, default_value = "mqar")]
    task: String,
    #[arg(long, value_delimiter = ',', default_value = "F,S,M,G,R,SM,SG,RRRF")]
    patterns: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "1e-3,3e-3")]
    lrs: Vec<f64>,
    #[arg(long, default_value_t = 2)]
    layers: usize,
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    #[arg(long, default_value_t = 2)]
    heads: usize,
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// MQAR key-value pairs per row (0: seq_len / 16).
    #[arg(long, default_value_t = 16)]
    pairs: usize,
    /// The attention window of S and R layers (0: the whole sequence).
    #[arg(long, default_value_t = 0)]
    window: usize,
    #[arg(long, default_value_t = 1500)]
    steps: u64,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long, default_value_t = 100)]
    eval_every: u64,
    /// Steps between a run's checkpoints (0: only at its end). A process killed by a time limit
    /// saves nothing, so its run continues from the last of these when trained again.
    #[arg(long, default_value_t = 500)]
    save_every: u64,
    /// Held-out answers scored at each evaluation.
    #[arg(long, default_value_t = 256)]
    probes: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `cpu`, `cuda`; default: the GPU if there is one. With --judge, the device that trained
    /// the runs, as the results should record it (for example `cuda:0 (H100)`).
    #[arg(long)]
    device: Option<String>,
    #[arg(long, default_value = "bench/runs/learn")]
    out: PathBuf,
    #[arg(long, default_value = "bench/results/learn.jsonl")]
    results: PathBuf,
    /// Further config overrides, `KEY=VALUE` as `swax train --set` takes them (applied last).
    #[arg(long = "set")]
    sets: Vec<String>,
    /// Run the learning gate of this file (see `swax_bench::gate`) instead of the benchmark.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// The gate's runs at a time (default: 16 on a GPU, 1 on the CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// The gate's cases to run, by name (`M-T256`); default all.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// With --check: train nothing, judge the finished runs already in --out (a gate whose
    /// judgement a time limit cut off); a run that did not finish is an error naming it.
    #[arg(long)]
    judge: bool,
    /// The gate's forms to train: `fused`, `reference` or both (the default). With one, each
    /// case is judged only against the figures its file keeps, not against the other form.
    #[arg(long, value_delimiter = ',', default_values_t = gate::FORMS.map(String::from))]
    forms: Vec<String>,
}

static NEVER: AtomicBool = AtomicBool::new(false);

fn config(a: &Args, pattern: &str, lr: f64) -> Result<Config, Box<dyn std::error::Error>> {
    let window = match a.window {
        0 => a.seq_len,
        w => w,
    };
    let sets = [
        format!("model.name=\"learn-{}-{pattern}\"", a.task),
        format!("model.pattern=\"{pattern}\""),
        format!("model.n_layers={}", a.layers.max(pattern.len())),
        format!("model.d_model={}", a.d_model),
        format!("model.n_heads={}", a.heads),
        format!("model.n_kv_heads={}", a.heads),
        format!("model.d_ff={}", 2 * a.d_model),
        format!("data.source=\"{}\"", a.task),
        format!("data.seq_len={}", a.seq_len),
        format!("data.batch_size={}", a.batch),
        format!("data.mqar_pairs={}", a.pairs),
        format!("train.steps={}", a.steps),
        format!("train.w_short={window}"),
        format!("train.w_long={window}"),
        "train.p_short=0".into(),
        "train.anneal_fraction=0".into(),
        format!("train.eval_every={}", a.eval_every),
        "train.eval_batches=2".into(),
        format!("train.save_every={}", a.save_every),
        format!("train.recall_probes={}", a.probes),
        format!("train.seed={}", a.seed),
        format!("optim.lr={lr}"),
        format!("optim.warmup_steps={}", (a.steps / 20).max(1)),
    ];
    let sets: Vec<String> = sets.into_iter().chain(a.sets.iter().cloned()).collect();
    Ok(Config::resolve(Some("swax-tiny"), &sets)?)
}

fn records(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn main() {
    // Errors in plain words (a returned error would print as its Debug form, quotes escaped).
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let device = match a.device.as_deref() {
        Some("cpu") => Device::Cpu,
        Some(_) => Device::Cuda(0),
        None if swax_tensor::cuda::device(0).is_ok() => Device::Cuda(0),
        None => Device::Cpu,
    };
    if a.judge && a.check.is_none() {
        return Err("--judge judges a gate's runs: give the gate with --check".into());
    }
    if let Some(file) = &a.check {
        let passed = check::check(&a, file, device)?;
        std::process::exit(if passed { 0 } else { 1 });
    }
    let window = match a.window {
        0 => a.seq_len,
        w => w,
    };
    let mut outcomes = Vec::new();
    for pattern in &a.patterns {
        for &lr in &a.lrs {
            let cfg = config(&a, pattern, lr)?;
            let run = a
                .out
                .join(format!("{}-{pattern}-lr{lr:e}-s{}", a.task, a.seed));
            let done = checkpoint::latest(&run)
                .is_some_and(|c| c.ends_with(format!("step-{:07}", a.steps)));
            if !done {
                eprintln!("training {pattern} at lr {lr:e} into {}", run.display());
                let resume = checkpoint::latest(&run).is_some();
                if !resume {
                    let _ = std::fs::remove_dir_all(&run);
                }
                train::train(
                    &cfg,
                    &Options {
                        out: run.clone(),
                        device,
                        resume,
                        allow_data_change: false,
                        stop_at: None,
                        progress: false,
                        profile: false,
                        stop: &NEVER,
                    },
                )?;
            }
            outcomes.push(Outcome::score(pattern, lr, &records(&run), window));
        }
    }

    let tokens = |t: Option<u64>| t.map_or("-".to_string(), |t| format!("{:.2}M", t as f64 / 1e6));
    println!(
        "\n{} recall, {} layers, d_model {}, T {}, {} pairs, window {window}, {} steps of {} rows, on {device}",
        a.task, a.layers, a.d_model, a.seq_len, a.pairs, a.steps, a.batch
    );
    println!("| pattern | best lr | final accuracy | tokens to 50% | tokens to 90% | loss spike |");
    println!("|---|---|---|---|---|---|");
    for o in best_per_pattern(&outcomes) {
        println!(
            "| {} | {:e} | {:.1}% | {} | {} | {:.2} |",
            o.pattern,
            o.lr,
            100.0 * o.final_accuracy,
            tokens(o.tokens_to_50),
            tokens(o.tokens_to_90),
            o.spike
        );
    }
    let (date, commit) = (record::today(), record::commit());
    let lines: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "task": a.task, "pattern": o.pattern, "lr": o.lr, "layers": a.layers,
                "d_model": a.d_model, "heads": a.heads, "seq_len": a.seq_len, "pairs": a.pairs,
                "window": window, "steps": a.steps, "batch": a.batch, "seed": a.seed,
                "device": record::device(device), "final_accuracy": o.final_accuracy,
                "tokens_to_50": o.tokens_to_50, "tokens_to_90": o.tokens_to_90,
                "spike": o.spike, "curve": o.curve, "sets": a.sets, "date": date,
                "commit": commit,
            })
        })
        .collect();
    record::append(&a.results, &lines)?;
    Ok(())
}
