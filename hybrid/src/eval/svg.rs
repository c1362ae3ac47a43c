//! Plain SVG charts for the evaluation reports (as the trainer's loss plot: no plotting library
//! or fonts needed, any browser shows them): lines against a linear or log2 x axis, and a
//! heatmap of accuracies (the needle plot, length by depth). A line may carry error bars (a
//! study's range over its seeds).
use std::fmt::Write;

/// One line of a [`LinePlot`]: its legend and its (x, y) points.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// An error bar at each point, from y low to y high (empty: none).
    pub errors: Vec<(f64, f64)>,
}

#[derive(Clone, Debug)]
pub struct LinePlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Lengths double from one to the next: equal steps read better on a log2 axis.
    pub log2_x: bool,
    /// Fixed y bounds (accuracy: 0..100), else the data's.
    pub y_range: Option<(f64, f64)>,
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 8] = [
    "#08519c", "#d94801", "#238b45", "#6a51a3", "#cb181d", "#525252", "#e7298a", "#66a61e",
];

fn header(out: &mut String, w: f64, h: f64, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"22\" font-size=\"15\">{}</text>\n",
        escape(title)
    );
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A tick label without needless decimals.
fn tick(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e9 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

pub fn line_plot(p: &LinePlot) -> String {
    let fx = |x: f64| if p.log2_x { x.max(1e-9).log2() } else { x };
    let finite = p
        .series
        .iter()
        .flat_map(|s| &s.points)
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut xs: Vec<f64> = Vec::new();
    for &(x, y) in finite {
        (x0, x1) = (x0.min(fx(x)), x1.max(fx(x)));
        (y0, y1) = (y0.min(y), y1.max(y));
        xs.push(x);
    }
    // The bars stay in view.
    for &(lo, hi) in p.series.iter().flat_map(|s| &s.errors) {
        if lo.is_finite() && hi.is_finite() {
            (y0, y1) = (y0.min(lo), y1.max(hi));
        }
    }
    if xs.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if let Some(r) = p.y_range {
        (y0, y1) = r;
    }
    let (xspan, yspan) = ((x1 - x0).max(1e-9), (y1 - y0).max(1e-9));
    let px = |x: f64| LEFT + (fx(x) - x0) / xspan * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y - y0) / yspan * (H - TOP - BOTTOM);
    let mut s = String::new();
    header(&mut s, W, H, &p.title);
    for i in 0..=4 {
        let y = y0 + yspan * i as f64 / 4.0;
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
            W - RIGHT,
            py(y),
            LEFT - 6.0,
            py(y) + 4.0,
            tick(y)
        );
    }
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    // Label every x of the data when few (lengths), else five even ticks.
    let ticks: Vec<f64> = if xs.len() <= 12 {
        xs
    } else {
        (0..=4)
            .map(|i| x0 + xspan * i as f64 / 4.0)
            .map(|v| if p.log2_x { v.exp2() } else { v })
            .collect()
    };
    for x in ticks {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            px(x),
            H - BOTTOM + 16.0,
            tick(x)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {3:.1})\" \
         text-anchor=\"middle\">{}</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0,
        escape(&p.x_label),
        (TOP + H - BOTTOM) / 2.0,
        escape(&p.y_label)
    );
    for (i, series) in p.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = series
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            pts.join(" ")
        );
        for (&(x, y), &(lo, hi)) in series.points.iter().zip(&series.errors) {
            if [x, y, lo, hi].iter().all(|v| v.is_finite()) {
                let (cx, top, bottom) = (px(x), py(hi), py(lo));
                let _ = writeln!(
                    s,
                    "<path d=\"M{0:.1},{top:.1}V{bottom:.1}M{1:.1},{top:.1}H{2:.1}M{1:.1},\
                     {bottom:.1}H{2:.1}\" stroke=\"{color}\" stroke-width=\"1\" fill=\"none\"/>",
                    cx,
                    cx - 4.0,
                    cx + 4.0
                );
            }
        }
        if pts.len() <= 32 {
            for pt in &pts {
                let (cx, cy) = pt.split_once(',').expect("x,y");
                let _ = writeln!(
                    s,
                    "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"3\" fill=\"{color}\"/>"
                );
            }
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{}</text>",
            W - RIGHT + 12.0,
            TOP + 10.0 + 16.0 * i as f64,
            escape(&series.label)
        );
    }
    s + "</svg>\n"
}

/// Accuracies in percent (`None`: not run), `values[row][col]`, white at 0 to dark green at 100.
pub fn heatmap(
    title: &str,
    row_label: &str,
    rows: &[String],
    col_label: &str,
    cols: &[String],
    values: &[Vec<Option<f64>>],
) -> String {
    let cell = (56.0f64, 30.0f64);
    let (left, top) = (LEFT + 20.0, TOP + 10.0);
    let w = left + cell.0 * cols.len() as f64 + 20.0;
    let h = top + cell.1 * rows.len() as f64 + BOTTOM;
    let mut s = String::new();
    header(&mut s, w.max(320.0), h, title);
    for (r, name) in rows.iter().enumerate() {
        let y = top + cell.1 * r as f64;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            y + cell.1 / 2.0 + 4.0,
            escape(name)
        );
        for (c, v) in values.get(r).into_iter().flatten().enumerate() {
            let x = left + cell.0 * c as f64;
            let (fill, text) = match v {
                Some(v) => {
                    // From white to #00441b as accuracy rises.
                    let t = (v / 100.0).clamp(0.0, 1.0);
                    let mix = |hi: f64| (255.0 + (hi - 255.0) * t).round() as u8;
                    (
                        format!("rgb({},{},{})", mix(0.0), mix(68.0), mix(27.0)),
                        format!("{v:.0}"),
                    )
                }
                None => ("#eee".to_string(), "-".to_string()),
            };
            let ink = if v.is_some_and(|v| v > 55.0) {
                "white"
            } else {
                "black"
            };
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" \
                 stroke=\"white\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                 fill=\"{ink}\">{text}</text>",
                cell.0,
                cell.1,
                x + cell.0 / 2.0,
                y + cell.1 / 2.0 + 4.0
            );
        }
    }
    let bottom = top + cell.1 * rows.len() as f64;
    for (c, name) in cols.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            left + cell.0 * (c as f64 + 0.5),
            bottom + 16.0,
            escape(name)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {3:.1})\" \
         text-anchor=\"middle\">{}</text>",
        left + cell.0 * cols.len() as f64 / 2.0,
        bottom + 36.0,
        escape(col_label),
        top + cell.1 * rows.len() as f64 / 2.0,
        escape(row_label)
    );
    s + "</svg>\n"
}
