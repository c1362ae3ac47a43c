//! The study's report, from saved results alone (no model): `STUDY/report.md`, the same figures
//! as data in `STUDY/report.json`, and the plots. Retrieval is always split by where the fact
//! lies: within the evaluation window (attention can see it) or beyond it (only a recurrent state
//! can carry it). Each figure of a schedule is the median over its seeds with the range (min to
//! max) and, from three seeds, a bootstrap 90% interval of the median (`stats`); every seed
//! counts, learned or not, and the runs that did not learn are listed by name.
//!
//! - `retrieval-TASK.svg`: beyond-window accuracy against the evaluation length, a line per
//!   schedule and window (the SWAX paper's needle-in-a-haystack figure);
//! - `tradeoff.svg`: in-window quality (the held-out loss over the training length at that
//!   window, or, for a study without the loss, the exact match within the window at the training
//!   length) against beyond-window retrieval, a point per schedule and window (its short/long
//!   trade-off figure);
//! - `loss-by-position.svg`: the held-out loss by position, past the training length.
//!
//! Error bars are the range over the seeds. [`compare`] puts several studies' figures side by
//! side (`swax study --compare`).
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::stats::{self, Summary};
use super::{RunSpec, StudySpec};
use crate::eval::report::{load, loss_figure, write as write_file};
use crate::eval::results::EvalResults;
use crate::eval::svg::{line_plot, LinePlot, Series};
use crate::train::metrics;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A run learned the task when the exact match of the answers within the window, at the
/// training length, is at least this (%) at every window it trained at that has such answers:
/// the in-window task is the one training teaches, so a run below it says nothing about
/// retrieval beyond the window. A run with no answer within any of its windows (a text task's
/// needle lies farther back than a short window reaches) is neither: its learning is unknown.
pub const LEARNED_PCT: f64 = 50.0;

/// What "learned" means, for the report's reader.
const LEARNED_MEANING: &str = "A run learned when the exact match of the answers within the \
    window, at the training length, is at least 50% at every window it trained at that has such \
    answers; with none at any of its windows, whether it learned is unknown.";

/// The study in `out` as saved: its spec (`study.toml`), its runs and every run's results.
fn saved(out: &Path) -> Result<(StudySpec, Vec<RunSpec>, Vec<EvalResults>)> {
    let kept = out.join("study.toml");
    if !kept.is_file() {
        return Err(format!(
            "{}: no study has run here (no study.toml): run the study into it first, then \
             --report writes its report again",
            out.display()
        )
        .into());
    }
    let spec = StudySpec::load(&kept)?;
    let runs = spec.runs()?;
    let mut results = Vec::new();
    for r in &runs {
        let dir = out.join("runs").join(&r.name);
        let mut saved = load(&dir).map_err(|e| format!("{}: {e}", r.name))?;
        results.append(&mut saved);
    }
    Ok((spec, runs, results))
}

/// Reads the study in `out` (its `study.toml` and every run's saved results) and writes the
/// report: what `swax study --report` does.
pub fn from_saved(out: &Path) -> Result<Vec<PathBuf>> {
    let (spec, runs, results) = saved(out)?;
    write(out, &spec, &runs, &results)
}

/// The run a result belongs to: its folder's name.
fn run_name(r: &EvalResults) -> String {
    Path::new(&r.run)
        .file_name()
        .map_or(r.model.clone(), |n| n.to_string_lossy().into_owned())
}

/// The mean training loss of the last (up to) 20 steps of a run's metrics.
fn final_train_loss(dir: &Path) -> Option<f64> {
    let loss = metrics::series(&dir.join("metrics.jsonl"), "loss");
    let tail = &loss[loss.len().saturating_sub(20)..];
    (!tail.is_empty()).then(|| tail.iter().map(|p| p.1).sum::<f64>() / tail.len() as f64)
}

/// The training's own held-out probes at a window, at the run's last evaluation: rows of the
/// training data (not the evaluation tasks' wordings), exact match (%) of the answers whose fact
/// lies within the window and of those beyond it (None: no such answer).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProbeRecall {
    pub window: usize,
    pub within: Option<f64>,
    pub beyond: Option<f64>,
}

/// The probes of the last step at which `swax train` evaluated them (one line per window it
/// trains at), from a run's metrics.
fn probe_recall(dir: &Path) -> Vec<ProbeRecall> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap_or_default();
    let evals: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("recall_near").is_some())
        .collect();
    let last = evals.iter().filter_map(|v| v["step"].as_u64()).max();
    let pct = |v: &serde_json::Value, key: &str| {
        let n = v[format!("{key}_n")].as_u64().unwrap_or(0);
        (n > 0).then(|| 100.0 * v[key].as_f64().unwrap_or(0.0))
    };
    let mut out: Vec<ProbeRecall> = evals
        .iter()
        .filter(|v| v["step"].as_u64() == last)
        .filter_map(|v| {
            Some(ProbeRecall {
                window: v["window"].as_u64()? as usize,
                within: pct(v, "recall_near"),
                beyond: pct(v, "recall_far"),
            })
        })
        .collect();
    out.sort_by_key(|p| p.window);
    out.dedup_by_key(|p| p.window);
    out
}

/// Exact match (%) of the answers within the window at the training length, every task pooled.
pub fn in_window_recall(r: &EvalResults) -> Option<f64> {
    let (n, ok) = r
        .tasks
        .iter()
        .filter(|c| c.length == r.train_len)
        .fold((0, 0), |(n, ok), c| {
            (n + c.near_answers, ok + c.near_correct)
        });
    (n > 0).then(|| 100.0 * ok as f64 / n as f64)
}

/// One run of the study: its schedule and seed, and whether it learned.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    pub name: String,
    pub schedule: String,
    pub seed: u64,
    pub pattern: String,
    pub p_short: f64,
    pub anneal: f64,
    pub final_train_loss: Option<f64>,
    /// The lowest, over the windows it trained at that have answers within the window, of
    /// [`in_window_recall`] (None: no such answer at any).
    pub in_window_recall: Option<f64>,
    /// Whether `in_window_recall` is at least [`LEARNED_PCT`]; None where it is unknown.
    pub learned: Option<bool>,
    /// The training's held-out probes at each window it trained at, at its last evaluation.
    pub probes: Vec<ProbeRecall>,
}

/// One length of one task, over a schedule's seeds.
#[derive(Clone, Debug, Serialize)]
pub struct CellRow {
    pub task: String,
    pub length: usize,
    pub within: Option<Summary>,
    pub beyond: Option<Summary>,
}

/// One position bucket of the held-out loss, over a schedule's seeds.
#[derive(Clone, Debug, Serialize)]
pub struct LossRow {
    pub start: usize,
    pub end: usize,
    pub bits: Summary,
}

/// One schedule at one window it trained at, over its seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub schedule: String,
    pub pattern: String,
    pub window: usize,
    /// The seeds' runs evaluated at this window.
    pub runs: Vec<String>,
    /// How many of them learned.
    pub learned: usize,
    pub in_window_quality: Option<Summary>,
    /// `%`, or the loss's unit.
    pub quality_unit: String,
    pub within: Option<Summary>,
    pub beyond: Option<Summary>,
    pub cells: Vec<CellRow>,
    pub loss_unit: Option<String>,
    pub loss_data: Option<String>,
    pub loss: Vec<LossRow>,
}

impl Row {
    fn label(&self) -> String {
        format!("{} w={}", self.schedule, self.window)
    }

    fn cell(&self, task: &str, length: usize) -> Option<&CellRow> {
        self.cells
            .iter()
            .find(|c| c.task == task && c.length == length)
    }
}

/// How the intervals were drawn, for the JSON's reader.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalSpec {
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
    pub min_values: usize,
}

/// Everything the report says, as `report.json` holds it.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub description: String,
    pub seeds: usize,
    pub learned_threshold_pct: f64,
    pub interval: IntervalSpec,
    pub runs: Vec<RunRow>,
    /// The runs that did not learn, by name.
    pub not_learned: Vec<String>,
    /// The runs whose learning is unknown (no answer within any of their windows), by name.
    pub unknown: Vec<String>,
    pub rows: Vec<Row>,
}

/// The study's figures from its runs' saved results (and metrics, under `out/runs/`).
pub fn figures(out: &Path, spec: &StudySpec, runs: &[RunSpec], results: &[EvalResults]) -> Figures {
    let of_run = |name: &str| -> Vec<&EvalResults> {
        results.iter().filter(|r| run_name(r) == name).collect()
    };
    let run_rows: Vec<RunRow> = runs
        .iter()
        .map(|r| {
            let recall = of_run(&r.name)
                .iter()
                .filter_map(|e| in_window_recall(e))
                .reduce(f64::min);
            RunRow {
                name: r.name.clone(),
                schedule: r.schedule.clone(),
                seed: r.seed,
                pattern: r.cfg.model.pattern.clone(),
                p_short: r.cfg.train.p_short,
                anneal: r.cfg.train.anneal_fraction,
                final_train_loss: final_train_loss(&out.join("runs").join(&r.name)),
                in_window_recall: recall,
                learned: recall.map(|v| v >= LEARNED_PCT),
                probes: probe_recall(&out.join("runs").join(&r.name)),
            }
        })
        .collect();
    let mut schedules: Vec<&str> = Vec::new();
    for r in runs {
        if !schedules.contains(&r.schedule.as_str()) {
            schedules.push(&r.schedule);
        }
    }
    let mut rows = Vec::new();
    for schedule in schedules {
        let members: Vec<&RunRow> = run_rows.iter().filter(|r| r.schedule == schedule).collect();
        let evals: Vec<&EvalResults> = members.iter().flat_map(|m| of_run(&m.name)).collect();
        let mut windows: Vec<usize> = evals.iter().map(|e| e.window).collect();
        windows.sort_unstable();
        windows.dedup();
        for window in windows {
            let at: Vec<&EvalResults> = evals
                .iter()
                .copied()
                .filter(|e| e.window == window)
                .collect();
            rows.push(row(schedule, &members, &at, window));
        }
    }
    Figures {
        description: spec.study.description.trim().to_string(),
        seeds: spec.grid.seeds,
        learned_threshold_pct: LEARNED_PCT,
        interval: IntervalSpec {
            level: stats::LEVEL,
            resamples: stats::RESAMPLES,
            seed: stats::SEED,
            min_values: stats::MIN_FOR_INTERVAL,
        },
        not_learned: names_where(&run_rows, Some(false)),
        unknown: names_where(&run_rows, None),
        runs: run_rows,
        rows,
    }
}

fn names_where(runs: &[RunRow], learned: Option<bool>) -> Vec<String> {
    runs.iter()
        .filter(|r| r.learned == learned)
        .map(|r| r.name.clone())
        .collect()
}

/// A schedule's row at `window`, from its seeds' results `at` (one a seed).
fn row(schedule: &str, members: &[&RunRow], at: &[&EvalResults], window: usize) -> Row {
    let summary = |f: &dyn Fn(&EvalResults) -> Option<f64>| {
        Summary::of(&at.iter().filter_map(|e| f(e)).collect::<Vec<_>>())
    };
    let names: Vec<String> = at.iter().map(|e| run_name(e)).collect();
    let mut tasks: Vec<String> = at.iter().flat_map(|e| e.task_names()).collect();
    tasks.sort();
    tasks.dedup();
    let mut cells = Vec::new();
    for task in &tasks {
        let mut lengths: Vec<usize> = at.iter().flat_map(|e| e.lengths(task)).collect();
        lengths.sort_unstable();
        lengths.dedup();
        for length in lengths {
            cells.push(CellRow {
                task: task.clone(),
                length,
                within: summary(&|e| e.accuracy_by_reach(task, length, true)),
                beyond: summary(&|e| e.accuracy_by_reach(task, length, false)),
            });
        }
    }
    let losses: Vec<_> = at.iter().filter_map(|e| e.loss.as_ref()).collect();
    let loss = losses.first().map_or(Vec::new(), |first| {
        first
            .buckets
            .iter()
            .filter_map(|b| {
                let bits: Vec<f64> = losses
                    .iter()
                    .filter_map(|l| {
                        l.buckets
                            .iter()
                            .find(|o| (o.start, o.end) == (b.start, b.end))
                            .map(|o| o.bits)
                    })
                    .collect();
                Some(LossRow {
                    start: b.start,
                    end: b.end,
                    bits: Summary::of(&bits)?,
                })
            })
            .collect()
    });
    Row {
        schedule: schedule.to_string(),
        pattern: members.first().map_or(String::new(), |m| m.pattern.clone()),
        window,
        learned: members
            .iter()
            .filter(|m| m.learned == Some(true) && names.contains(&m.name))
            .count(),
        runs: names,
        in_window_quality: summary(&|e| in_window_quality(e).map(|q| q.0)),
        quality_unit: at
            .iter()
            .find_map(|e| in_window_quality(e).map(|q| q.1))
            .unwrap_or_else(|| "%".into()),
        within: summary(&|e| e.overall_by_reach(true)),
        beyond: summary(&|e| e.overall_by_reach(false)),
        cells,
        loss_unit: losses.first().map(|l| l.unit.clone()),
        loss_data: losses.first().map(|l| l.data.clone()),
        loss,
    }
}

/// `median (min–max) [interval]`, with `n=K` where fewer than `of` seeds have the figure.
fn fmt(s: &Option<Summary>, decimals: usize, of: usize) -> String {
    let Some(s) = s else { return "-".into() };
    let d = decimals;
    let mut out = format!("{:.d$}", s.median);
    if s.values.len() > 1 {
        let _ = write!(out, " ({:.d$}–{:.d$})", s.min, s.max);
    }
    if let Some((lo, hi)) = s.interval {
        let _ = write!(out, " [{lo:.d$}–{hi:.d$}]");
    }
    if s.values.len() < of {
        let _ = write!(out, " n={}", s.values.len());
    }
    out
}

fn quality(r: &Row) -> String {
    match r.quality_unit.as_str() {
        "%" => fmt(&r.in_window_quality, 1, r.runs.len()),
        unit => format!("{} {unit}", fmt(&r.in_window_quality, 4, r.runs.len())),
    }
}

/// What each cell holds, for the report's reader.
fn cells_meaning(seeds: usize) -> String {
    let interval = match seeds >= stats::MIN_FOR_INTERVAL {
        true => format!(
            " and, in brackets, a bootstrap {:.0}% interval of the median ({} resamples from a \
             fixed seed)",
            100.0 * stats::LEVEL,
            stats::RESAMPLES
        ),
        false => String::new(),
    };
    format!(
        "Each figure is the median over the seeds, with its range (min–max) in \
         parentheses{interval}; `n=K` marks a figure only K seeds have. Every seed counts, \
         learned or not. {LEARNED_MEANING}"
    )
}

/// Writes `report.md`, `report.json` and the plots into `out` (report.md first in the list
/// returned).
pub fn write(
    out: &Path,
    spec: &StudySpec,
    runs: &[RunSpec],
    results: &[EvalResults],
) -> Result<Vec<PathBuf>> {
    let f = figures(out, spec, runs, results);
    let mut md = String::from("# Window study\n\n");
    let _ = writeln!(md, "{}\n", f.description);
    setup(&mut md, spec, runs, &f);
    runs_table(&mut md, &f);
    retrieval_table(&mut md, spec, &f);
    let mut files = by_length(&mut md, out, &f)?;
    files.extend(plots(out, spec, &f)?);
    md += "\n## Plots\n\nLines and points are medians over the seeds; error bars their range.\n\n";
    for file in &files {
        let name = file.file_name().expect("a file").to_string_lossy();
        let _ = writeln!(md, "![{name}]({name})\n");
    }
    let mut all = vec![
        write_file(out, "report.md", &md)?,
        write_file(out, "report.json", &serde_json::to_string_pretty(&f)?)?,
    ];
    all.append(&mut files);
    Ok(all)
}

/// The paragraph that says what was trained and how it was evaluated, and what a cell means.
fn setup(md: &mut String, spec: &StudySpec, runs: &[RunSpec], f: &Figures) {
    let first = &runs[0].cfg;
    let (d, t) = (&first.data, &first.train);
    let seeds: Vec<String> = runs
        .iter()
        .filter(|r| r.schedule == runs[0].schedule)
        .map(|r| r.seed.to_string())
        .collect();
    let _ =
        writeln!(
        md,
        "Base `{}` with {}; {} steps of {} x {} tokens ({} in all) on `{}`; windows {} and {}; \
         each schedule at {} seeds (`train.seed` {}). Evaluated at {} tokens ({} samples per \
         task, length and depth), each run at every window it trained at.\n",
        Path::new(&spec.study.base)
            .file_name()
            .map_or(spec.study.base.clone(), |n| n.to_string_lossy().into_owned()),
        match spec.study.set.is_empty() {
            true => "no overrides".to_string(),
            false => format!("`{}`", spec.study.set.join("`, `")),
        },
        t.steps,
        d.batch_size * t.grad_accum,
        d.seq_len,
        t.steps * (d.batch_size * t.grad_accum * d.seq_len) as u64,
        d.source,
        spec.grid.w_short,
        spec.grid.w_long,
        f.seeds,
        seeds.join(", "),
        spec.eval
            .lengths
            .iter()
            .map(|k| (k * d.seq_len).to_string())
            .collect::<Vec<_>>()
            .join(", "),
        spec.eval.samples
    );
    let _ = writeln!(md, "{}\n", cells_meaning(f.seeds));
}

/// Every run, and which learned.
fn runs_table(md: &mut String, f: &Figures) {
    *md += "## Runs\n\n| run | pattern | p_short | anneal | seed | final train loss | in-window \
           recall at the training length (%) | learned | held-out training rows: within / beyond \
           the window (%) |\n|---|---|---:|---:|---:|---:|---:|---|---|\n";
    let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for r in &f.runs {
        let probes: Vec<String> = r
            .probes
            .iter()
            .map(|p| format!("w={}: {} / {}", p.window, pct(p.within), pct(p.beyond)))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.pattern,
            r.p_short,
            r.anneal,
            r.seed,
            r.final_train_loss.map_or("-".into(), |l| format!("{l:.4}")),
            r.in_window_recall.map_or("-".into(), |v| format!("{v:.1}")),
            match r.learned {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            },
            match probes.is_empty() {
                true => "-".into(),
                false => probes.join("; "),
            }
        );
    }
    let learned = learned_count(f);
    *md += "\n";
    let _ = match learned == f.runs.len() {
        true => write!(md, "Every run learned ({learned} of {}).", f.runs.len()),
        false => write!(md, "{learned} of {} runs learned.", f.runs.len()),
    };
    if !f.not_learned.is_empty() {
        let _ = write!(md, " Did not learn: {}.", f.not_learned.join(", "));
    }
    if !f.unknown.is_empty() {
        let _ = write!(
            md,
            " Unknown (no answer within the window at the training length): {}.",
            f.unknown.join(", ")
        );
    }
    *md += " The last column is the training's own check at its last evaluation: held-out rows \
            of the training data at the training length (the wordings it learned, not the \
            evaluation tasks'), the answers whose fact lies within the window and beyond it.\n";
}

/// Each schedule and window: in-window quality, retrieval within the window and beyond it.
fn retrieval_table(md: &mut String, spec: &StudySpec, f: &Figures) {
    let quality_name = match spec.eval.loss {
        true => "the held-out loss over the training length at that window",
        false => "the exact match (%) within the window at the training length",
    };
    let _ = write!(
        md,
        "\n## Retrieval: within the window and beyond it\n\n\
         Exact match (%) of the greedy answers over every task, length and depth, split by the \
         distance from the fact to its question; in-window quality is {quality_name}.\n\n\
         | schedule | window | learned | in-window quality | within the window | beyond the \
         window |\n|---|---:|---:|---:|---:|---:|\n"
    );
    for r in &f.rows {
        let n = r.runs.len();
        let _ = writeln!(
            md,
            "| {} | {} | {} of {n} | {} | {} | {} |",
            r.schedule,
            r.window,
            r.learned,
            quality(r),
            fmt(&r.within, 1, n),
            fmt(&r.beyond, 1, n),
        );
    }
}

/// Each task's retrieval beyond and within the window by length: the tables, and the plot of
/// each task written into `out`.
fn by_length(md: &mut String, out: &Path, f: &Figures) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for task in tasks(&f.rows) {
        let lengths = lengths(&f.rows, &task);
        for (reach, near) in [("beyond", false), ("within", true)] {
            let _ = write!(
                md,
                "\n### {task}: {reach} the window, by length\n\n| schedule | window |"
            );
            for l in &lengths {
                let _ = write!(md, " {l} |");
            }
            *md += "\n|---|---:|";
            *md += &"---:|".repeat(lengths.len());
            *md += "\n";
            for r in &f.rows {
                let _ = write!(md, "| {} | {} |", r.schedule, r.window);
                for &l in &lengths {
                    let cell = r.cell(&task, l);
                    let s = cell.and_then(|c| if near { &c.within } else { &c.beyond }.clone());
                    let _ = write!(md, " {} |", fmt(&s, 1, r.runs.len()));
                }
                *md += "\n";
            }
        }
        let series = f
            .rows
            .iter()
            .map(|r| retrieval_series(r, &task, r.label()))
            .collect();
        files.push(write_file(
            out,
            &format!("retrieval-{task}.svg"),
            &retrieval_plot(&task, series),
        )?);
    }
    Ok(files)
}

/// The trade-off between in-window quality and retrieval beyond the window, and the loss by
/// position, where the study measured them.
fn plots(out: &Path, spec: &StudySpec, f: &Figures) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let points: Vec<Series> = f
        .rows
        .iter()
        .filter_map(|r| tradeoff_point(r, r.label()))
        .collect();
    if !points.is_empty() {
        files.push(write_file(
            out,
            "tradeoff.svg",
            &tradeoff_plot(spec.eval.loss, &f.rows, points),
        )?);
    }
    if let Some(plot) = loss_plot(&f.rows) {
        files.push(write_file(out, "loss-by-position.svg", &plot)?);
    }
    Ok(files)
}

fn learned_count(f: &Figures) -> usize {
    f.runs.iter().filter(|r| r.learned == Some(true)).count()
}

fn tasks(rows: &[Row]) -> Vec<String> {
    let mut tasks: Vec<String> = rows
        .iter()
        .flat_map(|r| r.cells.iter().map(|c| c.task.clone()))
        .collect();
    tasks.sort();
    tasks.dedup();
    tasks
}

fn lengths(rows: &[Row], task: &str) -> Vec<usize> {
    let mut l: Vec<usize> = rows
        .iter()
        .flat_map(|r| r.cells.iter().filter(|c| c.task == task).map(|c| c.length))
        .collect();
    l.sort_unstable();
    l.dedup();
    l
}

/// Beyond-window accuracy against length: the medians, the range as error bars.
fn retrieval_series(r: &Row, task: &str, label: String) -> Series {
    let (points, errors) = r
        .cells
        .iter()
        .filter(|c| c.task == task)
        .filter_map(|c| {
            let s = c.beyond.as_ref()?;
            Some(((c.length as f64, s.median), (s.min, s.max)))
        })
        .unzip();
    Series {
        label,
        points,
        errors,
    }
}

fn retrieval_plot(task: &str, series: Vec<Series>) -> String {
    line_plot(&LinePlot {
        title: format!("{task}: exact match beyond the window, against length"),
        x_label: "length (tokens)".into(),
        y_label: "exact match % (facts beyond the window)".into(),
        log2_x: true,
        y_range: Some((0.0, 100.0)),
        series,
    })
}

/// In-window quality against beyond-window retrieval: the medians, the beyond range as the bar.
fn tradeoff_point(r: &Row, label: String) -> Option<Series> {
    let (q, b) = (r.in_window_quality.as_ref()?, r.beyond.as_ref()?);
    Some(Series {
        label,
        points: vec![(q.median, b.median)],
        errors: vec![(b.min, b.max)],
    })
}

fn tradeoff_plot(loss: bool, rows: &[Row], points: Vec<Series>) -> String {
    let x_label = match loss {
        true => format!(
            "held-out loss over the training length ({}; left is better)",
            rows.first().map_or("", |r| r.quality_unit.as_str())
        ),
        false => "exact match % within the window at the training length".into(),
    };
    line_plot(&LinePlot {
        title: "in-window quality against beyond-window retrieval".into(),
        x_label,
        y_label: "exact match % beyond the window".into(),
        log2_x: false,
        y_range: Some((0.0, 100.0)),
        series: points,
    })
}

/// The held-out loss by position: each schedule's median over its seeds, the range as bars.
fn loss_plot(rows: &[Row]) -> Option<String> {
    let unit = rows.iter().find_map(|r| r.loss_unit.clone())?;
    let data: Vec<&str> = rows.iter().filter_map(|r| r.loss_data.as_deref()).collect();
    let series = rows
        .iter()
        .filter(|r| !r.loss.is_empty())
        .map(|r| Series {
            label: r.label(),
            points: r
                .loss
                .iter()
                .map(|b| ((b.start + b.end) as f64 / 2.0, b.bits.median))
                .collect(),
            errors: r.loss.iter().map(|b| (b.bits.min, b.bits.max)).collect(),
        })
        .collect();
    Some(loss_figure(unit, &data, series))
}

/// In-window quality and its unit: the held-out loss over the training length, else the exact
/// match within the window at the training length.
fn in_window_quality(r: &EvalResults) -> Option<(f64, String)> {
    if let (Some(bits), Some(l)) = (r.first_bucket_bits(), &r.loss) {
        return Some((bits, l.unit.clone()));
    }
    let near = r
        .task_names()
        .iter()
        .filter_map(|t| r.accuracy_by_reach(t, r.train_len, true))
        .collect::<Vec<_>>();
    (!near.is_empty()).then(|| (near.iter().sum::<f64>() / near.len() as f64, "%".into()))
}

/// Several studies side by side (`swax study --compare A B ..`): each study folder's figures as
/// its report gives them, in one table and one plot per task, the study's folder name beside each
/// schedule (the memory axis: the same grid with mLSTM, gated delta rule or RAttention). Writes
/// `compare.md` and `compare-retrieval-TASK.svg` into `out` (compare.md first in the list), so a
/// study folder can hold its comparison without losing its own report.
pub fn compare(studies: &[PathBuf], out: &Path) -> Result<Vec<PathBuf>> {
    if studies.len() < 2 {
        return Err("--compare needs two study folders or more".into());
    }
    let mut all: Vec<(String, Figures)> = Vec::new();
    for dir in studies {
        let (spec, runs, results) = saved(dir)?;
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        all.push((name, figures(dir, &spec, &runs, &results)));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut md = String::from("# Window studies side by side\n\n");
    md += "| study | folder | seeds | runs learned | description |\n|---|---|---:|---:|---|\n";
    for ((name, f), dir) in all.iter().zip(studies) {
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} of {} | {} |",
            dir.display(),
            f.seeds,
            learned_count(f),
            f.runs.len(),
            f.description
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let seeds = all.iter().map(|(_, f)| f.seeds).min().unwrap_or(1);
    let _ = writeln!(md, "\n{}\n", cells_meaning(seeds));
    md +=
        "## Retrieval: within the window and beyond it\n\n| study | schedule | window | learned | \
           in-window quality | within the window | beyond the window |\n\
           |---|---|---:|---:|---:|---:|---:|\n";
    for (name, f) in &all {
        for r in &f.rows {
            let n = r.runs.len();
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} of {n} | {} | {} | {} |",
                r.schedule,
                r.window,
                r.learned,
                quality(r),
                fmt(&r.within, 1, n),
                fmt(&r.beyond, 1, n)
            );
        }
    }
    let rows: Vec<Row> = all.iter().flat_map(|(_, f)| f.rows.clone()).collect();
    let mut files = Vec::new();
    for task in tasks(&rows) {
        let lengths = lengths(&rows, &task);
        let _ = write!(
            md,
            "\n### {task}: beyond the window, by length\n\n| study | schedule | window |"
        );
        for l in &lengths {
            let _ = write!(md, " {l} |");
        }
        md += "\n|---|---|---:|";
        md += &"---:|".repeat(lengths.len());
        md += "\n";
        let mut series = Vec::new();
        for (name, f) in &all {
            for r in &f.rows {
                let _ = write!(md, "| {name} | {} | {} |", r.schedule, r.window);
                for &l in &lengths {
                    let s = r.cell(&task, l).and_then(|c| c.beyond.clone());
                    let _ = write!(md, " {} |", fmt(&s, 1, r.runs.len()));
                }
                md += "\n";
                series.push(retrieval_series(r, &task, format!("{name}: {}", r.label())));
            }
        }
        files.push(write_file(
            out,
            &format!("compare-retrieval-{task}.svg"),
            &retrieval_plot(&task, series),
        )?);
    }
    md += "\n## Plots\n\nLines are medians over the seeds; error bars their range.\n\n";
    for file in &files {
        let name = file.file_name().expect("a file").to_string_lossy();
        let _ = writeln!(md, "![{name}]({name})\n");
    }
    let mut written = vec![write_file(out, "compare.md", &md)?];
    written.append(&mut files);
    Ok(written)
}
