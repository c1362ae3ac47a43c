//! What the mLSTM and gated-delta tests share: random inputs, a weighted-sum loss over every
//! output (so no gradient can cancel), gradients of named inputs, the finite-difference check,
//! a sequence run in pieces carrying a state, and closeness checks.
#![allow(dead_code)]
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Result, Tensor};

pub fn randn(dims: &[usize], std: f64, seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(dims.to_vec(), std, seed, dtype, Device::Cpu).unwrap()
}

pub fn uniform(dims: &[usize], lo: f64, hi: f64, seed: u64, dtype: DType) -> Tensor {
    Tensor::rand_uniform(dims.to_vec(), lo, hi, seed, dtype, Device::Cpu).unwrap()
}

/// Every output flattened and joined on the tape: one tensor gradcheck can weigh.
pub fn joined(tape: &Tape, outs: &[Tensor]) -> Result<Tensor> {
    let flat: Vec<Tensor> = outs
        .iter()
        .map(|o| tape.reshape(o, vec![o.numel()]))
        .collect::<Result<_>>()?;
    tape.concat(&flat.iter().collect::<Vec<_>>(), 0)
}

/// The finite-difference check of every input's gradient of `f`'s joined outputs.
pub fn gradcheck(f: impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>>, x: &[Tensor], seed: u64) {
    let scalar = |tape: &Tape, x: &[Tensor]| joined(tape, &f(tape, x)?);
    if let Err(e) = check(scalar, x, Tolerance::default(), seed) {
        panic!("gradient check failed: {e}");
    }
}

/// The values of outputs, for the closeness checks.
pub fn values(outs: &[Tensor]) -> Vec<Vec<f64>> {
    outs.iter().map(|o| o.to_f64_vec().unwrap()).collect()
}

/// A sequence run in pieces of the given lengths: the first `seq` inputs `[B, T, ..]` are cut
/// along time, `run(piece inputs, state)` gives a piece's output and the state it ends in, and
/// each piece starts from the last one's state (`state` first). Returns the pieces' outputs
/// joined along time, then the final state.
pub fn in_pieces(
    tape: &Tape,
    x: &[Tensor],
    seq: usize,
    lens: &[usize],
    state: Vec<Tensor>,
    run: impl Fn(&[Tensor], &[Tensor]) -> Result<(Tensor, Vec<Tensor>)>,
) -> Result<Vec<Tensor>> {
    let (mut s, mut outs, mut start) = (state, Vec::new(), 0);
    for &len in lens {
        let cut: Vec<Tensor> = x[..seq]
            .iter()
            .map(|y| tape.narrow(y, 1, start, len))
            .collect::<Result<_>>()?;
        let (o, next) = run(&cut, &s)?;
        outs.push(o);
        s = next;
        start += len;
    }
    let mut all = vec![tape.concat(&outs.iter().collect::<Vec<_>>(), 1)?];
    all.extend(s);
    Ok(all)
}

/// The outputs of `f` on `inputs` and the gradients of a fixed random weighted sum of them
/// with respect to every input.
pub fn value_and_grads(
    f: impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
    seed: u64,
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let tape = Tape::new();
    for x in inputs {
        tape.watch(x);
    }
    let outs = f(&tape, inputs).unwrap();
    let all = joined(&tape, &outs).unwrap();
    let w = randn(all.dims(), 1.0, seed, all.dtype());
    let loss = tape.sum_all(&tape.mul(&all, &w).unwrap()).unwrap();
    let grads = tape.backward(&loss).unwrap();
    let values = outs.iter().map(|o| o.to_f64_vec().unwrap()).collect();
    let g = inputs
        .iter()
        .map(|x| {
            let g = grads.get(x).expect("every input gets a gradient");
            g.to_f64_vec().unwrap()
        })
        .collect();
    (values, g)
}

/// |a - b| <= atol + rtol·|b| elementwise, naming the first failure.
pub fn assert_close(what: &str, a: &[f64], b: &[f64], atol: f64, rtol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (j, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= atol + rtol * y.abs(),
            "{what}[{j}]: {x:e} vs {y:e} (|diff| {:e})",
            (x - y).abs()
        );
    }
}

pub fn assert_all_close(what: &str, a: &[Vec<f64>], b: &[Vec<f64>], atol: f64, rtol: f64) {
    for (n, (x, y)) in a.iter().zip(b).enumerate() {
        assert_close(&format!("{what} #{n}"), x, y, atol, rtol);
    }
}

pub fn assert_finite(what: &str, v: &[f64]) {
    if let Some(j) = v.iter().position(|x| !x.is_finite()) {
        panic!("{what}[{j}] = {}", v[j]);
    }
}
