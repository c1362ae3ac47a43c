//! The stochastic window schedule (SWAX, §4): each step attends over `w_short` tokens with
//! probability `p_short`, else `w_long`; the last `anneal_fraction` of the steps use `w_long`
//! only. A fixed window is `p_short` = 0 (always long) or 1 with no anneal (always short).
//!
//! Each step's draw comes from its own stream `(seed, step)`, not from a generator advanced step
//! after step: a resumed run draws exactly the windows the uninterrupted one would have.
use swax_data::Rng;

const WINDOW_STREAM: u64 = 0x5749_4e44_5357; // "WINDSW"

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSchedule {
    pub w_short: usize,
    pub w_long: usize,
    pub p_short: f64,
    pub anneal_fraction: f64,
    pub total_steps: u64,
    pub seed: u64,
}

impl WindowSchedule {
    /// The first step of the anneal (every step from here on uses `w_long`).
    pub fn anneal_start(&self) -> u64 {
        let anneal = (self.total_steps as f64 * self.anneal_fraction).round() as u64;
        self.total_steps - anneal.min(self.total_steps)
    }

    /// The windows some step trains at, short first: the ones a run is evaluated at.
    pub fn trained_windows(&self) -> Vec<usize> {
        let short = self.p_short > 0.0 && self.anneal_start() > 0;
        let long = self.p_short < 1.0 || self.anneal_start() < self.total_steps;
        let mut ws: Vec<usize> = [(short, self.w_short), (long, self.w_long)]
            .into_iter()
            .filter_map(|(used, w)| used.then_some(w))
            .collect();
        ws.dedup();
        ws
    }

    /// The window of step `step` (counting from 0).
    pub fn window(&self, step: u64) -> usize {
        if step >= self.anneal_start() {
            return self.w_long;
        }
        let u = Rng::derive(self.seed, &[WINDOW_STREAM, step]).unit();
        if u < self.p_short {
            self.w_short
        } else {
            self.w_long
        }
    }
}
