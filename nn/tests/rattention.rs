//! RAttention: the fused node against the reference (values and the gradients of q, k, v and
//! both norm scales; f64 and f32; windows of 1, inside and beyond T; grouped queries; chunk sizes
//! that do and do not divide T; T >= 1000), the reference against finite differences, and bad
//! input.
mod common;

use common::{check_fused, randn};
use proptest::prelude::*;
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_nn::mixers::rattention::{node, reference, Config, Rope};
use swax_tensor::{Result, Tensor, CAUSAL};

type Form = fn(&Tape, &Tensor, &Tensor, &Tensor, &Tensor, &Tensor, &Config) -> Result<Tensor>;

/// q, k, v and the two norm scales (around 1, so a swapped or missing scale shows).
fn inputs(b: usize, t: usize, h: usize, hkv: usize, d: usize, seed: u64) -> Vec<Tensor> {
    let scale = |s| randn(&[d], 0.3, s).add_scalar(1.0).unwrap();
    vec![
        randn(&[b, t, h, d], 1.0, seed),
        randn(&[b, t, hkv, d], 1.0, seed + 1),
        randn(&[b, t, hkv, d], 1.0, seed + 2),
        scale(seed + 3),
        scale(seed + 4),
    ]
}

fn mixer(f: Form, cfg: Config) -> impl Fn(&Tape, &[Tensor]) -> Result<Tensor> {
    move |tape, x| f(tape, &x[0], &x[1], &x[2], &x[3], &x[4], &cfg)
}

fn against_reference(shape: (usize, usize, usize, usize, usize), cfg: Config, seed: u64) {
    let (b, t, h, hkv, d) = shape;
    check_fused(
        &mixer(node::rattention, cfg),
        &mixer(reference::rattention, cfg),
        &inputs(b, t, h, hkv, d, seed),
        seed,
    );
}

fn config(window: usize, chunk: usize) -> Config {
    Config {
        chunk,
        ..Config::new(window)
    }
}

#[test]
fn single_step() {
    against_reference((2, 1, 4, 1, 64), config(1, 64), 1);
    against_reference((1, 1, 2, 2, 128), config(3, 1), 2);
}

#[test]
fn short_sequences_all_windows() {
    for (i, window) in [1, 3, 64, 128, CAUSAL].into_iter().enumerate() {
        against_reference((2, 7, 4, 1, 64), config(window, 3), 10 + i as u64);
        against_reference((1, 64, 2, 2, 128), config(window, 16), 20 + i as u64);
    }
}

#[test]
fn chunks_grouped_queries_and_options() {
    against_reference((1, 130, 4, 1, 64), config(64, 64), 30);
    against_reference((2, 65, 4, 4, 64), config(3, 7), 31);
    let plain = Config {
        scale: Some(0.3),
        rope: None,
        ..config(5, 10)
    };
    against_reference((1, 50, 4, 2, 16), plain, 32);
    let offset = Config {
        rope: Some(Rope {
            offset: 100,
            theta: 500.0,
        }),
        ..config(8, 4)
    };
    against_reference((1, 40, 2, 1, 8), offset, 33);
}

/// A case the property test below once drew (head dim 2): the fused node in f32 differs from the
/// f64 reference by 0.7% on one element of v's gradient, an element small against the rest of
/// that gradient, while the f64 fused node matches to 1e-9. Kept as a fixed case of the f32
/// tolerance.
#[test]
fn small_gradient_elements_at_head_dim_two() {
    against_reference((1, 89, 2, 2, 2), config(40, 24), 689);
}

#[test]
fn long_sequences() {
    against_reference((1, 1000, 1, 1, 64), config(128, 64), 40);
    against_reference((1, 1100, 4, 1, 16), config(3, 50), 41);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn fused_matches_reference_on_odd_shapes(
        b in 1usize..=2, t in 1usize..=140, hkv in 1usize..=2, group in 1usize..=3,
        half_d in 1usize..=5, window in 1usize..=150, chunk in 1usize..=70, seed in 0u64..1000,
    ) {
        // RoPE needs an even head dim.
        against_reference((b, t, hkv * group, hkv, 2 * half_d), config(window, chunk), seed);
    }

    #[test]
    fn reference_gradients_match_finite_differences(
        t in 1usize..=7, hkv in 1usize..=2, group in 1usize..=2, half_d in 1usize..=2,
        window in 1usize..=8, seed in 0u64..1000,
    ) {
        let x = inputs(1, t, hkv * group, hkv, 2 * half_d, seed);
        if let Err(e) = check(mixer(reference::rattention, Config::new(window)), &x, Tolerance::default(), seed) {
            panic!("gradient check failed: {e}");
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let tape = Tape::new();
    let ok = inputs(1, 5, 4, 2, 8, 0);
    let with = |i: usize, x: Tensor| {
        let mut v = ok.clone();
        v[i] = x;
        v
    };
    let cases: Vec<(Vec<Tensor>, Config)> = vec![
        (ok.clone(), config(0, 4)),
        (inputs(1, 5, 3, 2, 8, 0), config(2, 4)),
        (with(2, randn(&[1, 5, 2, 6], 1.0, 0)), config(2, 4)),
        (with(0, randn(&[1, 4, 4, 8], 1.0, 0)), config(2, 4)),
        (with(3, randn(&[4], 1.0, 0)), config(2, 4)),
        (with(4, randn(&[2, 8], 1.0, 0)), config(2, 4)),
    ];
    for (x, cfg) in cases {
        assert!(mixer(node::rattention, cfg)(&tape, &x).is_err());
        assert!(mixer(reference::rattention, cfg)(&tape, &x).is_err());
    }
    assert!(mixer(node::rattention, config(2, 0))(&tape, &ok).is_err());
}
