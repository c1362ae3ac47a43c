//! A learning-benchmark run whose process is killed (as a machine's time limit kills it: no
//! signal to save on) continues from its last checkpoint when trained again, keeping the steps
//! it had trained, instead of starting over.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STEPS: u64 = 3000;

fn learn(dir: &Path) -> Command {
    const ARGS: &str = "--device cpu --task mqar --patterns M --lrs 1e-3 --layers 1 --d-model 16 \
                        --heads 1 --seq-len 32 --pairs 2 --batch 2 --eval-every 1000 --probes 4 \
                        --save-every 2 --set model.d_ff=48";
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_learn"));
    cmd.args(ARGS.split_whitespace())
        .arg(format!("--steps={STEPS}"))
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--results")
        .arg(dir.join("learn.jsonl"));
    cmd
}

/// The steps of a run's metrics, each with the time it was logged at.
fn steps(run: &Path) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r.get("loss").is_some())
        .map(|r| {
            (
                r["step"].as_u64().unwrap(),
                r["elapsed_s"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

#[test]
fn a_killed_run_continues_from_its_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("runs/mqar-M-lr1e-3-s0");
    let mut child = learn(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it as soon as it has saved a checkpoint before its last step.
    let start = Instant::now();
    while !run.join("checkpoints/latest").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint in {} after 120 s: runs save only at their end",
            run.display()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it saved a checkpoint"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let saved: u64 = std::fs::read_to_string(run.join("checkpoints/latest"))
        .unwrap()
        .trim()
        .trim_start_matches("step-")
        .parse()
        .unwrap();
    assert!(saved < STEPS, "the run finished before it was killed");
    let before = steps(&run);

    let again = learn(dir.path()).output().unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let after = steps(&run);
    assert_eq!(after.len() as u64, STEPS, "one line per step");
    assert_eq!(
        after.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=STEPS).collect::<Vec<_>>()
    );
    // The steps up to the checkpoint are the killed process's own lines, not trained again.
    let kept = (saved as usize).min(before.len());
    assert!(kept >= 2);
    assert_eq!(after[..kept], before[..kept]);
}
