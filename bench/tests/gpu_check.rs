//! bench/gpu-check.sh without a GPU: the script run in a folder of its own, where `.gpu/bin/learn`
//! is a stand-in shell script. Parts joined by "+" run side by side, LIMIT stops the running
//! parts' processes and skips the parts not yet started, and a part it does not know or a LIMIT
//! that is not a number is refused before anything runs.
use std::path::Path;
use std::process::{Command, Output};

/// The script, embedded: test binaries also run on a GPU machine, where this checkout's paths
/// do not exist.
const SCRIPT: &str = include_str!("../gpu-check.sh");

/// `learn --check FILE ...`: marks that FILE's run started, waits up to 20 s for the other gate
/// file's run to start too, and says whether it saw it; SIGTERM ends it, saying so.
const LEARN: &str = r#"#!/usr/bin/env bash
trap 'echo "stopped by SIGTERM"; exit 143' TERM
me=$(basename "$2" .toml)
touch "marks/$me"
for i in $(seq 200); do
  for other in marks/*; do
    [ "$other" != "marks/$me" ] && { echo "beside $(basename "$other")"; break 2; }
  done
  sleep 0.1
done
[ "${HOLD:-}" = 1 ] && for i in $(seq 600); do sleep 0.1; done
echo "done"
"#;

fn checkout(dir: &Path) {
    for sub in ["bench", ".gpu/bin", "marks"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("bench/gpu-check.sh"), SCRIPT).unwrap();
    std::fs::write(dir.join(".gpu/commit"), "abc1234\n").unwrap();
    let learn = dir.join(".gpu/bin/learn");
    std::fs::write(&learn, LEARN).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&learn, mode).unwrap();
}

fn check(dir: &Path, env: &[(&str, &str)], parts: &[&str]) -> Output {
    Command::new("bash")
        .arg(dir.join("bench/gpu-check.sh"))
        .arg(dir.join("out"))
        .args(parts)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

#[test]
fn parts_joined_by_plus_run_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    checkout(dir.path());
    let out = check(dir.path(), &[], &["benchmark+passkey"]);
    assert!(out.status.success(), "{out:?}");
    // One after the other, each would wait out its 20 s alone and print no "beside".
    let out_dir = dir.path().join("out");
    assert!(read(out_dir.join("benchmark.txt")).contains("beside passkey-budget"));
    assert!(read(out_dir.join("passkey.txt")).contains("beside learning-benchmark"));
    let summary = read(out_dir.join("summary.txt"));
    assert!(summary.contains("benchmark: exit 0") && summary.contains("passkey: exit 0"));
}

#[test]
fn the_limit_stops_training_and_skips_the_parts_after_it() {
    let dir = tempfile::tempdir().unwrap();
    checkout(dir.path());
    // The benchmark's stand-in holds on for a minute; the limit is 2 s.
    let out = check(
        dir.path(),
        &[("LIMIT", "2"), ("HOLD", "1")],
        &["benchmark", "generate"],
    );
    assert!(out.status.success(), "{out:?}");
    let out_dir = dir.path().join("out");
    assert!(read(out_dir.join("benchmark.txt")).contains("stopped by SIGTERM"));
    let summary = read(out_dir.join("summary.txt"));
    assert!(summary.contains("benchmark: exit 143"), "{summary}");
    assert!(
        summary.contains("generate: skipped (LIMIT=2 s had passed)"),
        "{summary}"
    );
    assert!(
        summary.contains("limit: the running parts stopped at 2 s"),
        "{summary}"
    );
    assert!(!out_dir.join("generate.txt").exists());
}

#[test]
fn an_unknown_part_or_limit_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    checkout(dir.path());
    let out = check(dir.path(), &[], &["benchmark", "gate+bechmark"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown part bechmark"));
    let out = check(dir.path(), &[("LIMIT", "9m")], &["benchmark"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("LIMIT=9m: expected a whole number"));
    // Neither ran the benchmark, nor made the output folder.
    assert!(!dir.path().join("out").exists());
    assert!(std::fs::read_dir(dir.path().join("marks"))
        .unwrap()
        .next()
        .is_none());
}
