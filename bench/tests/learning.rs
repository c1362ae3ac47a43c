//! The learning benchmark's scoring, on hand-made metrics records: the recall curve of one
//! window, tokens to a level, loss spikes, each pattern's best learning rate; and the dates the
//! result lines carry.
use serde_json::{json, Value};
use swax_bench::learning::{best_per_pattern, curve, spike, tokens_to, Outcome, Point};
use swax_bench::record::civil_date;

fn records(accuracies: &[(u64, f64)], losses: &[f64]) -> Vec<Value> {
    let mut r: Vec<Value> = losses
        .iter()
        .enumerate()
        .map(|(i, l)| json!({"step": i + 1, "loss": l, "window": 64}))
        .collect();
    for &(tokens, acc) in accuracies {
        r.push(json!({"step": 1, "val_loss": 1.0, "window": 64}));
        r.push(json!({"step": 1, "tokens": tokens, "window": 64, "recall": acc}));
        r.push(json!({"step": 1, "tokens": tokens, "window": 16, "recall": 0.0}));
    }
    r
}

#[test]
fn the_curve_is_the_recall_at_one_window_against_tokens() {
    let r = records(&[(100, 0.2), (200, 0.6), (300, 0.95)], &[]);
    let c = curve(&r, 64);
    assert_eq!(
        c,
        vec![
            Point {
                tokens: 100,
                accuracy: 0.2
            },
            Point {
                tokens: 200,
                accuracy: 0.6
            },
            Point {
                tokens: 300,
                accuracy: 0.95
            }
        ]
    );
    assert_eq!(tokens_to(&c, 0.5), Some(200));
    assert_eq!(tokens_to(&c, 0.9), Some(300));
    assert_eq!(tokens_to(&c, 0.99), None);
    assert!(curve(&r, 16).iter().all(|p| p.accuracy == 0.0));
}

#[test]
fn a_falling_loss_has_no_spike_and_a_doubling_one_has() {
    let falling: Vec<f64> = (0..200).map(|i| 5.0 / (1.0 + i as f64 / 10.0)).collect();
    assert_eq!(spike(&falling, 25), 0.0);
    let mut spiked = falling.clone();
    let low = spiked[150];
    for x in &mut spiked[150..200] {
        *x = 2.0 * low;
    }
    let s = spike(&spiked, 25);
    assert!((0.8..1.0).contains(&s), "{s}");
    // One noisy batch barely moves the smoothed loss.
    let mut noisy = falling.clone();
    noisy[150] *= 2.0;
    assert!(spike(&noisy, 25) < 0.1);
    assert_eq!(spike(&[1.0, f64::NAN], 25), f64::INFINITY);
}

#[test]
fn each_pattern_is_ranked_at_its_best_learning_rate() {
    let fast = records(&[(100, 0.5), (200, 0.95)], &[2.0, 1.0]);
    let slow = records(&[(100, 0.2), (200, 0.5), (300, 0.92)], &[2.0, 1.0]);
    let never = records(&[(100, 0.3), (300, 0.7)], &[2.0, 1.0]);
    let outcomes = vec![
        Outcome::score("S", 1e-3, &slow, 64),
        Outcome::score("S", 3e-3, &fast, 64),
        Outcome::score("M", 1e-3, &never, 64),
        Outcome::score("M", 3e-3, &slow, 64),
    ];
    let best = best_per_pattern(&outcomes);
    assert_eq!(best.len(), 2);
    assert_eq!((best[0].pattern.as_str(), best[0].lr), ("S", 3e-3));
    assert_eq!((best[1].pattern.as_str(), best[1].lr), ("M", 3e-3));
    assert_eq!(best[1].tokens_to_90, Some(300));
    assert_eq!(best[0].final_accuracy, 0.95);
}

#[test]
fn civil_dates() {
    assert_eq!(civil_date(0), "1970-01-01");
    assert_eq!(civil_date(11_016), "2000-02-29");
    assert_eq!(civil_date(20_788), "2026-12-01");
}
