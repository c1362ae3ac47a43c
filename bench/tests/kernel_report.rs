//! The kernel benchmarks' JSON lines without a GPU: a case set beside the fastest of its peers
//! read from a peers file as bench/peers/kernel_peers.py writes it (other shapes, refusals, lines
//! that are not JSON and superseded lines among them), the fields every line promises, the ratio,
//! and a case no peer has a figure for; the named shapes, and that each mixer's CUDA kernel takes
//! them.
use std::path::Path;

use serde_json::{json, Value};
use swax_bench::kernel_report::{Measured, Report};
use swax_bench::shape::{Shape, PAPER, SWAX_SMALL};

const FIELDS: [&str; 9] = [
    "case", "shape", "swax_ms", "peer", "peer_ms", "ratio", "date", "commit", "device",
];

fn peer_line(case: &str, shape: &str, peer: &str, ms: Option<f64>) -> String {
    let mut line = json!({
        "bench": "attention-peer", "case": case, "shape": shape, "peer": peer, "peer_ms": ms,
        "fwd_ms": ms.map(|m| m / 4.0), "torch": "2.11.0", "date": "2026-12-02", "commit": "abc",
    });
    if ms.is_none() {
        line["refused"] = json!("AssertionError: head dim 32 is below the block size");
    }
    line.to_string()
}

fn write_peers(path: &Path) {
    let small = SWAX_SMALL.label(64, 64);
    let mlstm = SWAX_SMALL.label(32, 64);
    let paper = PAPER.label(128, 128);
    let xl = "mlstm_kernels chunkwise--triton_xl_chunk";
    let lines = [
        peer_line("swa-w128", &small, "FlexAttention", Some(2.0)),
        peer_line("swa-w128", &small, "fla parallel_attn", Some(3.0)),
        peer_line("swa-w512", &small, "FlexAttention", Some(0.25)),
        peer_line("swa-w128", &small, "SDPA cuDNN", None),
        "not a JSON line".to_string(),
        // A later run of the same peer supersedes the first.
        peer_line("swa-w128", &small, "FlexAttention", Some(1.5)),
        peer_line("mlstm", &mlstm, xl, None),
        // Another shape's line, last: it supersedes nothing of this shape.
        peer_line("swa-w128", &paper, "FlexAttention", Some(0.5)),
    ];
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn has_fields(line: &Value) {
    for key in FIELDS {
        assert!(line.get(key).is_some(), "{key} missing from {line}");
    }
    let date = line["date"].as_str().unwrap();
    assert!(date.len() == 10 && date.as_bytes()[4] == b'-', "{date}");
    assert!(line["commit"].as_str().is_some_and(|c| !c.is_empty()));
    // The first GPU, by name where there is one ("cuda:0 (NVIDIA H200)"), else its ordinal.
    assert!(line["device"]
        .as_str()
        .is_some_and(|d| d.starts_with("cuda:0")));
}

#[test]
fn a_case_is_set_beside_its_fastest_peer_of_the_same_shape() {
    let dir = tempfile::tempdir().unwrap();
    let (peers, results) = (dir.path().join("peers.jsonl"), dir.path().join("out.jsonl"));
    write_peers(&peers);
    let mut report = Report::new("attention-gpu", Some(&peers)).unwrap();
    let m = Measured::new("swa-w128".into(), SWAX_SMALL.label(64, 64), 0.5, None, 1.25)
        .with("window", 128);
    let line = report.add(m).clone();
    has_fields(&line);
    assert_eq!(line["bench"], "attention-gpu");
    assert_eq!(line["case"], "swa-w128");
    assert_eq!(line["shape"], "B16 T4096 H12 D64");
    assert_eq!(line["swax_ms"], 1.25);
    assert_eq!(line["fwd_ms"], 0.5);
    assert!(line["bwd_ms"].is_null());
    assert_eq!(line["window"], 128);
    assert_eq!(line["peer"], "FlexAttention");
    assert_eq!(line["peer_ms"], 1.5);
    assert_eq!(line["ratio"], 1.5 / 1.25);
    let all = line["peers"].as_array().unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[1], json!({"peer": "fla parallel_attn", "peer_ms": 3.0}));
    assert_eq!(all[2]["peer"], "SDPA cuDNN");
    assert!(all[2]["peer_ms"].is_null());
    assert!(all[2]["refused"]
        .as_str()
        .unwrap()
        .starts_with("AssertionError"));

    // Every peer refused: the line says so and has no peer, figure or ratio.
    let m = Measured::new(
        "mlstm".into(),
        SWAX_SMALL.label(32, 64),
        1.0,
        Some(2.0),
        3.0,
    );
    let line = report.add(m).clone();
    has_fields(&line);
    assert_eq!(line["shape"], "B16 T4096 H12 Dk32 Dv64");
    assert_eq!(line["bwd_ms"], 2.0);
    for key in ["peer", "peer_ms", "ratio"] {
        assert!(line[key].is_null(), "{key}: {line}");
    }
    assert_eq!(line["peers"][0]["peer_ms"], Value::Null);
    assert!(line["peers"][0]["refused"].is_string());

    report.write(&results).unwrap();
    let text = std::fs::read_to_string(&results).unwrap();
    let written: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(written.len(), 2);
    assert_eq!(written[0]["ratio"], 1.2);
    assert_eq!(written[1]["case"], "mlstm");
}

#[test]
fn without_a_peers_file_a_line_has_no_peer() {
    let mut report = Report::new("recurrent-gpu", None).unwrap();
    let line = report
        .add(Measured::new(
            "gated-delta".into(),
            PAPER.label(128, 128),
            2.0,
            Some(5.0),
            7.0,
        ))
        .clone();
    has_fields(&line);
    assert!(line["peer"].is_null() && line["ratio"].is_null());
    assert_eq!(line["peers"], json!([]));
}

#[test]
fn a_missing_peers_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.jsonl");
    let err = Report::new("attention-gpu", Some(&missing)).err().unwrap();
    assert!(err.contains("none.jsonl"), "{err}");
}

#[test]
fn shapes_are_named_and_labelled() {
    assert_eq!(Shape::by_name("paper"), Ok(PAPER));
    assert_eq!(Shape::by_name("swax-small"), Ok(SWAX_SMALL));
    assert!(Shape::by_name("huge")
        .unwrap_err()
        .contains("paper, swax-small"));
    assert_eq!(PAPER.label(128, 128), "B8 T8192 H16 D128");
    assert_eq!(SWAX_SMALL.label(32, 64), "B16 T4096 H12 Dk32 Dv64");
}

#[test]
fn swax_small_is_the_shape_of_its_config() {
    let cfg = swax_hybrid::config::Config::resolve(Some("swax-small"), &[]).unwrap();
    let s = SWAX_SMALL;
    assert_eq!((s.b, s.t), (cfg.data.batch_size, cfg.data.seq_len));
    assert_eq!((s.h, s.h * s.d), (cfg.model.n_heads, cfg.model.d_model));
    // The mLSTM layer's q and k are half its head (nn/src/layers/mlstm.rs).
    assert_eq!(s.mlstm_dk, s.d / 2);
}

#[test]
fn every_named_shape_has_a_cuda_kernel_for_each_mixer() {
    use swax_nn::mixers::{attention, gated_delta, mlstm, rattention};
    use swax_tensor::{DType, Device};
    // What the benchmarks ask before timing a shape; none of it needs a GPU.
    let (gpu, bf16) = (Device::Cuda(0), DType::BF16);
    for s in swax_bench::shape::SHAPES {
        assert!(attention::has_kernel(gpu, bf16, s.d), "{s:?}");
        assert!(rattention::has_kernel(gpu, bf16, s.d), "{s:?}");
        assert!(mlstm::has_kernel(gpu, bf16, s.mlstm_dk, s.d), "{s:?}");
        assert!(gated_delta::has_kernel(gpu, bf16, s.d, s.d), "{s:?}");
    }
}
