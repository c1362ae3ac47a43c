//! `learn --check` end to end on the CPU, on a gate of two tiny cases: a case that names its
//! forms trains only those (and is judged by its figures alone), the settings' `sets` reach every
//! run, and the judgement goes to the table and the JSON lines; `--judge` judges the runs again
//! without training, and refuses a run cut short.
use std::path::Path;
use std::process::{Command, Output};

const GATE: &str = r#"
[settings]
layers = 1
d_model = 16
heads = 1
batch = 2
seeds = 1
eval_every = 2
probes = 4
learned = 0.9
slack = 0.1
sets = ["model.d_ff=48", "optim.warmup_steps=1"]

[[case]]
pattern = "M"
seq_len = 32
pairs = 2
steps = 2
lr = 1e-3
min_learned = 0
min_final = 0.0

[[case]]
pattern = "S"
seq_len = 32
pairs = 2
steps = 2
lr = 1e-3
forms = ["fused"]
min_learned = 0
min_final = 0.0
"#;

/// `learn --device cpu --check DIR/gate.toml` into DIR, with `extra` arguments.
fn learn(dir: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_learn"))
        .args(["--device", "cpu", "--check"])
        .arg(dir.join("gate.toml"))
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--results")
        .arg(dir.join("learn.jsonl"))
        .args(extra)
        .output()
        .unwrap()
}

/// A folder holding the gate (`gate.toml`) and its case M-T32 trained into `runs`.
fn trained_m_case() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gate.toml"), GATE).unwrap();
    let first = learn(dir.path(), &["--cases", "M-T32"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    dir
}

#[test]
fn a_case_trains_only_its_forms_and_every_run_gets_the_shared_sets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gate.toml"), GATE).unwrap();
    let out = learn(dir.path(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut folders: Vec<String> = std::fs::read_dir(dir.path().join("runs/gate"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    // A folder of runs per case and form it trains, and a chart of each case's curves.
    assert_eq!(
        folders,
        [
            "M-T32-fused",
            "M-T32-reference",
            "M-T32.svg",
            "S-T32-fused",
            "S-T32.svg"
        ]
    );
    let chart = std::fs::read_to_string(dir.path().join("runs/gate/S-T32.svg")).unwrap();
    assert!(chart.contains(">fused s0<") && !chart.contains(">reference s0<"));
    assert!(stdout.contains("| S-T32 | fused |"), "{stdout}");
    assert!(!stdout.contains("| S-T32 | reference |"), "{stdout}");

    // The shared sets reach the run's resolved config, and the JSON lines record them.
    let config = std::fs::read_to_string(
        dir.path()
            .join("runs/gate/S-T32-fused/mqar-S-lr1e-3-s0/config.toml"),
    )
    .unwrap();
    assert!(config.contains("d_ff = 48"), "{config}");
    // The results are named after the gate's file (gate.toml: gate.jsonl), and say which.
    let lines = std::fs::read_to_string(dir.path().join("gate.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 3);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["sets"][0], "model.d_ff=48");
    assert_eq!(first["bench"], "gate");

    // Judged again from the same runs, without training: the same table.
    let again = learn(dir.path(), &["--judge"]);
    let table = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("| "))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(table(&again), table(&out));
    assert!(String::from_utf8_lossy(&again.stdout).contains("judged from the runs in"));

    // A run cut short is refused by name.
    let metrics = dir
        .path()
        .join("runs/gate/S-T32-fused/mqar-S-lr1e-3-s0/metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let first = text.lines().next().unwrap();
    std::fs::write(&metrics, format!("{first}\n")).unwrap();
    let cut = learn(dir.path(), &["--judge"]);
    assert!(!cut.status.success());
    let err = String::from_utf8_lossy(&cut.stderr);
    assert!(
        err.contains("S-T32-fused/mqar-S-lr1e-3-s0 ended at step 1 of 2"),
        "{err}"
    );
}

#[test]
fn a_mistyped_key_in_the_gate_is_named_before_any_run_starts() {
    let dir = tempfile::tempdir().unwrap();
    let typo = GATE.replace("model.d_ff=48", "model.d_fff=48");
    std::fs::write(dir.path().join("gate.toml"), typo).unwrap();
    let out = learn(dir.path(), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("case M-T32: unknown config key \"model.d_fff\""),
        "{err}"
    );
    assert!(!dir.path().join("runs").exists(), "nothing was trained");
}

/// A gate cut off part way (here: one case of two trained) goes on where it stopped when run
/// again into the same folder: the finished runs are judged as they are, not trained again (their
/// logs keep the first training's lines), and the table and the JSON lines say how many runs the
/// time covers.
#[test]
fn a_gate_run_again_trains_only_the_runs_it_has_not_finished() {
    let dir = trained_m_case();
    let log = dir.path().join("runs/gate/M-T32-fused/s0.log");
    let trained = std::fs::read_to_string(&log).unwrap();
    assert!(trained.contains("training M at lr"), "{trained}");

    let whole = learn(dir.path(), &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&whole.stdout),
        String::from_utf8_lossy(&whole.stderr),
    );
    assert!(whole.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("3 runs (2 of them already trained in"),
        "{stderr}"
    );
    assert!(stderr.contains("done: S-T32 fused seed 0"), "{stderr}");
    assert!(!stderr.contains("done: M-T32"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), trained);
    assert!(stdout.contains("for 1 of its 3 runs"), "{stdout}");
    assert!(stdout.contains("| M-T32 | fused |"), "{stdout}");
    let lines = std::fs::read_to_string(dir.path().join("gate.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["runs"].as_u64(), last["runs_trained"].as_u64()),
        (Some(3), Some(1))
    );
}

/// A gate run again into a folder whose runs its file no longer describes (a case's settings
/// changed since) refuses, naming the run and what differs, and leaves the run as it was: judged,
/// the old run would pass for the new case.
#[test]
fn a_run_the_gate_no_longer_describes_is_refused_not_judged() {
    let dir = trained_m_case();
    let metrics = dir
        .path()
        .join("runs/gate/M-T32-fused/mqar-M-lr1e-3-s0/metrics.jsonl");
    let trained = std::fs::read_to_string(&metrics).unwrap();

    let changed = GATE.replacen(
        "steps = 2\nlr = 1e-3\nmin_learned",
        "steps = 2\nlr = 1e-3\nsets = [\"data.batch_size=3\"]\nmin_learned",
        1,
    );
    assert_ne!(changed, GATE);
    std::fs::write(dir.path().join("gate.toml"), changed).unwrap();
    for extra in [&["--cases", "M-T32"][..], &["--cases", "M-T32", "--judge"]] {
        let again = learn(dir.path(), extra);
        let stderr = String::from_utf8_lossy(&again.stderr);
        assert!(!again.status.success(), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("mqar-M-lr1e-3-s0: trained with data.batch_size = 2")
                && stderr.contains("case M-T32 now trains data.batch_size = 3"),
            "{extra:?}: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(&metrics).unwrap(), trained);
    }
}

/// A case of another task than the program's default (`task = "passkey"`) is judged from the
/// runs it trained: the folder the child names after the case's task.
#[test]
fn a_case_of_another_task_is_judged_from_its_own_runs() {
    let dir = tempfile::tempdir().unwrap();
    // The M case as a passkey case (a pass key and its question need more than 32 tokens).
    let gate = GATE.replace(
        "pattern = \"M\"\nseq_len = 32\npairs = 2\n",
        "pattern = \"M\"\nseq_len = 128\npairs = 1\ntask = \"passkey\"\n",
    );
    assert_ne!(gate, GATE);
    std::fs::write(dir.path().join("gate.toml"), gate).unwrap();
    let out = learn(dir.path(), &["--cases", "M-T128", "--forms", "fused"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = dir.path().join("runs/gate/M-T128-fused");
    assert!(run.join("passkey-M-lr1e-3-s0/metrics.jsonl").exists());
    // The gate's line carries the run's own curve and final figure, as its child wrote them.
    let child: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("learn.jsonl")).unwrap()).unwrap();
    let lines = std::fs::read_to_string(dir.path().join("gate.jsonl")).unwrap();
    let judged: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(judged["task"], "passkey");
    assert_eq!(judged["curves"][0], child["curve"]);
    assert_eq!(judged["curves"][0].as_array().unwrap().len(), 1);
    assert_eq!(judged["finals"][0], child["final_accuracy"]);
}
