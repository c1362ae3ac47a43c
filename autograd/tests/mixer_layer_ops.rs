//! The recurrent mixers' layer-side ops: the fused short convolution against the same sum
//! composed from shifts (values and gradients), and every op's gradient against central
//! differences in f64 on random shapes; bad shapes are errors.
use proptest::prelude::*;
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Result, Tensor};

fn randn(dims: &[usize], seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), 1.0, seed, DType::F64, Device::Cpu).unwrap()
}

fn grad(f: impl Fn(&Tape, &[Tensor]) -> Result<Tensor>, inputs: &[Tensor], seed: u64) {
    if let Err(e) = check(f, inputs, Tolerance::default(), seed) {
        panic!("gradient check failed: {e}");
    }
}

/// The short convolution composed from K shifted copies: the spec the fused kernel is held to.
fn conv_by_shifts(tape: &Tape, x: &Tensor, w: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let k = w.dims()[1];
    let mut y = tape.broadcast_to(bias, x.shape().clone())?;
    for j in 0..k {
        let tap = tape.reshape(&tape.narrow(w, 1, j, 1)?, vec![w.dims()[0]])?;
        let shifted = tape.shift(x, 1, (k - 1 - j) as isize)?;
        y = tape.add(&y, &tape.mul(&shifted, &tap)?)?;
    }
    Ok(y)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn short_conv_matches_shifts(
        b in 1usize..3, t in 1usize..9, c in 1usize..5, k in 1usize..6, seed in 0u64..1000,
    ) {
        let x = [randn(&[b, t, c], seed), randn(&[c, k], seed + 1), randn(&[c], seed + 2)];
        let w = randn(&[b, t, c], seed + 3);
        let run = |fused: bool| {
            let tape = Tape::new();
            x.iter().for_each(|p| tape.watch(p));
            let y = if fused {
                tape.short_conv(&x[0], &x[1], Some(&x[2])).unwrap()
            } else {
                conv_by_shifts(&tape, &x[0], &x[1], &x[2]).unwrap()
            };
            let loss = tape.sum_all(&tape.mul(&y, &w).unwrap()).unwrap();
            let g = tape.backward(&loss).unwrap();
            let mut out = vec![y.to_f64_vec().unwrap()];
            out.extend(x.iter().map(|p| g.get(p).unwrap().to_f64_vec().unwrap()));
            out
        };
        for (a, e) in run(true).iter().zip(run(false)) {
            for (u, v) in a.iter().zip(&e) {
                prop_assert!((u - v).abs() < 1e-12, "{u} vs {v}");
            }
        }
    }

    #[test]
    fn short_conv_silu_gradients(
        b in 1usize..3, t in 1usize..7, c in 1usize..4, with_bias in any::<bool>(), seed in 0u64..1000,
    ) {
        let mut x = vec![randn(&[b, t, c], seed), randn(&[c, 4], seed + 1)];
        if with_bias {
            x.push(randn(&[c], seed + 2));
        }
        grad(|tape, x| tape.short_conv_silu(&x[0], &x[1], x.get(2)), &x, seed);
    }

    #[test]
    fn soft_cap_gradients(dims in prop::collection::vec(1usize..5, 1..4), cap in 0.5f64..20.0, seed in 0u64..1000) {
        let x = randn(&dims, seed).scale(10.0).unwrap();
        grad(|tape, x| tape.soft_cap(&x[0], cap), &[x], seed);
    }

    #[test]
    fn log_decay_gradients(b in 1usize..3, t in 1usize..5, h in 1usize..4, seed in 0u64..1000) {
        let x = [randn(&[b, t, h], seed), randn(&[h], seed + 1), randn(&[h], seed + 2)];
        grad(|tape, x| tape.log_decay(&x[0], &x[1], &x[2]), &x, seed);
    }

    #[test]
    fn gated_rms_norm_gradients(rows in 1usize..4, d in 1usize..6, seed in 0u64..1000) {
        let x = [randn(&[rows, 2, d], seed), randn(&[rows, 2, d], seed + 1), randn(&[d], seed + 2)];
        grad(|tape, x| tape.gated_rms_norm(&x[0], &x[1], &x[2], 1e-5), &x, seed);
    }

    #[test]
    fn head_layer_norm_gradients(
        b in 1usize..3, h in 1usize..4, d in 2usize..6, with_bias in any::<bool>(), seed in 0u64..1000,
    ) {
        let mut x = vec![randn(&[b, 3, h, d], seed), randn(&[h, d], seed + 1)];
        if with_bias {
            x.push(randn(&[h, d], seed + 2));
        }
        grad(|tape, x| tape.head_layer_norm(&x[0], &x[1], x.get(2), 1e-5), &x, seed);
    }
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
    let y = Tape::new()
        .soft_cap(&x, 15.0)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    assert!(y.iter().all(|v| v.abs() <= 15.0));
    assert!((y[3] - 15.0 * (0.2f64).tanh()).abs() < 1e-12);
}

#[test]
fn log_decay_is_never_positive() {
    let x = randn(&[2, 50, 3], 1).scale(20.0).unwrap();
    let g = Tape::new()
        .log_decay(&x, &randn(&[3], 2), &randn(&[3], 3))
        .unwrap();
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
    let y = Tape::new()
        .head_layer_norm(&x, &ones, None, 1e-12)
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
    assert!(tape.short_conv(&x, &randn(&[4, 4], 2), None).is_err());
    assert!(tape
        .short_conv(&x, &randn(&[3, 4], 2), Some(&randn(&[4], 3)))
        .is_err());
    assert!(tape
        .short_conv(&randn(&[5, 3], 1), &randn(&[3, 4], 2), None)
        .is_err());
    assert!(tape.soft_cap(&x, 0.0).is_err());
    assert!(tape
        .log_decay(&x, &randn(&[2], 2), &randn(&[3], 3))
        .is_err());
    assert!(tape
        .gated_rms_norm(&x, &randn(&[2, 5, 4], 2), &randn(&[3], 3), 1e-5)
        .is_err());
    assert!(tape
        .head_layer_norm(&x, &randn(&[3, 5], 2), None, 1e-5)
        .is_err());
    assert!(tape
        .head_layer_norm(&x, &randn(&[5, 3], 2), Some(&randn(&[3], 3)), 1e-5)
        .is_err());
}
