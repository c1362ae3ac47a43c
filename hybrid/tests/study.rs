//! `swax study`: the grid a study file describes (each schedule at several seeds), a study
//! interrupted and run again giving the report an uninterrupted one gives, the report rendered
//! from saved results alone (medians over the seeds, their ranges and intervals, the runs that
//! did not learn), and several studies side by side.
mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;

use swax_hybrid::eval::report::write_eval;
use swax_hybrid::eval::results::{EvalResults, TaskCell};
use swax_hybrid::study::stats::{bootstrap_median, median, Summary};
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
seeds = 2
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

/// `swax study FILE --quiet --device cpu --out OUT` with `extra` arguments.
fn swax_study(file: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_swax"))
        .arg("study")
        .arg(file)
        .args(["--quiet", "--device", "cpu"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

const SCHEDULES: [&str; 4] = ["SM-short8", "SM-long32", "SM-p0.5", "SM-p0.5-anneal0.25"];

#[test]
fn the_grid_is_fixed_short_fixed_long_and_each_stochastic_schedule_at_each_seed() {
    let runs = spec().runs().unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "SM-short8-seed0",
            "SM-short8-seed1",
            "SM-long32-seed0",
            "SM-long32-seed1",
            "SM-p0.5-seed0",
            "SM-p0.5-seed1",
            "SM-p0.5-anneal0.25-seed0",
            "SM-p0.5-anneal0.25-seed1"
        ]
    );
    // Each run trains at its own seed, named in its folder.
    for r in &runs {
        assert_eq!(r.cfg.train.seed, r.seed);
        assert_eq!(r.name, format!("{}-seed{}", r.schedule, r.seed));
    }
    let t: Vec<(f64, f64, usize, usize)> = runs
        .iter()
        .step_by(2)
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
        .step_by(2)
        .map(|r| train::window_schedule(&r.cfg).trained_windows())
        .collect();
    assert_eq!(windows, [vec![8], vec![32], vec![8, 32], vec![8, 32]]);
}

/// Three seeds when the file says nothing, the file's `grid.seeds` else, and `--seeds` over
/// both; the seeds start at the base's `train.seed`.
#[test]
fn seeds_default_to_three_and_the_file_or_the_command_line_sets_them() {
    let seeds_of = |spec: &StudySpec| -> Vec<(String, u64)> {
        let runs = spec.runs().unwrap();
        runs.iter()
            .filter(|r| r.schedule == "SM-long32")
            .map(|r| (r.name.clone(), r.seed))
            .collect()
    };
    let default = StudySpec::parse(&MICRO.replace("seeds = 2\n", ""), "micro", None).unwrap();
    assert_eq!(default.grid.seeds, 3);
    assert_eq!(
        seeds_of(&default),
        [
            ("SM-long32-seed0".to_string(), 0),
            ("SM-long32-seed1".to_string(), 1),
            ("SM-long32-seed2".to_string(), 2)
        ]
    );
    assert_eq!(seeds_of(&spec()).len(), 2);
    let five = spec().with_seeds(5).unwrap();
    assert_eq!(seeds_of(&five).len(), 5);
    assert_eq!(five.runs().unwrap().len(), 4 * 5);
    let shifted = MICRO.replace(
        "\"optim.warmup_steps=2\"",
        "\"optim.warmup_steps=2\", \"train.seed=7\"",
    );
    let seeds: Vec<u64> = seeds_of(&StudySpec::parse(&shifted, "micro", None).unwrap())
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(seeds, [7, 8]);
}

/// Zero seeds is no study: refused in the file and on the command line, before anything runs.
#[test]
fn zero_seeds_are_refused_with_a_clear_message() {
    let err = StudySpec::parse(&MICRO.replace("seeds = 2", "seeds = 0"), "micro", None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("grid.seeds = 0") && err.contains("one seed or more"),
        "{err}"
    );
    let err = spec().with_seeds(0).unwrap_err().to_string();
    assert!(
        err.contains("--seeds 0") && err.contains("one seed or more"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("micro.toml");
    std::fs::write(&file, MICRO).unwrap();
    let out = dir.path().join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_swax"))
        .args([
            "study",
            file.to_str().unwrap(),
            "--seeds",
            "0",
            "--device",
            "cpu",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("--seeds 0"), "{stderr}");
    assert!(!out.exists());
}

/// `swax study --seeds N` trains N seeds per schedule, each into its own folder, and keeps N in
/// the study's file; run again with more, it trains only the new seeds.
#[test]
fn the_command_line_seeds_override_the_file_and_more_seeds_add_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("micro.toml");
    std::fs::write(&file, MICRO).unwrap();
    let out = dir.path().join("out");
    let study = |seeds: &str| {
        let run = swax_study(&file, &out, &["--seeds", seeds]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    };
    let folders = || {
        let mut names: Vec<String> = std::fs::read_dir(out.join("runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    study("1");
    let mut expected: Vec<String> = SCHEDULES.iter().map(|s| format!("{s}-seed0")).collect();
    expected.sort();
    assert_eq!(folders(), expected);
    let kept = StudySpec::load(&out.join("study.toml")).unwrap();
    assert_eq!(kept.grid.seeds, 1);
    let metrics = std::fs::read_to_string(out.join("runs/SM-long32-seed0/metrics.jsonl")).unwrap();

    study("2");
    assert_eq!(folders().len(), 8);
    assert!(folders().contains(&"SM-long32-seed1".to_string()));
    assert_eq!(
        StudySpec::load(&out.join("study.toml")).unwrap().grid.seeds,
        2
    );
    // Seed 0 was not trained again.
    assert_eq!(
        std::fs::read_to_string(out.join("runs/SM-long32-seed0/metrics.jsonl")).unwrap(),
        metrics
    );
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
    // Interrupted: the sixth run (a second seed) stopped part-way with a checkpoint, the rest
    // never started.
    let runs = spec.runs().unwrap();
    let partial = &runs[5];
    let opts = train::Options {
        stop_at: Some(5),
        ..common::options(&b.path().join("runs").join(&partial.name), Device::Cpu)
    };
    train::train(&partial.cfg, &opts).unwrap();
    let again = run_study(&spec, b.path());
    assert!(again.finished);
    let read = |dir: &Path| std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert_eq!(read(a.path()), read(b.path()));
    assert!(read(a.path()).contains("| SM-p0.5-anneal0.25 | 32 | "));
    let json = |dir: &Path| std::fs::read_to_string(dir.join("report.json")).unwrap();
    assert_eq!(json(a.path()), json(b.path()));
    // Run once more: nothing is trained or evaluated again, the report is the same.
    let metrics =
        std::fs::read_to_string(a.path().join("runs/SM-p0.5-seed1/metrics.jsonl")).unwrap();
    run_study(&spec, a.path());
    assert_eq!(
        std::fs::read_to_string(a.path().join("runs/SM-p0.5-seed1/metrics.jsonl")).unwrap(),
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

/// The median, the range and the bootstrap interval on known values: with 1..7 the resampled
/// median falls at 1 (or 7) about 1% of the time and at 2 or less (6 or more) about 11%, so the
/// 90% interval is 2 to 6; with three values it is their range (the smallest is the resampled
/// median about 26% of the time).
#[test]
fn the_figures_over_seeds_are_medians_with_ranges_and_intervals() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[]), None);
    let seven = [4.0, 7.0, 1.0, 6.0, 2.0, 5.0, 3.0];
    assert_eq!(bootstrap_median(&seven, 0.9, 2000, 43), Some((2.0, 6.0)));
    // Shifting and scaling the values moves the interval with them.
    let scaled: Vec<f64> = seven.iter().map(|v| 10.0 * v + 5.0).collect();
    assert_eq!(bootstrap_median(&scaled, 0.9, 2000, 43), Some((25.0, 65.0)));
    assert_eq!(
        bootstrap_median(&[1.0, 2.0, 3.0], 0.9, 2000, 43),
        Some((1.0, 3.0))
    );
    assert_eq!(bootstrap_median(&[5.0; 4], 0.9, 2000, 43), Some((5.0, 5.0)));
    // Two values get no interval: it would say no more than their range.
    assert_eq!(bootstrap_median(&[1.0, 2.0], 0.9, 2000, 43), None);
    let s = Summary::of(&[70.0, 50.0, 10.0]).unwrap();
    assert_eq!((s.median, s.min, s.max), (50.0, 10.0, 70.0));
    assert_eq!(s.interval, Some((10.0, 70.0)));
    assert_eq!(s.values, [70.0, 50.0, 10.0]);
    assert_eq!(Summary::of(&seven).unwrap().interval, Some((2.0, 6.0)));
    // The same values, the same interval: the report does not change when written again. Here
    // the resampled median is the lowest value 5.1% of the time, so the interval's low end
    // is 0 or 1 depending on the draws: only a fixed seed gives the same interval each time.
    let edge = [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let interval = Summary::of(&edge).unwrap().interval;
    assert_eq!(interval, bootstrap_median(&edge, 0.9, 2000, 43));
    for _ in 0..10 {
        assert_eq!(Summary::of(&edge).unwrap().interval, interval);
    }
    assert!(Summary::of(&[]).is_none());
}

/// Writes hand-made results for every run of `spec` into `dir` as a study leaves them: seed
/// `s` of each schedule gets (near, far) = `seeds[s]`, at window 8 that many beyond the window
/// right, at window 32 one.
fn saved_study(dir: &Path, spec: &StudySpec, seeds: &[(usize, usize)]) {
    std::fs::write(dir.join("study.toml"), toml::to_string(spec).unwrap()).unwrap();
    for r in spec.runs().unwrap() {
        let (near, far) = seeds[r.seed as usize];
        for w in train::window_schedule(&r.cfg).trained_windows() {
            let far = if w == 8 { far } else { 1 };
            let eval = dir.join(format!("runs/{}/eval/w{w}", r.name));
            write_eval(&eval, &results(&r.name, w, near, far)).unwrap();
        }
    }
}

#[test]
fn the_report_gives_medians_over_seeds_and_names_the_runs_that_did_not_learn() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec().with_seeds(3).unwrap();
    // Seed 2 did not learn: 2 of 10 right within the window (20%, under 50%).
    saved_study(dir.path(), &spec, &[(9, 7), (9, 5), (2, 1)]);
    let files = report::from_saved(dir.path()).unwrap();
    let md = std::fs::read_to_string(&files[0]).unwrap();
    // Within: 18, 18 and 4 of 20 right; beyond at window 8: 7, 5 and 1 of 10; at window 32: 1.
    // Every seed counts in the median, the one that did not learn too.
    assert!(
        md.contains(
            "| SM-short8 | 8 | 2 of 3 | 90.0 (20.0–90.0) [20.0–90.0] | 90.0 (20.0–90.0) \
             [20.0–90.0] | 50.0 (10.0–70.0) [10.0–70.0] |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| SM-long32 | 32 | 2 of 3 | 90.0 (20.0–90.0) [20.0–90.0] | 90.0 (20.0–90.0) [20.0–90.0] | 10.0 (10.0–10.0) [10.0–10.0] |"),
        "{md}"
    );
    // By length: at 64 tokens, beyond the window.
    assert!(
        md.contains("| SM-short8 | 8 | - | 50.0 (10.0–70.0) [10.0–70.0] |"),
        "{md}"
    );
    // The runs that did not learn, by name, and how many did.
    assert!(
        md.contains("| SM-short8-seed2 | SM | 1 | 0 | 2 | - | 20.0 | no |"),
        "{md}"
    );
    assert!(
        md.contains("| SM-short8-seed0 | SM | 1 | 0 | 0 | - | 90.0 | yes |"),
        "{md}"
    );
    assert!(
        md.contains(
            "8 of 12 runs learned. Did not learn: SM-short8-seed2, SM-long32-seed2, \
             SM-p0.5-seed2, SM-p0.5-anneal0.25-seed2."
        ),
        "{md}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let row = &json["rows"][0];
    assert_eq!(row["schedule"], "SM-short8");
    assert_eq!(row["learned"], 2);
    assert_eq!(row["beyond"]["median"], 50.0);
    assert_eq!(row["beyond"]["interval"], serde_json::json!([10.0, 70.0]));
    assert_eq!(
        row["beyond"]["values"],
        serde_json::json!([70.0, 50.0, 10.0])
    );
    assert_eq!(json["not_learned"].as_array().unwrap().len(), 4);
    // The plots: a line per schedule and window, the range as error bars.
    for f in ["retrieval-mqar.svg", "tradeoff.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(svg.contains("SM-p0.5-anneal0.25 w=32"), "{f}");
        assert!(svg.contains("<path d=\"M"), "{f}: no error bars");
    }
}

/// The runs table carries the training's own held-out probes at each window it trained at, from
/// the last step that evaluated them; a window with no probe beyond it shows "-".
#[test]
fn the_runs_table_gives_the_training_probes_at_each_window() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec().with_seeds(1).unwrap();
    saved_study(dir.path(), &spec, &[(9, 7)]);
    let probe = |step: u64, window: usize, near: f64, far: f64, far_n: u64| {
        serde_json::json!({"recall": near, "recall_near": near, "recall_near_n": 40,
            "recall_far": far, "recall_far_n": far_n, "step": step, "window": window})
        .to_string()
    };
    let lines = [
        r#"{"loss":1.0,"step":5}"#.to_string(),
        probe(6, 8, 0.1, 0.05, 20),
        probe(6, 32, 0.2, 0.0, 0),
        probe(12, 8, 0.75, 0.25, 20),
        probe(12, 32, 0.5, 0.0, 0),
    ];
    std::fs::write(
        dir.path().join("runs/SM-p0.5-seed0/metrics.jsonl"),
        lines.join("\n"),
    )
    .unwrap();
    let md = std::fs::read_to_string(&report::from_saved(dir.path()).unwrap()[0]).unwrap();
    assert!(
        md.contains("| SM-p0.5-seed0 | SM | 0.5 | 0 | 0 | 1.0000 | 90.0 | yes | w=8: 75.0 / 25.0; w=32: 50.0 / - |"),
        "{md}"
    );
    // A run without metrics has none to show.
    assert!(
        md.contains("| SM-short8-seed0 | SM | 1 | 0 | 0 | - | 90.0 | yes | - |"),
        "{md}"
    );
}

/// Every run learned: the report says so; with one seed there is no range nor interval.
#[test]
fn a_report_of_one_seed_has_no_spread_and_says_when_every_run_learned() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec().with_seeds(1).unwrap();
    saved_study(dir.path(), &spec, &[(9, 7)]);
    let md = std::fs::read_to_string(&report::from_saved(dir.path()).unwrap()[0]).unwrap();
    assert!(
        md.contains("| SM-short8 | 8 | 1 of 1 | 90.0 | 90.0 | 70.0 |"),
        "{md}"
    );
    assert!(md.contains("Every run learned (4 of 4)."), "{md}");
}

/// A run with no answer within any window it trained at (a short window, a far needle) is
/// neither learned nor not: the report says its learning is unknown, and counts it apart.
#[test]
fn a_run_with_nothing_within_its_window_is_of_unknown_learning() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec().with_seeds(1).unwrap();
    saved_study(dir.path(), &spec, &[(9, 7)]);
    let mut far = results("SM-short8-seed0", 8, 0, 7);
    for c in &mut far.tasks {
        (c.near_answers, c.near_correct) = (0, 0);
    }
    write_eval(&dir.path().join("runs/SM-short8-seed0/eval/w8"), &far).unwrap();
    let md = std::fs::read_to_string(&report::from_saved(dir.path()).unwrap()[0]).unwrap();
    assert!(
        md.contains("| SM-short8-seed0 | SM | 1 | 0 | 0 | - | - | unknown |"),
        "{md}"
    );
    assert!(
        md.contains(
            "3 of 4 runs learned. Unknown (no answer within the window at the training \
             length): SM-short8-seed0."
        ),
        "{md}"
    );
    assert!(md.contains("| SM-short8 | 8 | 0 of 1 |"), "{md}");
}

/// `--compare`: two studies' figures in one table and one plot, each row naming its study.
#[test]
fn studies_are_compared_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let (m, g) = (dir.path().join("window-m"), dir.path().join("window-g"));
    std::fs::create_dir_all(&m).unwrap();
    std::fs::create_dir_all(&g).unwrap();
    let spec = spec().with_seeds(3).unwrap();
    saved_study(&m, &spec, &[(9, 7), (9, 5), (2, 1)]);
    saved_study(&g, &spec, &[(9, 3), (9, 3), (9, 3)]);
    let out = dir.path().join("side");
    let files = report::compare(&[m.clone(), g.clone()], &out).unwrap();
    let md = std::fs::read_to_string(&files[0]).unwrap();
    assert!(md.contains("| window-m | SM-short8 | 8 | 2 of 3 |"), "{md}");
    assert!(md.contains("| window-g | SM-short8 | 8 | 3 of 3 |"), "{md}");
    assert!(
        md.contains("| window-g | SM-short8 | 8 | - | 30.0 (30.0–30.0) [30.0–30.0] |"),
        "{md}"
    );
    assert!(
        md.contains("| 3 | 8 of 12 |") && md.contains("| 3 | 12 of 12 |"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.join("compare-retrieval-mqar.svg")).unwrap();
    assert!(svg.contains("window-g: SM-short8 w=8") && svg.contains("window-m: SM-short8 w=8"));
    // The studies' own reports are not touched.
    assert!(!m.join("report.md").exists());
    let err = report::compare(&[m], &out).unwrap_err().to_string();
    assert!(err.contains("two study folders"), "{err}");
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

/// The shipped studies parse, the memory axis among them: the default's grid with the gated
/// delta rule (GS) and with RAttention (RS, at window 16 and at the long window), the text
/// study on recall-mix evaluated on passkey and needles at 1 to 16 times its length, and the
/// regime where attention alone learns the task.
#[test]
fn the_shipped_studies_cover_each_memory_and_text() {
    let schedules = |name: &str| -> Vec<String> {
        let (spec, _) = study::resolve(name).unwrap();
        let mut s: Vec<String> = spec
            .runs()
            .unwrap()
            .iter()
            .map(|r| r.schedule.clone())
            .collect();
        s.dedup();
        s
    };
    let grid =
        |p: &str| ["short16", "long128", "p0.5", "p0.5-anneal0.1"].map(|s| format!("{p}-{s}"));
    assert_eq!(schedules("window-h200"), grid("MS"));
    assert_eq!(schedules("window-g"), grid("GS"));
    assert_eq!(schedules("window-r"), grid("RS"));
    let (h200, _) = study::resolve("window-h200").unwrap();
    assert_eq!(h200.runs().unwrap().len(), 4 * 3);
    let (text, _) = study::resolve("window-text").unwrap();
    let runs = text.runs().unwrap();
    assert!(runs.iter().all(|r| r.cfg.data.source == "recall-mix"));
    assert_eq!(text.eval.tasks, ["passkey", "niah"]);
    assert_eq!(text.eval.lengths, [1, 2, 4, 8, 16]);
    assert!(runs.iter().all(|r| r.cfg.train.steps <= 2000));
    // The text where attention learns to answer: the passkey text at three times the steps,
    // attention alone beside the grid.
    let mut passkey = ["short128", "long512", "p0.5", "p0.5-anneal0.1"]
        .map(|s| format!("MS-{s}"))
        .to_vec();
    passkey.push("S-long512".into());
    assert_eq!(schedules("window-passkey"), passkey);
    let (spec, _) = study::resolve("window-passkey").unwrap();
    assert_eq!(spec.eval.tasks, ["passkey", "niah"]);
    assert!(spec
        .runs()
        .unwrap()
        .iter()
        .all(|r| r.cfg.data.source == "passkey" && r.cfg.train.steps == 6000));
    // The regime where attention alone learns the task: the default's grid, more rows and steps,
    // and attention alone at the long window.
    let mut regime = grid("MS").to_vec();
    regime.push("S-long128".into());
    assert_eq!(schedules("window-regime"), regime);
    let (regime, _) = study::resolve("window-regime").unwrap();
    let runs = regime.runs().unwrap();
    assert!(runs
        .iter()
        .all(|r| r.cfg.data.batch_size == 256 && r.cfg.train.steps == 6000));
    let alone: Vec<_> = runs.iter().filter(|r| r.schedule == "S-long128").collect();
    assert_eq!(alone.len(), 3);
    assert!(alone
        .iter()
        .all(|r| r.cfg.model.pattern == "S" && r.cfg.train.p_short == 0.0));
}

/// The memory axis on tiny CPU runs: the same micro grid with the gated delta rule and with
/// RAttention as the memory, each trained and reported, then put side by side.
#[test]
fn tiny_studies_of_two_memories_compare_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let mut folders = Vec::new();
    for memory in ["GS", "RS"] {
        let text = MICRO
            .replace(
                "model.pattern=\\\"SM\\\"",
                &format!("model.pattern=\\\"{memory}\\\""),
            )
            .replace("seeds = 2", "seeds = 1");
        let spec = StudySpec::parse(&text, memory, None).unwrap();
        let out = dir.path().join(format!("micro-{memory}"));
        assert!(run_study(&spec, &out).finished);
        folders.push(out);
    }
    let side = dir.path().join("side");
    let files = report::compare(&folders, &side).unwrap();
    let md = std::fs::read_to_string(&files[0]).unwrap();
    for row in [
        "| micro-GS | GS-short8 | 8 |",
        "| micro-RS | RS-long32 | 32 |",
    ] {
        assert!(md.contains(row), "{row}: {md}");
    }
}

/// `swax study --jobs 3` trains the runs in processes of their own, three at a time, each logging
/// to `OUT/logs/`, and its report is the one the study run in one process writes; `--jobs 0` is
/// refused.
#[test]
fn runs_trained_in_parallel_processes_give_the_same_report() {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let spec = spec();
    assert!(run_study(&spec, one.path()).finished);
    let file = many.path().join("micro.toml");
    std::fs::write(&file, MICRO).unwrap();
    let out = many.path().join("out");
    let study = |jobs: &str| swax_study(&file, &out, &["--jobs", jobs]);
    let refused = study("0");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--jobs 0"));

    let run = study("3");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("8 runs, 3 at a time"), "{stderr}");
    for r in spec.runs().unwrap() {
        assert!(stderr.contains(&format!("{}: done", r.name)), "{stderr}");
        let log = std::fs::read_to_string(out.join("logs").join(format!("{}.log", r.name)));
        assert!(log.unwrap().contains("training"), "{}", r.name);
    }
    let read = |dir: &Path, f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read(&out, "report.md"), read(one.path(), "report.md"));
    assert_eq!(read(&out, "report.json"), read(one.path(), "report.json"));
}
