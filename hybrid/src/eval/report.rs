//! Reports from saved results alone (no model): the markdown tables and SVG plots of one
//! evaluation (`write_eval`), and several runs side by side (`write_report`): one table with a
//! column per run, one plot per measure with a line per run, so a window study reads at a
//! glance.
use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::results::EvalResults;
use super::svg::{heatmap, line_plot, LinePlot, Series};
use crate::train::metrics;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The results under `path`: a results file, a folder holding `results.json`, or a run folder
/// (every `eval/*/results.json` in it, by window).
pub fn load(path: &Path) -> Result<Vec<EvalResults>> {
    let read = |p: &Path| -> Result<EvalResults> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?)
    };
    if path.is_file() {
        return Ok(vec![read(path)?]);
    }
    if path.join("results.json").is_file() {
        return Ok(vec![read(&path.join("results.json"))?]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path.join("eval"))
        .map_err(|e| format!("{}: no results.json nor eval/ ({e})", path.display()))?
        .filter_map(|e| Some(e.ok()?.path().join("results.json")))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut all: Vec<EvalResults> = files.iter().map(|p| read(p)).collect::<Result<_>>()?;
    all.sort_by_key(|r| r.window);
    if all.is_empty() {
        return Err(format!("{}: no eval/*/results.json (run swax eval)", path.display()).into());
    }
    Ok(all)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// One table, a column per run: accuracy (%) per task and length, overall and split by whether
/// the answer's fact lies within the window, then the loss per position bucket.
pub fn markdown(runs: &[EvalResults]) -> String {
    let mut s = String::from("| measure | length |");
    for r in runs {
        let _ = write!(s, " {} |", r.label());
    }
    s += "\n|---|---:|";
    s += &"---:|".repeat(runs.len());
    s += "\n";
    let mut tasks: Vec<String> = Vec::new();
    for r in runs {
        for t in r.task_names() {
            if !tasks.contains(&t) {
                tasks.push(t);
            }
        }
    }
    for task in &tasks {
        let mut lengths: Vec<usize> = runs.iter().flat_map(|r| r.lengths(task)).collect();
        lengths.sort_unstable();
        lengths.dedup();
        for len in lengths {
            let _ = write!(s, "| {task} acc % | {len} |");
            for r in runs {
                let _ = write!(s, " {} |", pct(r.accuracy(task, len)));
            }
            s += "\n";
            for (reach, near) in [("within", true), ("beyond", false)] {
                let _ = write!(s, "| {task} {reach} window % | {len} |");
                for r in runs {
                    let _ = write!(s, " {} |", pct(r.accuracy_by_reach(task, len, near)));
                }
                s += "\n";
            }
            if runs.iter().any(|r| r.generated(task, len).is_some()) {
                let _ = write!(s, "| {task} generated % | {len} |");
                for r in runs {
                    let _ = write!(s, " {} |", pct(r.generated(task, len)));
                }
                s += "\n";
            }
        }
    }
    let mut spans: Vec<(usize, usize)> = runs
        .iter()
        .filter_map(|r| r.loss.as_ref())
        .flat_map(|l| l.buckets.iter().map(|b| (b.start, b.end)))
        .collect();
    spans.sort_unstable();
    spans.dedup();
    for (start, end) in spans {
        let unit = runs
            .iter()
            .find_map(|r| r.loss.as_ref().map(|l| l.unit.clone()))
            .unwrap_or_default();
        let _ = write!(s, "| loss {unit} | {start}..{end} |");
        for r in runs {
            let bits = r.loss.as_ref().and_then(|l| {
                l.buckets
                    .iter()
                    .find(|b| (b.start, b.end) == (start, end))
                    .map(|b| b.bits)
            });
            let _ = write!(s, " {} |", bits.map_or("-".into(), |b| format!("{b:.3}")));
        }
        s += "\n";
    }
    s
}

/// Accuracy (%) of a depth task by depth (rows) and length (columns).
pub fn depth_table(r: &EvalResults, task: &str) -> String {
    let lengths = r.lengths(task);
    let mut s = format!("| {task}: depth \\ length |");
    for l in &lengths {
        let _ = write!(s, " {l} |");
    }
    s += "\n|---:|";
    s += &"---:|".repeat(lengths.len());
    s += "\n";
    for d in r.depths(task) {
        let _ = write!(s, "| {d:.2} |");
        for &l in &lengths {
            let _ = write!(s, " {} |", pct(r.accuracy_at(task, l, d)));
        }
        s += "\n";
    }
    s
}

fn describe(r: &EvalResults) -> String {
    let data = match r.trained_on.as_str() {
        "" => String::new(),
        source => format!(" on {source}"),
    };
    format!(
        "{} ({} pattern {}), trained{data} at length {}, evaluated at window {} from {} (step {})",
        r.label(),
        r.model,
        r.pattern,
        r.train_len,
        r.window,
        r.checkpoint,
        r.step
    )
}

/// What the table's measures are, for a reader who did not write them.
pub const MEANING: &str = "acc %: answers whose every token the greedy model predicts (one \
    teacher-forced pass); within / beyond window: of the answers whose fact lies less than the \
    window back (attention can see it) or farther (only a recurrent state can carry it); loss: \
    mean over the held-out sequences by position, in bits.";

fn accuracy_series(r: &EvalResults, task: &str, label: String) -> Series {
    Series {
        label,
        points: r
            .lengths(task)
            .into_iter()
            .filter_map(|l| Some((l as f64, r.accuracy(task, l)?)))
            .collect(),
        errors: Vec::new(),
    }
}

fn accuracy_plot(title: String, series: Vec<Series>) -> String {
    line_plot(&LinePlot {
        title,
        x_label: "length (tokens)".into(),
        y_label: "exact match %".into(),
        log2_x: true,
        y_range: Some((0.0, 100.0)),
        series,
    })
}

pub(crate) fn loss_plot(runs: &[EvalResults]) -> Option<String> {
    let unit = runs.iter().find_map(|r| r.loss.as_ref())?.unit.clone();
    let data: Vec<&str> = runs
        .iter()
        .filter_map(|r| Some(r.loss.as_ref()?.data.as_str()))
        .collect();
    let series = runs
        .iter()
        .filter_map(|r| {
            let l = r.loss.as_ref()?;
            Some(Series {
                label: r.label(),
                points: l
                    .buckets
                    .iter()
                    .map(|b| ((b.start + b.end) as f64 / 2.0, b.bits))
                    .collect(),
                errors: Vec::new(),
            })
        })
        .collect();
    Some(loss_figure(unit, &data, series))
}

/// The loss-by-position figure of `series` (x: the bucket's middle position), in `unit`, on the
/// held-out `data` of each line.
pub(crate) fn loss_figure(unit: String, data: &[&str], series: Vec<Series>) -> String {
    // The data named where every line's loss was measured on the same.
    let mut data = data.to_vec();
    data.dedup();
    line_plot(&LinePlot {
        title: match data[..] {
            [one] if !one.is_empty() => format!("loss by position (held-out {one})"),
            _ => "loss by position (held-out data)".into(),
        },
        x_label: "position (tokens)".into(),
        y_label: unit,
        log2_x: false,
        y_range: None,
        series,
    })
}

fn heatmap_of(r: &EvalResults, task: &str) -> String {
    let (lengths, depths) = (r.lengths(task), r.depths(task));
    let values: Vec<Vec<Option<f64>>> = depths
        .iter()
        .map(|&d| lengths.iter().map(|&l| r.accuracy_at(task, l, d)).collect())
        .collect();
    heatmap(
        &format!("{task}: exact match % ({})", r.label()),
        "needle depth",
        &depths.iter().map(|d| format!("{d:.2}")).collect::<Vec<_>>(),
        "length (tokens)",
        &lengths.iter().map(|l| l.to_string()).collect::<Vec<_>>(),
        &values,
    )
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    swax_nn::checkpoint::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Writes one evaluation into `dir`: `results.json`, `results.md`, a heatmap per depth task,
/// `accuracy.svg` (a line per task) and `loss-by-position.svg`. Returns the files written.
pub fn write_eval(dir: &Path, r: &EvalResults) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = vec![write(
        dir,
        "results.json",
        &serde_json::to_string_pretty(r)?,
    )?];
    let mut md = format!(
        "# Evaluation\n\n{}\n\n{}\n\n{MEANING}\n",
        describe(r),
        markdown(std::slice::from_ref(r))
    );
    let mut series = Vec::new();
    for task in r.task_names() {
        if !r.depths(&task).is_empty() {
            let _ = write!(md, "\n{}", depth_table(r, &task));
            files.push(write(
                dir,
                &format!("{task}-heatmap.svg"),
                &heatmap_of(r, &task),
            )?);
        }
        series.push(accuracy_series(r, &task, task.clone()));
    }
    files.push(write(dir, "results.md", &md)?);
    if !series.is_empty() {
        let plot = accuracy_plot(
            format!("exact match against length ({})", r.label()),
            series,
        );
        files.push(write(dir, "accuracy.svg", &plot)?);
    }
    if let Some(plot) = loss_plot(std::slice::from_ref(r)) {
        files.push(write(dir, "loss-by-position.svg", &plot)?);
    }
    Ok(files)
}

/// Writes several runs side by side into `dir`: `report.md`, `accuracy-TASK.svg` per task and
/// `loss-by-position.svg` (a line per run), and `train-loss.svg` from the runs' metrics files
/// where they are present. Returns the files written.
pub fn write_report(dir: &Path, runs: &[EvalResults]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut md = String::from("# Report\n\n");
    for r in runs {
        let _ = writeln!(md, "- {}", describe(r));
    }
    let _ = write!(md, "\n{}", markdown(runs));
    let mut files = vec![write(dir, "report.md", &md)?];
    let mut tasks: Vec<String> = runs.iter().flat_map(|r| r.task_names()).collect();
    tasks.dedup();
    tasks.sort();
    tasks.dedup();
    for task in tasks {
        let series = runs
            .iter()
            .map(|r| accuracy_series(r, &task, r.label()))
            .collect();
        let plot = accuracy_plot(format!("{task}: exact match against length"), series);
        files.push(write(dir, &format!("accuracy-{task}.svg"), &plot)?);
    }
    if let Some(plot) = loss_plot(runs) {
        files.push(write(dir, "loss-by-position.svg", &plot)?);
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut train = Vec::new();
    for r in runs {
        if seen.contains(&r.run.as_str()) {
            continue;
        }
        seen.push(&r.run);
        let points = smooth(&metrics::series(
            &Path::new(&r.run).join("metrics.jsonl"),
            "loss",
        ));
        if !points.is_empty() {
            let name = Path::new(&r.run)
                .file_name()
                .map_or(r.model.clone(), |n| n.to_string_lossy().into_owned());
            train.push(Series {
                label: name,
                points,
                errors: Vec::new(),
            });
        }
    }
    if !train.is_empty() {
        let plot = line_plot(&LinePlot {
            title: "training loss (smoothed)".into(),
            x_label: "step".into(),
            y_label: "loss (nats/token)".into(),
            log2_x: false,
            y_range: None,
            series: train,
        });
        files.push(write(dir, "train-loss.svg", &plot)?);
    }
    Ok(files)
}

/// An exponential moving average, as the trainer's own plot smooths its loss.
fn smooth(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut ema: Option<f64> = None;
    points
        .iter()
        .map(|&(x, y)| {
            let e = ema.map_or(y, |e| 0.95 * e + 0.05 * y);
            ema = Some(e);
            (x, e)
        })
        .collect()
}
