//! bench-train end to end on the CPU at swax-tiny's size: one JSON line per window with the
//! fields the results file promises, the peer's figures taken from its line of the same case,
//! and a clear failure where the trainer refuses a batch. Figures are checked for being there
//! and sane, never against a speed.
use std::process::Command;

use serde_json::Value;

fn bench_train(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bench-train"))
        .args(["--config", "swax-tiny", "--device", "cpu", "--warmup", "1"])
        .args(args)
        .output()
        .expect("bench-train runs")
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

#[test]
fn each_window_is_one_line_with_the_peer_of_its_case() {
    let dir = tempfile::tempdir().unwrap();
    let (peer, results) = (dir.path().join("peer.jsonl"), dir.path().join("out.jsonl"));
    std::fs::write(
        &peer,
        "{\"case\": \"swax-tiny-w16-b2\", \"peer\": \"p\", \"tokens_per_s\": 7.5, \"peak_gib\": 1.5}\n",
    )
    .unwrap();
    let out = bench_train(&[
        "--batch",
        "2",
        "--steps",
        "2",
        "--windows",
        "16,64",
        "--peer",
        peer.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let got = lines(&results);
    assert_eq!(got.len(), 2);
    for (line, w) in got.iter().zip([16, 64]) {
        assert_eq!(line["case"], format!("swax-tiny-w{w}-b2"));
        assert_eq!(line["window"], w);
        assert_eq!(line["batch"], 2);
        assert_eq!(line["step_tokens_per_s"].as_array().unwrap().len(), 2);
        let tps = line["tokens_per_s"].as_f64().unwrap();
        assert!(tps > 0.0 && tps.is_finite());
        let params = line["params"].as_f64().unwrap();
        let mfu = line["mfu"].as_f64().unwrap();
        assert!((mfu - 6.0 * params * tps / 989e12).abs() <= 1e-12 * mfu.max(1.0));
        for key in ["date", "commit"] {
            assert!(line[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
        }
        assert_eq!(line["device"], "cpu");
        // On the CPU there is no pool, and nvidia-smi is not asked: said, not invented.
        assert!(line["peak_gib"].is_null());
        assert_eq!(line["nvidia_smi"], "on the CPU");
    }
    assert_eq!(got[0]["peer"], "p");
    assert_eq!(got[0]["peer_tokens_per_s"], 7.5);
    assert!(got[1]["peer"].is_null() && got[1]["peer_tokens_per_s"].is_null());
}

#[test]
fn fit_stops_at_the_first_batch_that_does_not_train() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("out.jsonl");
    // The second batch's activations alone exceed any machine's memory: the trainer's memory
    // check refuses it before anything is allocated.
    let out = bench_train(&[
        "--batch",
        "1000000000,2",
        "--fit",
        "--steps",
        "1",
        "--windows",
        "64",
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .contains("batch 1000000000 at T 128, window 64 did not train: the run needs at least"),
        "{stdout}"
    );
    assert!(stdout.contains("largest batch that trained: 2"), "{stdout}");
    let got = lines(&results);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["batch"], 2);
}

#[test]
fn without_fit_a_batch_that_does_not_train_is_an_error_and_keeps_the_lines_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("out.jsonl");
    let out = bench_train(&[
        "--batch",
        "2,1000000000",
        "--steps",
        "1",
        "--windows",
        "64",
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("swax-tiny-w64-b1000000000: the run needs at least"),
        "{stderr}"
    );
    // The case measured before the failure was written when it finished.
    let got = lines(&results);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["batch"], 2);
}
