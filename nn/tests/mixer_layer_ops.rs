//! The recurrent mixer layers' own ops, the gates and the output norms: every op's gradient
//! against central differences in f64 on random shapes; the soft cap stays within its cap, the
//! log-decay is never positive, the head norm normalizes each head, the fused gated head norm
//! matches the ops it replaces; bad shapes are errors, and so are the gated head norm op's
//! operands of another dtype.
use proptest::prelude::*;
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_nn::layers::gates::{log_decay, soft_cap};
use swax_nn::layers::output_norm::{
    gated_head_layer_norm, gated_head_norm, gated_head_norm_backward, gated_rms_norm,
    head_layer_norm, GatedHeadNormBackward, GatedHeadNormIn,
};
use swax_tensor::{DType, Device, Result, Tensor};

fn randn(dims: &[usize], seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), 1.0, seed, DType::F64, Device::Cpu).unwrap()
}

fn grad(f: impl Fn(&Tape, &[Tensor]) -> Result<Tensor>, inputs: &[Tensor], seed: u64) {
    if let Err(e) = check(f, inputs, Tolerance::default(), seed) {
        panic!("gradient check failed: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn soft_cap_gradients(dims in prop::collection::vec(1usize..5, 1..4), cap in 0.5f64..20.0, seed in 0u64..1000) {
        let x = randn(&dims, seed).scale(10.0).unwrap();
        grad(|tape, x| soft_cap(tape, &x[0], cap), &[x], seed);
    }

    #[test]
    fn log_decay_gradients(b in 1usize..3, t in 1usize..5, h in 1usize..4, seed in 0u64..1000) {
        let x = [randn(&[b, t, h], seed), randn(&[h], seed + 1), randn(&[h], seed + 2)];
        grad(|tape, x| log_decay(tape, &x[0], &x[1], &x[2]), &x, seed);
    }

    #[test]
    fn gated_rms_norm_gradients(rows in 1usize..4, d in 1usize..6, seed in 0u64..1000) {
        let x = [randn(&[rows, 2, d], seed), randn(&[rows, 2, d], seed + 1), randn(&[d], seed + 2)];
        grad(|tape, x| gated_rms_norm(tape, &x[0], &x[1], &x[2], 1e-5), &x, seed);
    }

    #[test]
    fn head_layer_norm_gradients(
        b in 1usize..3, h in 1usize..4, d in 2usize..6, with_bias in any::<bool>(), seed in 0u64..1000,
    ) {
        let mut x = vec![randn(&[b, 3, h, d], seed), randn(&[h, d], seed + 1)];
        if with_bias {
            x.push(randn(&[h, d], seed + 2));
        }
        grad(|tape, x| head_layer_norm(tape, &x[0], &x[1], x.get(2), 1e-5), &x, seed);
    }

    #[test]
    fn gated_head_layer_norm_gradients(b in 1usize..3, h in 1usize..4, d in 2usize..6, seed in 0u64..1000) {
        let x = [randn(&[b, 3, h, d], seed), randn(&[b, 3, h, d], seed + 1), randn(&[h, d], seed + 2)];
        grad(|tape, x| gated_head_layer_norm(tape, &x[0], &x[1], &x[2], 1e-5), &x, seed);
    }
}

/// The fused node against the ops it replaces, LayerNorm · weight · sigmoid(o) from the tape's
/// own ops, in f64.
#[test]
fn gated_head_layer_norm_matches_the_composed_ops() {
    let (x, o, w) = (
        randn(&[2, 5, 3, 7], 1)
            .scale(3.0)
            .unwrap()
            .add_scalar(2.0)
            .unwrap(),
        randn(&[2, 5, 3, 7], 2).scale(4.0).unwrap(),
        randn(&[3, 7], 3),
    );
    let tape = Tape::new();
    let fused = gated_head_layer_norm(&tape, &x, &o, &w, 1e-5).unwrap();
    let composed = tape
        .mul(
            &head_layer_norm(&tape, &x, &w, None, 1e-5).unwrap(),
            &tape.sigmoid(&o).unwrap(),
        )
        .unwrap();
    let (f, c) = (fused.to_f64_vec().unwrap(), composed.to_f64_vec().unwrap());
    let worst = f
        .iter()
        .zip(&c)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-12, "fused and composed differ by {worst}");
}

#[test]
fn soft_cap_stays_within_the_cap() {
    let x = Tensor::from_f64s(
        &[-1e6, -15.0, 0.0, 3.0, 1e6],
        vec![5],
        DType::F64,
        Device::Cpu,
    )
    .unwrap();
    let y = soft_cap(&Tape::new(), &x, 15.0)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    assert!(y.iter().all(|v| v.abs() <= 15.0));
    assert!((y[3] - 15.0 * (0.2f64).tanh()).abs() < 1e-12);
}

#[test]
fn log_decay_is_never_positive() {
    let x = randn(&[2, 50, 3], 1).scale(20.0).unwrap();
    let g = log_decay(&Tape::new(), &x, &randn(&[3], 2), &randn(&[3], 3)).unwrap();
    assert!(g.to_f64_vec().unwrap().iter().all(|&v| v <= 0.0));
}

#[test]
fn head_layer_norm_normalizes_each_head() {
    let x = randn(&[2, 3, 4, 8], 5)
        .scale(7.0)
        .unwrap()
        .add_scalar(3.0)
        .unwrap();
    let ones = Tensor::ones(vec![4, 8], DType::F64, Device::Cpu).unwrap();
    let y = head_layer_norm(&Tape::new(), &x, &ones, None, 1e-12)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    for head in y.chunks(8) {
        let mean = head.iter().sum::<f64>() / 8.0;
        let var = head.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 8.0;
        assert!(
            mean.abs() < 1e-9 && (var - 1.0).abs() < 1e-6,
            "mean {mean}, var {var}"
        );
    }
}

#[test]
fn bad_shapes_are_errors() {
    let tape = Tape::new();
    let x = randn(&[2, 5, 3], 1);
    assert!(soft_cap(&tape, &x, 0.0).is_err());
    assert!(log_decay(&tape, &x, &randn(&[2], 2), &randn(&[3], 3)).is_err());
    assert!(gated_rms_norm(&tape, &x, &randn(&[2, 5, 4], 2), &randn(&[3], 3), 1e-5).is_err());
    assert!(head_layer_norm(&tape, &x, &randn(&[3, 5], 2), None, 1e-5).is_err());
    assert!(
        gated_head_layer_norm(&tape, &x, &randn(&[2, 4, 3], 2), &randn(&[3], 3), 1e-5).is_err()
    );
    assert!(
        gated_head_layer_norm(&tape, &x, &randn(&[2, 5, 3], 2), &randn(&[3], 3), 1e-5).is_err()
    );
    assert!(head_layer_norm(&tape, &x, &randn(&[5, 3], 2), Some(&randn(&[3], 3)), 1e-5).is_err());
}

/// The gated head norm op's own checks, which the tape node's forward does not reach: the
/// backward's dy of x's shape, and every operand of x's dtype.
#[test]
fn bad_gated_head_norm_operands_are_errors() {
    let (x, o, w) = (
        randn(&[2, 5, 3], 1),
        randn(&[2, 5, 3], 2),
        randn(&[5, 3], 3),
    );
    let input = GatedHeadNormIn {
        x: &x,
        o: &o,
        weight: &w,
    };
    assert!(gated_head_norm(&input, 1e-5).is_ok());
    let dy = randn(&[2, 5, 4], 4);
    let backward = GatedHeadNormBackward {
        input: input.clone(),
        dy: &dy,
    };
    assert!(gated_head_norm_backward(&backward, 1e-5).is_err());
    let w32 = w.to_dtype(DType::F32).unwrap();
    let input = GatedHeadNormIn {
        weight: &w32,
        ..input
    };
    assert!(gated_head_norm(&input, 1e-5).is_err());
}
