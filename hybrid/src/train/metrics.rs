//! The run's record: one JSON object per line in `metrics.jsonl` (training steps carry `loss`,
//! evaluations `val_loss`), and the loss curve drawn from it as `loss.svg` — plain SVG written
//! here, no plotting library or fonts needed.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub struct Metrics {
    path: PathBuf,
    /// None: records are dropped (a rank other than 0 of a data-parallel run).
    file: Option<File>,
}

impl Metrics {
    /// Opens `run/metrics.jsonl` for appending, first dropping any line past step `keep_until`
    /// (a resumed run rewrites the steps after its checkpoint).
    pub fn open(run: &Path, keep_until: Option<u64>) -> std::io::Result<Metrics> {
        let path = run.join("metrics.jsonl");
        let kept = keep_until.and_then(|until| Some((until, std::fs::read_to_string(&path).ok()?)));
        if let Some((until, text)) = kept {
            let kept: String = text
                .lines()
                .filter(|l| step_of(l).is_some_and(|s| s <= until))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&path, kept).map_err(at(&path))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(at(&path))?;
        Ok(Metrics {
            path,
            file: Some(file),
        })
    }

    /// A record that keeps nothing: only rank 0 of a run writes its metrics.
    pub fn discard(run: &Path) -> Metrics {
        Metrics {
            path: run.join("metrics.jsonl"),
            file: None,
        }
    }

    pub fn log(&mut self, record: Value) -> std::io::Result<()> {
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        writeln!(file, "{record}")
            .and_then(|()| file.flush())
            .map_err(at(&self.path))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The error with the file's path in its message (an I/O error names none: "No space left on
/// device" alone does not say which disk).
fn at(path: &Path) -> impl Fn(std::io::Error) -> std::io::Error + '_ {
    move |e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn step_of(line: &str) -> Option<u64> {
    serde_json::from_str::<Value>(line)
        .ok()?
        .get("step")?
        .as_u64()
}

/// The (step, value) pairs of `key` in a metrics file.
pub fn series(path: &Path, key: &str) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some((v.get("step")?.as_f64()?, v.get(key)?.as_f64()?))
        })
        .collect()
}

/// Draws the training loss (raw, faint, and smoothed) and the validation loss against steps.
pub fn plot(metrics: &Path, out: &Path, title: &str) -> std::io::Result<()> {
    let train = series(metrics, "loss");
    let val = series(metrics, "val_loss");
    let (w, h, pad) = (720.0, 420.0, 56.0);
    let all = train.iter().chain(&val);
    let (mut x1, mut y0, mut y1) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in all {
        if y.is_finite() {
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if !y0.is_finite() {
        (y0, y1) = (0.0, 1.0);
    }
    let span = (y1 - y0).max(1e-6);
    let px = |x: f64| pad + x / x1 * (w - 1.5 * pad);
    let py = |y: f64| h - pad - (y - y0) / span * (h - 1.7 * pad);
    let path = |pts: &[(f64, f64)]| -> String {
        pts.iter()
            .filter(|p| p.1.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut smooth = Vec::with_capacity(train.len());
    let mut ema: Option<f64> = None;
    for &(x, y) in &train {
        let e = ema.map_or(y, |e| 0.95 * e + 0.05 * y);
        ema = Some(e);
        smooth.push((x, e));
    }
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{pad}\" y=\"22\" font-size=\"15\">{title}</text>\n"
    );
    for i in 0..=4 {
        let y = y0 + span * i as f64 / 4.0;
        svg += &format!(
            "<line x1=\"{pad}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"6\" y=\"{:.1}\">{y:.3}</text>\n",
            w - pad / 2.0,
            py(y),
            py(y),
            py(y) + 4.0
        );
    }
    svg += &format!(
        "<text x=\"{:.1}\" y=\"{:.1}\">step {}</text>\n",
        w / 2.0,
        h - 12.0,
        x1 as u64
    );
    svg += &format!(
        "<polyline fill=\"none\" stroke=\"#9ecae1\" stroke-width=\"1\" points=\"{}\"/>\n",
        path(&train)
    );
    svg += &format!(
        "<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"2\" points=\"{}\"/>\n",
        path(&smooth)
    );
    if !val.is_empty() {
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"#d94801\" stroke-width=\"2\" points=\"{}\"/>\n",
            path(&val)
        );
        for &(x, y) in &val {
            svg += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#d94801\"/>\n",
                px(x),
                py(y)
            );
        }
    }
    svg += &format!(
        "<text x=\"{:.1}\" y=\"40\" fill=\"#08519c\">train loss (smoothed)</text>\n\
         <text x=\"{:.1}\" y=\"56\" fill=\"#d94801\">validation loss</text>\n</svg>\n",
        w - 200.0,
        w - 200.0
    );
    std::fs::write(out, svg).map_err(at(out))
}
