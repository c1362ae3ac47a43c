//! A study's figures over its seeds: the median, the range (min to max) and, with three seeds or
//! more, a bootstrap interval of the median. Learning at this scale succeeds in some seeds and
//! not in others, so a figure from one seed says little; the median with its spread says what
//! the schedule does and how sure that is. The bootstrap draws from a fixed seed, so the same
//! results always give the same report (a resumed study's report is byte-identical).
use serde::Serialize;
use swax_data::Rng;

/// The confidence of the bootstrap interval.
pub const LEVEL: f64 = 0.9;
/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 2000;
/// The generator's seed for every interval.
pub const SEED: u64 = 43;
/// The fewest values that get an interval: with two, every resample's median is one of them or
/// their mean, which says no more than the range.
pub const MIN_FOR_INTERVAL: usize = 3;

/// One figure over the seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The bootstrap [`LEVEL`] interval of the median (percentile method), with at least
    /// [`MIN_FOR_INTERVAL`] values.
    pub interval: Option<(f64, f64)>,
    /// Every seed's value, in the order given.
    pub values: Vec<f64>,
}

impl Summary {
    /// The summary of `values` (one a seed); None when there are none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let sorted = sorted(values);
        Some(Summary {
            median: median_of_sorted(&sorted)?,
            min: *sorted.first()?,
            max: *sorted.last()?,
            interval: bootstrap_median(values, LEVEL, RESAMPLES, SEED),
            values: values.to_vec(),
        })
    }
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

fn median_of_sorted(v: &[f64]) -> Option<f64> {
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The median (the mean of the middle two for an even count); None for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    median_of_sorted(&sorted(values))
}

/// The percentile bootstrap interval of the median at `level`: `resamples` draws of as many
/// values with replacement, from the generator seeded `seed`; the interval's ends are the
/// medians at (1 - level) / 2 and (1 + level) / 2 of the sorted resampled medians. None with
/// fewer than [`MIN_FOR_INTERVAL`] values.
pub fn bootstrap_median(
    values: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    let n = values.len();
    if n < MIN_FOR_INTERVAL || resamples == 0 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut draw = vec![0.0; n];
    let mut medians: Vec<f64> = (0..resamples)
        .map(|_| {
            for d in draw.iter_mut() {
                *d = values[rng.below(n as u64) as usize];
            }
            median(&draw).expect("n > 0")
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some((at((1.0 - level) / 2.0), at((1.0 + level) / 2.0)))
}
