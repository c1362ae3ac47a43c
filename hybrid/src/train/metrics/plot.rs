//! `loss.svg`, drawn from `metrics.jsonl` with plotters' SVG backend: the training loss (raw and
//! smoothed) and the validation loss at each window against the step, and below it the exact
//! recall of the held-out probes within the window and beyond it, the figure that says whether
//! the recurrent layers learned to remember. Text stays SVG text, so no font is read.
use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use serde_json::Value;

/// What the plot draws, read from the run's records.
#[derive(Debug, Default)]
struct Curves {
    /// (step, training loss).
    train: Vec<(f64, f64)>,
    /// Per window: (step, validation loss).
    val: BTreeMap<u64, Vec<(f64, f64)>>,
    /// Per window: (step, recall within the window %, recall beyond it %).
    recall: BTreeMap<u64, Vec<(f64, f64, f64)>>,
}

impl Curves {
    fn read(metrics: &Path) -> Curves {
        let text = std::fs::read_to_string(metrics).unwrap_or_default();
        let mut c = Curves::default();
        for v in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            let num = |k: &str| v.get(k).and_then(Value::as_f64);
            let (Some(step), window) = (num("step"), v.get("window").and_then(Value::as_u64))
            else {
                continue;
            };
            if let (Some(loss), None) = (num("loss"), num("val_loss")) {
                c.train.push((step, loss));
            }
            if let (Some(w), Some(loss)) = (window, num("val_loss")) {
                c.val.entry(w).or_default().push((step, loss));
            }
            if let (Some(w), Some(near), Some(far)) =
                (window, num("recall_near"), num("recall_far"))
            {
                let row = (step, 100.0 * near, 100.0 * far);
                c.recall.entry(w).or_default().push(row);
            }
        }
        c
    }

    fn last_step(&self) -> f64 {
        let steps = self.train.iter().map(|p| p.0);
        let steps = steps.chain(self.val.values().flatten().map(|p| p.0));
        let steps = steps.chain(self.recall.values().flatten().map(|p| p.0));
        steps.fold(1.0, f64::max)
    }

    /// The range of every finite loss, widened a little so no point sits on the frame.
    fn loss_range(&self) -> std::ops::Range<f64> {
        let losses = self.train.iter().chain(self.val.values().flatten());
        let (lo, hi) = losses
            .map(|p| p.1)
            .filter(|y| y.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| {
                (lo.min(y), hi.max(y))
            });
        if !lo.is_finite() {
            return 0.0..1.0;
        }
        let pad = ((hi - lo) * 0.05).max(1e-3);
        (lo - pad).max(0.0)..hi + pad
    }
}

/// The training loss's colours (raw, smoothed); the windows' colours, in order of size.
const TRAIN_RAW: RGBColor = RGBColor(0x9e, 0xca, 0xe1);
const TRAIN_SMOOTH: RGBColor = RGBColor(0x08, 0x51, 0x9c);
const WINDOWS: [RGBColor; 5] = [
    RGBColor(0xd9, 0x48, 0x01),
    RGBColor(0x23, 0x8b, 0x45),
    RGBColor(0x6a, 0x51, 0xa3),
    RGBColor(0xce, 0x12, 0x56),
    RGBColor(0x52, 0x52, 0x52),
];

const SIZE: (u32, u32) = (800, 640);

/// Draws `metrics`' curves into `out` (written whole or not at all, like the run's other files),
/// under `title`.
pub fn plot(metrics: &Path, out: &Path, title: &str) -> Result<(), Box<dyn Error>> {
    let curves = Curves::read(metrics);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 16))?;
        let mut windows: Vec<u64> = curves
            .val
            .keys()
            .chain(curves.recall.keys())
            .copied()
            .collect();
        windows.sort_unstable();
        windows.dedup();
        let colour = |w: &u64| WINDOWS[windows.binary_search(w).unwrap_or(0) % WINDOWS.len()];
        match curves.recall.is_empty() {
            true => loss_panel(&root, &curves, &colour)?,
            false => {
                let (top, bottom) = root.split_vertically(SIZE.1 * 11 / 20);
                loss_panel(&top, &curves, &colour)?;
                recall_panel(&bottom, &curves, &colour)?;
            }
        }
        root.present()?;
    }
    swax_nn::checkpoint::write_atomic(out, svg.as_bytes())?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A short horizontal stroke of `style` for a legend entry.
fn swatch(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style)
}

fn loss_panel(
    area: &Area,
    curves: &Curves,
    colour: &dyn Fn(&u64) -> RGBColor,
) -> Result<(), Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..curves.last_step(), curves.loss_range())?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss (nats per token)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .max_light_lines(0)
        .draw()?;
    let finite = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        pts.iter().copied().filter(|p| p.1.is_finite()).collect()
    };
    chart
        .draw_series(LineSeries::new(finite(&curves.train), TRAIN_RAW))?
        .label("training loss")
        .legend(swatch(TRAIN_RAW.into()));
    let mut ema: Option<f64> = None;
    let smooth = finite(&curves.train).into_iter().map(|(x, y)| {
        let e = ema.map_or(y, |e| 0.95 * e + 0.05 * y);
        ema = Some(e);
        (x, e)
    });
    let thick = TRAIN_SMOOTH.stroke_width(2);
    chart
        .draw_series(LineSeries::new(smooth.collect::<Vec<_>>(), thick))?
        .label("training loss, smoothed")
        .legend(swatch(thick));
    for (w, points) in &curves.val {
        let style = colour(w).stroke_width(2);
        chart
            .draw_series(LineSeries::new(finite(points), style).point_size(3))?
            .label(format!("validation loss, window {w}"))
            .legend(swatch(style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    Ok(())
}

fn recall_panel(
    area: &Area,
    curves: &Curves,
    colour: &dyn Fn(&u64) -> RGBColor,
) -> Result<(), Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..curves.last_step(), 0.0..100.0)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("exact recall (%)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .max_light_lines(0)
        .draw()?;
    for (w, rows) in &curves.recall {
        let solid = colour(w).stroke_width(2);
        let within: Vec<(f64, f64)> = rows.iter().map(|r| (r.0, r.1)).collect();
        chart
            .draw_series(LineSeries::new(within, solid).point_size(3))?
            .label(format!("recall within window {w}"))
            .legend(swatch(solid));
        // Beyond the window dashed: only a recurrent state can carry those answers.
        let beyond = rows.iter().map(|r| (r.0, r.2));
        chart
            .draw_series(DashedLineSeries::new(beyond, 6, 4, solid))?
            .label(format!("recall beyond window {w}"))
            .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 20, y)], 6, 4, solid));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    Ok(())
}
