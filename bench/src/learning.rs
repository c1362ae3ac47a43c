//! Scoring the learning benchmark from what its runs logged: the recall accuracy on held-out
//! probes against the tokens seen, how many tokens a pattern needs to reach a level, and how far
//! its training loss ever rose above its best so far (a spike). Read from `metrics.jsonl` alone,
//! so a finished benchmark can be scored again without its models.
use serde::Serialize;
use serde_json::Value;

/// Held-out recall after `tokens` training tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point {
    pub tokens: u64,
    pub accuracy: f64,
}

/// The recall curve at `window` from a run's metrics records (the trainer logs one record per
/// validation and window, with `tokens` and `recall`).
pub fn curve(records: &[Value], window: usize) -> Vec<Point> {
    records
        .iter()
        .filter(|r| r.get("window").and_then(Value::as_u64) == Some(window as u64))
        .filter_map(|r| {
            Some(Point {
                tokens: r.get("tokens")?.as_u64()?,
                accuracy: r.get("recall")?.as_f64()?,
            })
        })
        .collect()
}

/// The first point's tokens at which the accuracy reaches `level`.
pub fn tokens_to(curve: &[Point], level: f64) -> Option<u64> {
    curve.iter().find(|p| p.accuracy >= level).map(|p| p.tokens)
}

/// The training losses `(step, loss)` of a run's metrics records, in order.
pub fn losses(records: &[Value]) -> Vec<f64> {
    records
        .iter()
        .filter(|r| r.get("val_loss").is_none())
        .filter_map(|r| r.get("loss")?.as_f64())
        .collect()
}

/// The worst spike: the largest ratio of the smoothed loss (an exponential average over about
/// `span` steps, which single noisy batches do not move far) to its lowest value before, minus 1.
/// A steadily falling loss scores 0; one that doubles for a while after its best scores about 1.
/// A non-finite loss scores infinity.
pub fn spike(losses: &[f64], span: usize) -> f64 {
    let alpha = 2.0 / (span.max(1) as f64 + 1.0);
    let (mut ema, mut best, mut worst) = (None::<f64>, f64::INFINITY, 0.0f64);
    for &x in losses {
        if !x.is_finite() {
            return f64::INFINITY;
        }
        let e = ema.map_or(x, |e| e + alpha * (x - e));
        ema = Some(e);
        if best.is_finite() && best > 0.0 {
            worst = worst.max(e / best - 1.0);
        }
        best = best.min(e);
    }
    worst
}

/// One run of the benchmark, scored.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub pattern: String,
    pub lr: f64,
    pub curve: Vec<Point>,
    pub final_accuracy: f64,
    pub tokens_to_50: Option<u64>,
    pub tokens_to_90: Option<u64>,
    pub spike: f64,
}

impl Outcome {
    pub fn score(pattern: &str, lr: f64, records: &[Value], window: usize) -> Outcome {
        let curve = curve(records, window);
        Outcome {
            pattern: pattern.into(),
            lr,
            final_accuracy: curve.last().map_or(0.0, |p| p.accuracy),
            tokens_to_50: tokens_to(&curve, 0.5),
            tokens_to_90: tokens_to(&curve, 0.9),
            spike: spike(&losses(records), 25),
            curve,
        }
    }

    /// Better is: reaching 90% in fewer tokens, then a higher final accuracy.
    fn rank(&self) -> (u64, i64) {
        (
            self.tokens_to_90.unwrap_or(u64::MAX),
            -(self.final_accuracy * 1e6) as i64,
        )
    }
}

/// Each pattern's best learning rate (Zoology reports each model at its best), in the order the
/// patterns first appear.
pub fn best_per_pattern(outcomes: &[Outcome]) -> Vec<&Outcome> {
    let mut best: Vec<&Outcome> = Vec::new();
    for o in outcomes {
        match best.iter_mut().find(|b| b.pattern == o.pattern) {
            Some(b) if o.rank() < b.rank() => *b = o,
            Some(_) => {}
            None => best.push(o),
        }
    }
    best
}
