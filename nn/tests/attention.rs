//! Sliding-window attention: the fused node against the reference (values and the gradients
//! of q, k, v; f64 and f32; windows of 1, inside and beyond T; grouped queries; T off the tile
//! size and T >= 1000), the reference against finite differences, and bad input.
mod common;

use common::{check_fused, randn};
use proptest::prelude::*;
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_nn::mixers::attention::{node, reference};
use swax_tensor::{Result, Tensor, CAUSAL};

/// q `[B, T, H, D]`, k and v `[B, T, Hkv, D]`.
fn qkv(b: usize, t: usize, h: usize, hkv: usize, d: usize, seed: u64) -> Vec<Tensor> {
    vec![
        randn(&[b, t, h, d], 1.0, seed),
        randn(&[b, t, hkv, d], 1.0, seed + 1),
        randn(&[b, t, hkv, d], 1.0, seed + 2),
    ]
}

type Form = fn(&Tape, &Tensor, &Tensor, &Tensor, usize, Option<f64>) -> Result<Tensor>;

fn against_reference(shape: (usize, usize, usize, usize, usize), window: usize, seed: u64) {
    let (b, t, h, hkv, d) = shape;
    let mixer =
        |f: Form| move |tape: &Tape, x: &[Tensor]| f(tape, &x[0], &x[1], &x[2], window, None);
    check_fused(
        &mixer(node::swa),
        &mixer(reference::swa),
        &qkv(b, t, h, hkv, d, seed),
        seed,
    );
}

#[test]
fn single_step() {
    against_reference((2, 1, 4, 1, 64), 1, 1);
    against_reference((1, 1, 2, 2, 128), 3, 2);
}

#[test]
fn short_sequences_all_windows() {
    for (i, window) in [1, 3, 64, 128, CAUSAL].into_iter().enumerate() {
        against_reference((2, 7, 4, 1, 64), window, 10 + i as u64);
        against_reference((1, 64, 2, 2, 128), window, 20 + i as u64);
    }
}

#[test]
fn tile_boundaries_and_grouped_queries() {
    against_reference((1, 130, 4, 1, 64), 64, 30);
    against_reference((2, 65, 4, 4, 64), 3, 31);
    against_reference((1, 200, 8, 2, 128), 128, 32);
}

#[test]
fn long_sequences() {
    against_reference((1, 1000, 1, 1, 64), 128, 40);
    against_reference((1, 1100, 4, 1, 16), 1500, 41);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn fused_matches_reference_on_odd_shapes(
        b in 1usize..=2, t in 1usize..=140, hkv in 1usize..=2, group in 1usize..=3,
        d in 1usize..=9, window in 1usize..=150, seed in 0u64..1000,
    ) {
        against_reference((b, t, hkv * group, hkv, d), window, seed);
    }

    #[test]
    fn reference_gradients_match_finite_differences(
        t in 1usize..=6, hkv in 1usize..=2, group in 1usize..=2, d in 1usize..=4,
        window in 1usize..=7, scale in prop::option::of(0.2f64..2.0), seed in 0u64..1000,
    ) {
        let inputs = qkv(1, t, hkv * group, hkv, d, seed);
        let f = |tape: &Tape, x: &[Tensor]| reference::swa(tape, &x[0], &x[1], &x[2], window, scale);
        if let Err(e) = check(f, &inputs, Tolerance::default(), seed) {
            panic!("gradient check failed: {e}");
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let tape = Tape::new();
    let ok = qkv(1, 5, 4, 2, 8, 0);
    let cases: Vec<(Vec<Tensor>, usize)> = vec![
        (ok.clone(), 0),
        (qkv(1, 5, 3, 2, 8, 0), 4),
        (
            vec![ok[0].clone(), ok[1].clone(), randn(&[1, 5, 2, 4], 1.0, 0)],
            4,
        ),
        (
            vec![
                ok[0].clone(),
                randn(&[1, 4, 2, 8], 1.0, 0),
                randn(&[1, 4, 2, 8], 1.0, 0),
            ],
            4,
        ),
        (
            vec![randn(&[5, 4, 8], 1.0, 0), ok[1].clone(), ok[2].clone()],
            4,
        ),
    ];
    for (x, window) in cases {
        assert!(node::swa(&tape, &x[0], &x[1], &x[2], window, None).is_err());
        assert!(reference::swa(&tape, &x[0], &x[1], &x[2], window, None).is_err());
    }
}
