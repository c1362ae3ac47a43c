//! Ctrl-C during `swax train`: the run stops after the current step, saves a checkpoint, says how
//! to continue, and exits successfully; `--resume` then carries it on.
#![cfg(unix)]
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn swax() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_swax"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

#[test]
fn ctrl_c_saves_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let sets = [
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
    let mut args = vec![
        "train",
        "--device",
        "cpu",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let child = swax().args(&args).spawn().unwrap();
    // Wait until steps are being logged, then interrupt as a terminal's Ctrl-C would.
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
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let done = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
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

    // The interrupted run continues from its checkpoint, one step further.
    let step: u64 = latest.trim().trim_start_matches("step-").parse().unwrap();
    let next = (step + 1).to_string();
    let resumed = swax()
        .args([
            "train",
            "--device",
            "cpu",
            "--quiet",
            "--resume",
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--stop-at", &next])
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
