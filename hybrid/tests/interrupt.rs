//! SIGINT (Ctrl-C) and SIGTERM during `swax train`: the run stops after the current step, saves a
//! checkpoint, says how to continue, and exits 130 or 143; `--resume` then carries it on exactly.
#![cfg(unix)]
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn swax() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_swax"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

const SETS: [&str; 12] = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_kv_heads=2",
    "model.d_ff=64",
    "data.seq_len=64",
    "data.batch_size=2",
    "data.corpus_train_tokens=40000",
    "data.corpus_val_tokens=2048",
    "train.steps=100000",
    "train.eval_every=0",
    "train.save_every=0",
    "train.recall_probes=0",
];

/// `swax train` of the micro run into `out` with `extra` arguments.
fn train(out: &Path, extra: &[&str]) -> Command {
    let mut cmd = swax();
    cmd.args(["train", "--device", "cpu", "--quiet", "--out"])
        .arg(out)
        .args(extra);
    for s in SETS {
        cmd.args(["--set", s]);
    }
    cmd
}

/// Starts the micro run, waits until it logs steps, sends `signal`, and checks that it saved a
/// checkpoint, said how to continue and exited with `status`. Returns the step it stopped at.
fn interrupt(out: &Path, signal: &str, status: i32) -> u64 {
    let child = train(out, &[]).spawn().unwrap();
    let metrics = out.join("metrics.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&metrics).map_or(0, |m| m.lines().count()) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no step was logged in 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap()
        .success());
    let done = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert_eq!(
        done.status.code(),
        Some(status),
        "{stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        stdout.contains("stopped after") && stdout.contains("--resume"),
        "{stdout}"
    );
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    assert!(out
        .join("checkpoints")
        .join(latest.trim())
        .join("model.safetensors")
        .exists());
    latest.trim().trim_start_matches("step-").parse().unwrap()
}

fn losses(out: &Path) -> Vec<(f64, f64)> {
    swax_hybrid::train::metrics::series(&out.join("metrics.jsonl"), "loss")
}

#[test]
fn ctrl_c_saves_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let step = interrupt(&out, "-INT", 130);

    // The interrupted run continues from its checkpoint, one step further.
    let next = (step + 1).to_string();
    let resumed = train(&out, &["--resume", "--stop-at", &next])
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    assert_eq!(
        latest
            .trim()
            .trim_start_matches("step-")
            .parse::<u64>()
            .unwrap(),
        step + 1
    );
}

#[test]
fn sigterm_saves_exits_143_and_the_resumed_run_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (out, whole) = (dir.path().join("run"), dir.path().join("whole"));
    let step = interrupt(&out, "-TERM", 143);
    let until = (step + 3).to_string();
    for (run, extra) in [
        (&out, vec!["--resume", "--stop-at", &until]),
        (&whole, vec!["--stop-at", &until]),
    ] {
        let done = train(run, &extra).output().unwrap();
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let (a, b) = (losses(&out), losses(&whole));
    assert_eq!(a.len() as u64, step + 3);
    assert_eq!(
        a, b,
        "the interrupted and resumed run differs from the whole one"
    );
}
