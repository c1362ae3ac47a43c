//! Recomputation: a piece recorded as one node that reruns in the backward gives the gradients
//! of the same piece recorded op by op, bit for bit (the CPU kernels are deterministic), and
//! keeps nothing of its inside.
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Result, Tensor};

/// A chain of the kinds a block holds: a matmul, a norm, an activation, a product, a nested
/// recomputed piece, and a reduction.
fn piece(tape: &Tape, x: &[Tensor]) -> Result<Tensor> {
    let h = tape.matmul(&x[0], &x[1])?;
    let n = tape.rms_norm(&h, &x[2], 1e-6)?;
    let gated = tape.recompute("inner", &[&n, &h], |tape, y| {
        tape.mul(&tape.silu(&y[0])?, &tape.tanh(&y[1])?)
    })?;
    tape.sum(&tape.add(&gated, &x[0])?, 1, false)
}

fn inputs(dtype: DType) -> Vec<Tensor> {
    let r = |dims: Vec<usize>, seed| Tensor::randn(dims, 1.0, seed, dtype, Device::Cpu).unwrap();
    vec![r(vec![3, 4], 1), r(vec![4, 4], 2), r(vec![4], 3)]
}

/// The gradients of `sum(f · weights)` with respect to the inputs `watched` picks.
fn gradients(recomputed: bool, xs: &[Tensor], watched: &[bool]) -> Vec<Option<Vec<f64>>> {
    let tape = Tape::new();
    for (x, _) in xs.iter().zip(watched).filter(|(_, &w)| w) {
        tape.watch(x);
    }
    let refs: Vec<&Tensor> = xs.iter().collect();
    let y = match recomputed {
        true => tape.recompute("piece", &refs, piece).unwrap(),
        false => piece(&tape, xs).unwrap(),
    };
    if recomputed {
        assert_eq!(tape.len(), 1, "the piece is one node");
    }
    let weights = Tensor::randn(y.shape().clone(), 1.0, 9, y.dtype(), Device::Cpu).unwrap();
    let loss = tape.sum_all(&tape.mul(&y, &weights).unwrap()).unwrap();
    let grads = tape.backward(&loss).unwrap();
    xs.iter()
        .map(|x| grads.get(x).map(|g| g.to_f64_vec().unwrap()))
        .collect()
}

#[test]
fn recomputed_gradients_equal_the_recorded_ones_bit_for_bit() {
    for dtype in [DType::F32, DType::F64] {
        let xs = inputs(dtype);
        for watched in [
            [true, true, true],
            [false, true, false],
            [true, false, true],
        ] {
            let (again, once) = (
                gradients(true, &xs, &watched),
                gradients(false, &xs, &watched),
            );
            assert_eq!(again, once, "{dtype:?}, watched {watched:?}");
            for (g, w) in again.iter().zip(watched) {
                assert_eq!(g.is_some(), w, "a gradient exactly for what is watched");
            }
        }
    }
}

#[test]
fn recomputed_gradients_match_finite_differences() {
    let f = |tape: &Tape, x: &[Tensor]| {
        let refs: Vec<&Tensor> = x.iter().collect();
        tape.recompute("piece", &refs, piece)
    };
    check(f, &inputs(DType::F64), Tolerance::default(), 4).unwrap();
}

#[test]
fn nothing_watched_records_nothing_and_computes_the_same() {
    let xs = inputs(DType::F64);
    let tape = Tape::new();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let y = tape.recompute("piece", &refs, piece).unwrap();
    assert!(tape.is_empty());
    assert_eq!(
        y.to_f64_vec().unwrap(),
        piece(&Tape::new(), &xs).unwrap().to_f64_vec().unwrap()
    );
}
