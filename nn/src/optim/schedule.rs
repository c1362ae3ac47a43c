//! Learning-rate schedules: linear warmup, then cosine decay to `min_ratio · peak`; or
//! warmup-stable-decay (WSD: hold the peak, then decay linearly over the last `decay_fraction`
//! of the steps).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    Cosine {
        peak: f64,
        warmup: u64,
        total: u64,
        min_ratio: f64,
    },
    Wsd {
        peak: f64,
        warmup: u64,
        total: u64,
        decay_fraction: f64,
        min_ratio: f64,
    },
}

impl Schedule {
    /// The learning rate of step `step` (counting from 0).
    pub fn lr(&self, step: u64) -> f64 {
        match *self {
            Schedule::Cosine {
                peak,
                warmup,
                total,
                min_ratio,
            } => {
                if step < warmup {
                    return peak * (step + 1) as f64 / warmup as f64;
                }
                let span = total.saturating_sub(warmup).max(1) as f64;
                let x = ((step - warmup) as f64 / span).min(1.0);
                let cos = 0.5 * (1.0 + (std::f64::consts::PI * x).cos());
                peak * (min_ratio + (1.0 - min_ratio) * cos)
            }
            Schedule::Wsd {
                peak,
                warmup,
                total,
                decay_fraction,
                min_ratio,
            } => {
                if step < warmup {
                    return peak * (step + 1) as f64 / warmup as f64;
                }
                let decay_steps = (total as f64 * decay_fraction).round() as u64;
                let decay_start = total.saturating_sub(decay_steps).max(warmup);
                if step < decay_start {
                    return peak;
                }
                let x = ((step - decay_start) as f64 / decay_steps.max(1) as f64).min(1.0);
                peak * (1.0 - (1.0 - min_ratio) * x)
            }
        }
    }
}
