//! The stochastic window schedule, over many steps: the short window's frequency before the
//! anneal matches p_short, and every step from the anneal boundary on uses the long window.
use proptest::prelude::*;
use swax_hybrid::window::WindowSchedule;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn frequencies_and_anneal_boundary(
        p in 0.0f64..=1.0,
        anneal in 0.0f64..=0.5,
        total in 1000u64..6000,
        seed in any::<u64>(),
    ) {
        let s = WindowSchedule { w_short: 128, w_long: 2048, p_short: p, anneal_fraction: anneal, total_steps: total, seed };
        let start = s.anneal_start();
        prop_assert_eq!(start, total - (total as f64 * anneal).round() as u64);
        let short = (0..start).filter(|&i| s.window(i) == 128).count() as f64;
        let n = start as f64;
        // Binomial: within 5 standard deviations (plus one step of slack).
        let sd = (n * p * (1.0 - p)).sqrt();
        prop_assert!((short - n * p).abs() <= 5.0 * sd + 1.0, "{} short of {} at p {}", short, n, p);
        prop_assert!((start..total).all(|i| s.window(i) == 2048));
        prop_assert!((0..total).all(|i| [128, 2048].contains(&s.window(i))));
    }
}

#[test]
fn fixed_windows() {
    let s = |p| WindowSchedule {
        w_short: 8,
        w_long: 64,
        p_short: p,
        anneal_fraction: 0.0,
        total_steps: 500,
        seed: 1,
    };
    assert!((0..500).all(|i| s(1.0).window(i) == 8));
    assert!((0..500).all(|i| s(0.0).window(i) == 64));
}
