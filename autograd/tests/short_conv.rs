//! The fused short convolution: against the same sum composed from shifts (values and
//! gradients), its gradient against central differences in f64 on random shapes; bad shapes are
//! errors.
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
}
