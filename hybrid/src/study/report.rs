//! The study's report, from saved results alone (no model): `STUDY/report.md` and its plots.
//! Retrieval is always split by where the fact lies: within the evaluation window (attention can
//! see it) or beyond it (only a recurrent state can carry it).
//!
//! - `retrieval-TASK.svg`: beyond-window accuracy against the evaluation length, a line per run
//!   and window (the SWAX paper's needle-in-a-haystack figure);
//! - `tradeoff.svg`: in-window quality (the held-out loss over the training length at that
//!   window, or, for a study without the loss, the exact match within the window at the training
//!   length) against beyond-window retrieval, a point per run and window (its short/long
//!   trade-off figure);
//! - `loss-by-position.svg`: the held-out loss by position, past the training length.
use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::{RunSpec, StudySpec};
use crate::eval::report::{load, loss_plot, write as write_file};
use crate::eval::results::EvalResults;
use crate::eval::svg::{line_plot, LinePlot, Series};
use crate::train::metrics;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Reads the study in `out` (its `study.toml` and every run's saved results) and writes the
/// report: what `swax study --report` does.
pub fn from_saved(out: &Path) -> Result<Vec<PathBuf>> {
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
    write(out, &spec, &runs, &results)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
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

/// Writes `report.md` and the plots into `out` (report.md first in the list returned).
pub fn write(
    out: &Path,
    spec: &StudySpec,
    runs: &[RunSpec],
    results: &[EvalResults],
) -> Result<Vec<PathBuf>> {
    let mut md = String::from("# Window study\n\n");
    let _ = writeln!(md, "{}\n", spec.study.description.trim());
    let first = &runs[0].cfg;
    let (d, t) = (&first.data, &first.train);
    let _ =
        writeln!(
        md,
        "Base `{}` with {}; {} steps of {} x {} tokens ({} in all) on `{}`; windows {} and {}. \
         Evaluated at {} tokens ({} samples per task, length and depth), each run at every \
         window it trained at.\n",
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
        spec.eval
            .lengths
            .iter()
            .map(|k| (k * d.seq_len).to_string())
            .collect::<Vec<_>>()
            .join(", "),
        spec.eval.samples
    );

    md += "## Runs\n\n| run | pattern | p_short | anneal | final train loss |\n|---|---|---:|---:|---:|\n";
    for r in runs {
        let c = &r.cfg;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.name,
            c.model.pattern,
            c.train.p_short,
            c.train.anneal_fraction,
            final_train_loss(&out.join("runs").join(&r.name))
                .map_or("-".into(), |l| format!("{l:.4}"))
        );
    }

    let quality_name = match spec.eval.loss {
        true => "the held-out loss over the training length at that window",
        false => "the exact match (%) within the window at the training length",
    };
    let _ = write!(
        md,
        "\n## Retrieval: within the window and beyond it\n\n\
         Exact match (%) of the greedy answers over every task, length and depth, split by the \
         distance from the fact to its question; in-window quality is {quality_name}.\n\n\
         | run | window | in-window quality | within the window | beyond the window |\n\
         |---|---:|---:|---:|---:|\n"
    );
    for r in results {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            run_name(r),
            r.window,
            in_window_quality(r).map_or("-".into(), |(q, unit)| match unit.as_str() {
                "%" => format!("{q:.1}%"),
                _ => format!("{q:.4} {unit}"),
            }),
            pct(r.overall_by_reach(true)),
            pct(r.overall_by_reach(false)),
        );
    }

    let mut tasks: Vec<String> = results.iter().flat_map(|r| r.task_names()).collect();
    tasks.sort();
    tasks.dedup();
    let mut files = Vec::new();
    for task in &tasks {
        let lengths: Vec<usize> = {
            let mut l: Vec<usize> = results.iter().flat_map(|r| r.lengths(task)).collect();
            l.sort_unstable();
            l.dedup();
            l
        };
        let _ = write!(
            md,
            "\n### {task}: beyond the window (within it), by length\n\n| run | window |"
        );
        for l in &lengths {
            let _ = write!(md, " {l} |");
        }
        md += "\n|---|---:|";
        md += &"---:|".repeat(lengths.len());
        md += "\n";
        for r in results {
            let _ = write!(md, "| {} | {} |", run_name(r), r.window);
            for &l in &lengths {
                let _ = write!(
                    md,
                    " {} ({}) |",
                    pct(r.accuracy_by_reach(task, l, false)),
                    pct(r.accuracy_by_reach(task, l, true))
                );
            }
            md += "\n";
        }
        let series = results
            .iter()
            .map(|r| Series {
                label: r.label(),
                points: r
                    .lengths(task)
                    .into_iter()
                    .filter_map(|l| Some((l as f64, r.accuracy_by_reach(task, l, false)?)))
                    .collect(),
            })
            .collect();
        let plot = line_plot(&LinePlot {
            title: format!("{task}: exact match beyond the window, against length"),
            x_label: "length (tokens)".into(),
            y_label: "exact match % (facts beyond the window)".into(),
            log2_x: true,
            y_range: Some((0.0, 100.0)),
            series,
        });
        files.push(write_file(out, &format!("retrieval-{task}.svg"), &plot)?);
    }

    let points: Vec<Series> = results
        .iter()
        .filter_map(|r| {
            Some(Series {
                label: r.label(),
                points: vec![(in_window_quality(r)?.0, r.overall_by_reach(false)?)],
            })
        })
        .collect();
    if let Some(unit) = results.iter().find_map(|r| Some(in_window_quality(r)?.1)) {
        let x_label = match spec.eval.loss {
            true => format!("held-out loss over the training length ({unit}; left is better)"),
            false => "exact match % within the window at the training length".into(),
        };
        let plot = line_plot(&LinePlot {
            title: "in-window quality against beyond-window retrieval".into(),
            x_label,
            y_label: "exact match % beyond the window".into(),
            log2_x: false,
            y_range: Some((0.0, 100.0)),
            series: points,
        });
        files.push(write_file(out, "tradeoff.svg", &plot)?);
    }
    if let Some(plot) = loss_plot(results) {
        files.push(write_file(out, "loss-by-position.svg", &plot)?);
    }
    md += "\n## Plots\n\n";
    for f in &files {
        let name = f.file_name().expect("a file").to_string_lossy();
        let _ = writeln!(md, "![{name}]({name})\n");
    }
    let mut all = vec![write_file(out, "report.md", &md)?];
    all.append(&mut files);
    Ok(all)
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
