//! `loss.svg` as the trainer draws it from `metrics.jsonl`: labelled axes with round ticks, a
//! legend naming every curve, the validation loss per window and the recall within and beyond
//! each window; and written whole, replacing the file rather than rewriting it in place.
use std::path::Path;

use serde_json::json;
use swax_hybrid::train::metrics::plot;

/// The records of a short run at windows 16 and 64, as the trainer logs them.
fn write_metrics(path: &Path) {
    let mut lines = Vec::new();
    for step in 1..=300u64 {
        let loss = 1.2 + 4.3 * (-(step as f64) / 60.0).exp();
        lines.push(json!({"step": step, "loss": loss, "lr": 1e-3, "window": 16}));
        if step % 100 == 0 {
            let s = step as f64 / 300.0;
            for w in [16, 64] {
                lines.push(json!({"step": step, "val_loss": 1.3 + 0.1 * s, "window": w}));
                lines.push(json!({
                    "step": step, "tokens": step * 4096, "window": w, "recall": 0.5 * s,
                    "recall_near": 0.9 * s, "recall_far": 0.4 * s,
                    "recall_near_n": 120, "recall_far_n": 80,
                }));
            }
        }
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// The text of every `<text>` element.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

#[test]
fn the_loss_plot_labels_its_axes_and_curves_and_shows_recall() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    write_metrics(&metrics);
    let out = dir.path().join("loss.svg");
    plot(&metrics, &out, "swax-tiny — runs/x").unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let texts = texts(&svg);
    for want in [
        "swax-tiny — runs/x",
        "step",
        "loss (nats per token)",
        "exact recall (%)",
        "training loss",
        "training loss, smoothed",
        "validation loss, window 16",
        "validation loss, window 64",
        "recall within window 16",
        "recall beyond window 16",
        "recall within window 64",
        "recall beyond window 64",
    ] {
        assert!(
            texts.iter().any(|t| t == want),
            "no {want:?} among {texts:?}"
        );
    }
    // Round ticks on both axes: whole steps on x, at most two decimals on the loss.
    let ticks: Vec<&String> = texts.iter().filter(|t| t.parse::<f64>().is_ok()).collect();
    for step in ["100", "200", "300"] {
        assert!(
            ticks.iter().any(|t| *t == step),
            "no x tick {step}: {ticks:?}"
        );
    }
    assert!(
        ticks
            .iter()
            .all(|t| t.split('.').nth(1).is_none_or(|d| d.len() <= 2)),
        "a tick is not round: {ticks:?}"
    );
    assert!(ticks.iter().any(|t| *t == "100"), "recall axis to 100%");
    // One curve per series: the training loss twice, two validation lines, two recall lines
    // within the windows (the dashed ones beyond them are many short paths).
    assert!(svg.matches("<polyline").count() >= 6, "{svg}");
}

#[test]
fn the_loss_plot_replaces_the_file_instead_of_rewriting_it() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    write_metrics(&metrics);
    let out = dir.path().join("loss.svg");
    std::fs::write(&out, "before").unwrap();
    // A second name for the old file: a write in place would change what it reads.
    let old = dir.path().join("old.svg");
    std::fs::hard_link(&out, &old).unwrap();
    plot(&metrics, &out, "run").unwrap();
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "before");
    assert!(std::fs::read_to_string(&out).unwrap().starts_with("<svg"));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "a temporary file was left: {names:?}");
}

#[test]
fn a_run_without_recall_probes_plots_the_loss_alone() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let text: String = (1..=20)
        .map(|s| {
            format!(
                "{}\n",
                json!({"step": s, "loss": 3.0 - 0.1 * s as f64, "window": 8})
            )
        })
        .collect();
    std::fs::write(&metrics, text).unwrap();
    let out = dir.path().join("loss.svg");
    plot(&metrics, &out, "run").unwrap();
    let texts = texts(&std::fs::read_to_string(&out).unwrap());
    assert!(texts.iter().any(|t| t == "loss (nats per token)"));
    assert!(!texts.iter().any(|t| t.contains("recall")), "{texts:?}");
}
