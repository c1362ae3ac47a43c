//! The kernel timeline records what it says: one span per launch and per cuBLAS call queued
//! while it records, in order, named by kernel and grid or by the GEMM's shape, each with a
//! device time; nothing outside it; one timeline at a time. Its own test binary: the timeline is
//! process-wide.

mod common;

use common::Rng;
use swax_cuda::kernels::optim::global_norm;
use swax_cuda::timeline::{by_label, Span, Timeline};
use swax_cuda::DType;

#[test]
fn spans_of_one_label_add_up_largest_first() {
    let span = |label: &str, ms: f64| Span {
        label: label.into(),
        ms,
    };
    let spans = [
        span("a", 1.0),
        span("b", 0.5),
        span("a", 2.0),
        span("c", 4.0),
    ];
    assert_eq!(
        by_label(&spans),
        vec![
            ("c".into(), 1, 4.0),
            ("a".into(), 2, 3.0),
            ("b".into(), 1, 0.5)
        ]
    );
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn a_timeline_spans_each_launch_and_gemm_it_saw() {
    let dev = gpu!();
    let mut rng = Rng::new(5);
    let g = dev.htod(&rng.vec(5000, -1.0, 1.0)).unwrap();
    let mut norm = dev.alloc(DType::F32, 1).unwrap();
    // Compiled and loaded before, and queued before the timeline: not in it.
    global_norm(&dev, &[&g], &mut norm).unwrap();

    let timeline = Timeline::start(&dev).unwrap();
    assert!(
        Timeline::start(&dev).is_err(),
        "a second timeline while one records"
    );
    global_norm(&dev, &[&g, &g], &mut norm).unwrap();
    common::ones_gemm(&dev);
    let spans = timeline.finish().unwrap();

    let labels: Vec<&str> = spans.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        spans.len(),
        3,
        "two launches of the norm and one GEMM: {labels:?}"
    );
    assert!(
        labels[0].contains("grid") && labels[1].contains("grid"),
        "{labels:?}"
    );
    assert_eq!(labels[2], "gemm 4x2x8 batch 1");
    assert!(
        spans.iter().all(|s| s.ms >= 0.0 && s.ms.is_finite()),
        "{spans:?}"
    );

    // Finished: the next timeline starts empty, and work after `finish` is in no timeline.
    global_norm(&dev, &[&g], &mut norm).unwrap();
    let timeline = Timeline::start(&dev).unwrap();
    assert!(timeline.finish().unwrap().is_empty());
}
