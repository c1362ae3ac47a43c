//! What the trainer tests share: a micro model (trains a step in milliseconds) and a runner.
#![allow(dead_code)]
use std::path::Path;
use std::sync::atomic::AtomicBool;

use swax_hybrid::config::Config;
use swax_hybrid::train::{self, Options, Summary};
use swax_tensor::Device;

pub static NEVER: AtomicBool = AtomicBool::new(false);

/// swax-tiny shrunk: d 32, 2 heads, T 64, B 4, a small corpus; `extra` overrides on top.
pub fn micro(pattern: &str, steps: u64, extra: &[&str]) -> Config {
    let mut sets: Vec<String> = [
        format!("model.pattern={pattern:?}"),
        format!("model.n_layers={}", pattern.len().max(2)),
        "model.d_model=32".into(),
        "model.n_heads=2".into(),
        "model.n_kv_heads=1".into(),
        "model.d_ff=64".into(),
        "model.chunk=16".into(),
        "data.seq_len=64".into(),
        "data.batch_size=4".into(),
        "data.source=\"corpus\"".into(),
        "data.corpus_train_tokens=40000".into(),
        "data.corpus_val_tokens=2048".into(),
        "data.corpus_max_doc_tokens=128".into(),
        format!("train.steps={steps}"),
        "train.w_short=8".into(),
        "train.w_long=32".into(),
        "train.eval_every=0".into(),
        "train.eval_batches=2".into(),
        "train.save_every=0".into(),
        "train.recall_probes=0".into(),
        "optim.warmup_steps=2".into(),
    ]
    .into();
    sets.extend(extra.iter().map(|s| s.to_string()));
    Config::resolve(Some("swax-tiny"), &sets).expect("the micro config is valid")
}

/// Options for a quiet run into `out` on `device`, from the start, to the configured end.
pub fn options(out: &Path, device: Device) -> Options {
    Options {
        out: out.to_path_buf(),
        device,
        resume: false,
        allow_data_change: false,
        stop_at: None,
        progress: false,
        profile: false,
        stop: &NEVER,
    }
}

pub fn run(
    cfg: &Config,
    out: &Path,
    device: Device,
    resume: bool,
    stop_at: Option<u64>,
) -> Summary {
    let opts = Options {
        resume,
        stop_at,
        ..options(out, device)
    };
    train::train(cfg, &opts).expect("training runs")
}

/// The training losses of a run, by step.
pub fn losses(out: &Path) -> Vec<(f64, f64)> {
    train::metrics::series(&out.join("metrics.jsonl"), "loss")
}

/// `(step, loss in a, loss in b)` for steps 1 to `steps` of two runs, each of which must have
/// logged exactly those steps: zipped unchecked, a short or empty series would compare nothing.
pub fn paired_losses(a: &Path, b: &Path, steps: usize) -> Vec<(f64, f64, f64)> {
    let (la, lb) = (losses(a), losses(b));
    let want: Vec<f64> = (1..=steps).map(|s| s as f64).collect();
    for (run, series) in [(a, &la), (b, &lb)] {
        let logged: Vec<f64> = series.iter().map(|&(step, _)| step).collect();
        assert_eq!(logged, want, "steps logged by {}", run.display());
    }
    la.iter()
        .zip(&lb)
        .map(|(&(step, x), &(_, y))| (step, x, y))
        .collect()
}

/// Runs the `swax` program with `args`, as a user would, and returns what it did.
pub fn swax<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_swax"))
        .args(args)
        .output()
        .expect("swax runs")
}

/// What a command printed, stdout then stderr.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
