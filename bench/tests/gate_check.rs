//! `learn --check` end to end on the CPU, on a gate of two tiny cases: a case that names its
//! forms trains only those (and is judged by its figures alone), the settings' `sets` reach every
//! run, and the judgement goes to the table and the JSON lines.
use std::process::Command;

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

#[test]
fn a_case_trains_only_its_forms_and_every_run_gets_the_shared_sets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gate.toml");
    std::fs::write(&file, GATE).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_learn"))
        .args(["--device", "cpu", "--check"])
        .arg(&file)
        .arg("--out")
        .arg(dir.path().join("runs"))
        .arg("--results")
        .arg(dir.path().join("learn.jsonl"))
        .output()
        .unwrap();
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
    assert_eq!(folders, ["M-T32-fused", "M-T32-reference", "S-T32-fused"]);
    assert!(stdout.contains("| S-T32 | fused |"), "{stdout}");
    assert!(!stdout.contains("| S-T32 | reference |"), "{stdout}");

    // The shared sets reach the run's resolved config, and the JSON lines record them.
    let config = std::fs::read_to_string(
        dir.path()
            .join("runs/gate/S-T32-fused/mqar-S-lr1e-3-s0/config.toml"),
    )
    .unwrap();
    assert!(config.contains("d_ff = 48"), "{config}");
    let lines = std::fs::read_to_string(dir.path().join("learning-gate.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 3);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["sets"][0], "model.d_ff=48");
}
