//! `swax study`: the grid a study file describes, a study interrupted and run again giving the
//! report an uninterrupted one gives, and the report rendered from saved results alone.
mod common;

use std::path::Path;
use std::sync::atomic::AtomicBool;

use swax_hybrid::eval::report::write_eval;
use swax_hybrid::eval::results::{EvalResults, TaskCell};
use swax_hybrid::study::{self, report, StudyOptions, StudySpec};
use swax_hybrid::train;
use swax_tensor::Device;

static NEVER: AtomicBool = AtomicBool::new(false);

const MICRO: &str = r#"
[study]
description = "A micro study."
base = "swax-tiny"
set = ["model.pattern=\"SM\"", "model.n_layers=2", "model.d_model=32", "model.n_heads=2",
  "model.n_kv_heads=2",
  "model.d_ff=64", "model.chunk=16", "data.source=\"mqar\"", "data.seq_len=32",
  "data.batch_size=4", "data.mqar_pairs=4", "train.steps=12", "train.eval_every=6",
  "train.save_every=4", "train.recall_probes=8", "optim.warmup_steps=2"]
[grid]
w_short = 8
w_long = 32
p_short = [0.5]
anneal = [0.0, 0.25]
[eval]
tasks = ["mqar"]
lengths = [1, 2]
samples = 2
loss = false
"#;

fn spec() -> StudySpec {
    StudySpec::parse(MICRO, "micro", None).unwrap()
}

fn run_study(spec: &StudySpec, out: &Path) -> study::Outcome {
    study::run(
        spec,
        out,
        StudyOptions {
            device: Device::Cpu,
            progress: false,
            stop: &NEVER,
            say: &mut |_| {},
        },
    )
    .unwrap()
}

#[test]
fn the_grid_is_fixed_short_fixed_long_and_each_stochastic_schedule() {
    let runs = spec().runs().unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["SM-short8", "SM-long32", "SM-p0.5", "SM-p0.5-anneal0.25"]
    );
    let t: Vec<(f64, f64, usize, usize)> = runs
        .iter()
        .map(|r| {
            let t = &r.cfg.train;
            (t.p_short, t.anneal_fraction, t.w_short, t.w_long)
        })
        .collect();
    assert_eq!(
        t,
        [
            (1.0, 0.0, 8, 32),
            (0.0, 0.0, 8, 32),
            (0.5, 0.0, 8, 32),
            (0.5, 0.25, 8, 32)
        ]
    );
    assert!(runs
        .iter()
        .all(|r| r.cfg.data.source == "mqar" && r.cfg.model.d_model == 32));
    // Each is evaluated at the windows it trained at.
    let windows: Vec<Vec<usize>> = runs
        .iter()
        .map(|r| train::window_schedule(&r.cfg).trained_windows())
        .collect();
    assert_eq!(windows, [vec![8], vec![32], vec![8, 32], vec![8, 32]]);
}

#[test]
fn bad_studies_are_refused_naming_the_key() {
    for (from, to, key) in [
        ("w_short = 8", "w_short = 64", "grid.w_short"),
        ("p_short = [0.5]", "p_short = [1.5]", "grid.p_short"),
        ("lengths = [1, 2]", "lengths = []", "eval.lengths"),
        ("tasks = [\"mqar\"]", "tasks = [\"nope\"]", "nope"),
        ("\"train.steps=12\"", "\"train.stepz=12\"", "train.stepz"),
        (
            "samples = 2",
            "samples = 2\ndepths = [1.5]",
            "eval.depths holds 1.5",
        ),
        (
            "samples = 2",
            "samples = 2\ndepths = []",
            "eval.depths is empty",
        ),
        ("tasks = [\"mqar\"]", "tasks = []", "eval.tasks is empty"),
        (
            "lengths = [1, 2]",
            "lengths = [1000000000000000000]",
            "more tokens than a length can count",
        ),
    ] {
        let err = StudySpec::parse(&MICRO.replace(from, to), "micro", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}

#[test]
fn an_interrupted_study_run_again_gives_the_same_report() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let spec = spec();
    let whole = run_study(&spec, a.path());
    assert!(whole.finished);
    // Interrupted: the third run stopped part-way with a checkpoint, the fourth never started.
    let runs = spec.runs().unwrap();
    let partial = &runs[2];
    let opts = train::Options {
        stop_at: Some(5),
        ..common::options(&b.path().join("runs").join(&partial.name), Device::Cpu)
    };
    train::train(&partial.cfg, &opts).unwrap();
    let again = run_study(&spec, b.path());
    assert!(again.finished);
    let read = |dir: &Path| std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert_eq!(read(a.path()), read(b.path()));
    assert!(read(a.path()).contains("| SM-p0.5-anneal0.25 | 32 |"));
    // Run once more: nothing is trained or evaluated again, the report is the same.
    let metrics = std::fs::read_to_string(a.path().join("runs/SM-p0.5/metrics.jsonl")).unwrap();
    run_study(&spec, a.path());
    assert_eq!(
        std::fs::read_to_string(a.path().join("runs/SM-p0.5/metrics.jsonl")).unwrap(),
        metrics
    );
    assert_eq!(read(a.path()), read(b.path()));
}

#[test]
fn a_folder_holding_another_study_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    run_study(&spec(), dir.path());
    let other = StudySpec::parse(&MICRO.replace("samples = 2", "samples = 3"), "other", None);
    let err = study::run(
        &other.unwrap(),
        dir.path(),
        StudyOptions {
            device: Device::Cpu,
            progress: false,
            stop: &NEVER,
            say: &mut |_| {},
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("holds another study"), "{err}");
}

/// Hand-made results: at the training length everything within the window; at twice it, `far`
/// of 10 answers beyond the window right.
fn results(run: &str, window: usize, near: usize, far: usize) -> EvalResults {
    let cell = |length, answers, correct, near_answers, near_correct| TaskCell {
        task: "mqar".into(),
        length,
        depth: None,
        samples: 2,
        answers,
        correct,
        near_answers,
        near_correct,
        generated: None,
    };
    EvalResults {
        run: format!("/elsewhere/runs/{run}"),
        checkpoint: String::new(),
        step: 12,
        model: "m".into(),
        pattern: "SM".into(),
        train_len: 32,
        trained_on: "mqar".into(),
        window,
        tokenizer: "bytes".into(),
        tasks: vec![
            cell(32, 10, near, 10, near),
            cell(64, 20, near + far, 10, near),
        ],
        loss: None,
        other_data: None,
    }
}

#[test]
fn the_report_renders_from_saved_results_without_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec();
    std::fs::write(
        dir.path().join("study.toml"),
        toml::to_string(&spec).unwrap(),
    )
    .unwrap();
    for (run, windows) in [
        ("SM-short8", vec![8]),
        ("SM-long32", vec![32]),
        ("SM-p0.5", vec![8, 32]),
        ("SM-p0.5-anneal0.25", vec![8, 32]),
    ] {
        for w in windows {
            let far = if w == 8 { 7 } else { 1 };
            let eval = dir.path().join(format!("runs/{run}/eval/w{w}"));
            write_eval(&eval, &results(run, w, 9, far)).unwrap();
        }
    }
    let files = report::from_saved(dir.path()).unwrap();
    let md = std::fs::read_to_string(&files[0]).unwrap();
    // Within: 18 of 20 right; beyond: 7 of 10 at window 8, 1 of 10 at window 32.
    assert!(
        md.contains("| SM-short8 | 8 | 90.0% | 90.0 | 70.0 |"),
        "{md}"
    );
    assert!(
        md.contains("| SM-long32 | 32 | 90.0% | 90.0 | 10.0 |"),
        "{md}"
    );
    assert!(md.contains("| SM-p0.5 | 8 | 90.0% | 90.0 | 70.0 |"), "{md}");
    assert!(
        md.contains("| SM-short8 | 8 | - (90.0) | 70.0 (90.0) |"),
        "{md}"
    );
    for f in ["retrieval-mqar.svg", "tradeoff.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(svg.contains("SM-p0.5-anneal0.25 w=32"), "{f}");
    }
}

/// Everything about a study that can be known before a run trains is checked first: an
/// evaluation that cannot fit in memory leaves the study folder untouched.
#[test]
fn an_evaluation_too_large_for_memory_is_refused_before_any_run_trains() {
    let dir = tempfile::tempdir().unwrap();
    let huge = MICRO.replace("lengths = [1, 2]", "lengths = [1, 100000000000]");
    let spec = StudySpec::parse(&huge, "huge", None).unwrap();
    let err = study::run(
        &spec,
        dir.path(),
        StudyOptions {
            device: Device::Cpu,
            progress: false,
            stop: &NEVER,
            say: &mut |_| {},
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("the evaluation needs at least") && err.contains("eval.lengths"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A study file's own error, a name that is no study, an --out that is a file, and a report
/// asked for where no study ran: each says what it is.
#[test]
fn each_study_error_says_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mine.toml");
    std::fs::write(&file, MICRO.replace("w_short = 8", "w_short = 64")).unwrap();
    let err = study::resolve(file.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("grid.w_short") && !err.contains("not a file"),
        "{err}"
    );
    let missing = dir.path().join("missing.toml");
    let err = study::resolve(missing.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing.toml") && err.contains("nor a shipped study: window-h200"),
        "{err}"
    );

    let opts = StudyOptions {
        device: Device::Cpu,
        progress: false,
        stop: &NEVER,
        say: &mut |_| {},
    };
    let err = study::run(&spec(), &file, opts).unwrap_err().to_string();
    assert!(err.contains("mine.toml: a file"), "{err}");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = report::from_saved(&empty).unwrap_err().to_string();
    assert!(err.contains("no study has run here"), "{err}");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}
