//! What the mLSTM and gated-delta tests share: the tests themselves, written once against
//! [`RecurrentMixer`] and stamped out for each mixer by `recurrent_mixer_tests!`, and their
//! helpers: random inputs, a weighted-sum loss over every output (so no gradient can cancel),
//! gradients of named inputs, the finite-difference check, a sequence run in pieces carrying a
//! state, and closeness checks.
#![allow(dead_code)]
use proptest::sample::Index;
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
    assert_eq!(a.len(), b.len(), "{what}: counts differ");
    for (n, (x, y)) in a.iter().zip(b).enumerate() {
        assert_close(&format!("{what} #{n}"), x, y, atol, rtol);
    }
}

pub fn assert_finite(what: &str, v: &[f64]) {
    if let Some(j) = v.iter().position(|x| !x.is_finite()) {
        panic!("{what}[{j}] = {}", v[j]);
    }
}

/// Gate draws, one pair for each of the two gates, as the mixer's `inputs` reads them (mLSTM:
/// mean and std of the input and forget gates; gated delta rule: the ranges of beta and of the
/// log decay).
pub type Gates = [(f64, f64); 2];

/// The gates each shared test draws its inputs with.
pub struct GateCases {
    /// The recurrent reference's finite-difference check.
    pub reference: Gates,
    /// The chunkwise node against the recurrence at random sizes.
    pub matching: Gates,
    /// The chunkwise node's finite-difference check, single steps, pieces, bad input.
    pub typical: Gates,
    /// A long sequence, whose state is carried across many chunks.
    pub long: Gates,
    /// Gates at the edges of their range, where outputs and gradients must stay finite.
    pub extreme: [Gates; 3],
}

/// A recurrent mixer under the shared tests (`recurrent_mixer_tests!`). Its inputs are q, k
/// `[B, T, H, Dk]`, v `[B, T, H, Dv]`, two gates `[B, T, H]`, then the tensors of its initial
/// state; a value is the mixer at some settings (the mLSTM's eps).
pub trait RecurrentMixer: Copy + std::fmt::Debug + 'static {
    const GATES: GateCases;
    /// The settings most tests run at.
    const DEFAULT: Self;
    /// The settings of the reference's two finite-difference cases.
    const REFERENCE: [Self; 2];
    /// Settings the chunkwise node is held to the recurrence at, one drawn per case.
    const MATCHING: &'static [Self];
    /// The settings of the chunkwise node's finite-difference check.
    const FINITE_DIFFERENCES: Self;

    /// The inputs for `[B, T, H, Dk, Dv]`, initial state included.
    fn inputs(dims: [usize; 5], gates: Gates, seed: u64, dtype: DType) -> Vec<Tensor>;
    /// The recurrent reference over the sequence inputs `x` (the first five) from `state`
    /// (zeros when None): the output and the final state.
    fn recurrent(
        self,
        tape: &Tape,
        x: &[Tensor],
        state: Option<&[Tensor]>,
    ) -> Result<(Tensor, Vec<Tensor>)>;
    /// The fused chunkwise node, as `recurrent`.
    fn chunkwise(
        self,
        tape: &Tape,
        x: &[Tensor],
        state: Option<&[Tensor]>,
        chunk: usize,
    ) -> Result<(Tensor, Vec<Tensor>)>;
    /// One time step: q, k `[B, H, Dk]`, v `[B, H, Dv]`, the gates `[B, H]`.
    fn step(self, tape: &Tape, x: &[Tensor], state: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)>;
}

/// Inputs before this index run along time; the rest is the initial state.
const SEQ: usize = 5;

/// A form's output, then its final state.
fn listed((out, state): (Tensor, Vec<Tensor>)) -> Vec<Tensor> {
    let mut all = vec![out];
    all.extend(state);
    all
}

/// The recurrent reference from the inputs' initial state, outputs listed.
pub fn recurrent_form<M: RecurrentMixer>(m: M) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| Ok(listed(m.recurrent(tape, &x[..SEQ], Some(&x[SEQ..]))?))
}

/// The chunkwise node from the inputs' initial state, outputs listed.
pub fn chunkwise_form<M: RecurrentMixer>(
    m: M,
    chunk: usize,
) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| {
        Ok(listed(m.chunkwise(
            tape,
            &x[..SEQ],
            Some(&x[SEQ..]),
            chunk,
        )?))
    }
}

pub fn reference_gradients<M: RecurrentMixer>() {
    let cases = [([2, 4, 2, 3, 2], 1), ([1, 3, 1, 2, 3], 2)];
    for (m, (dims, seed)) in M::REFERENCE.into_iter().zip(cases) {
        gradcheck(
            recurrent_form(m),
            &M::inputs(dims, M::GATES.reference, seed, DType::F64),
            seed,
        );
    }
}

/// Values and every gradient at `dims`, chunks that do and do not divide T (and chunks longer
/// than T), at the settings `setting` picks.
pub fn chunkwise_matches_recurrent<M: RecurrentMixer>(
    dims: [usize; 5],
    chunk: usize,
    setting: Index,
    seed: u64,
) {
    let m = M::MATCHING[setting.index(M::MATCHING.len())];
    let x = M::inputs(dims, M::GATES.matching, seed, DType::F64);
    let (rv, rg) = value_and_grads(recurrent_form(m), &x, seed);
    let (cv, cg) = value_and_grads(chunkwise_form(m, chunk), &x, seed);
    assert_all_close("values", &cv, &rv, 1e-10, 1e-9);
    assert_all_close("grads", &cg, &rg, 1e-9, 1e-8);
}

pub fn chunkwise_gradients_by_finite_differences<M: RecurrentMixer>() {
    let x = M::inputs([1, 7, 2, 3, 2], M::GATES.typical, 20, DType::F64);
    gradcheck(chunkwise_form(M::FINITE_DIFFERENCES, 3), &x, 20);
}

/// Values only: the reference is slow.
pub fn long_sequence_matches_recurrent<M: RecurrentMixer>() {
    let x = M::inputs([1, 4096, 1, 4, 3], M::GATES.long, 30, DType::F64);
    let rv = values(&recurrent_form(M::DEFAULT)(&Tape::new(), &x).unwrap());
    let cv = values(&chunkwise_form(M::DEFAULT, 64)(&Tape::new(), &x).unwrap());
    assert_all_close("values", &cv, &rv, 1e-8, 1e-7);
}

pub fn extreme_gates_stay_finite<M: RecurrentMixer>() {
    for gates in M::GATES.extreme {
        let x = M::inputs([2, 300, 2, 8, 8], gates, 40, DType::F32);
        let (v, g) = value_and_grads(chunkwise_form(M::DEFAULT, 64), &x, 40);
        for (n, a) in v.iter().chain(&g).enumerate() {
            assert_finite(&format!("output or gradient #{n}"), a);
        }
    }
}

pub fn steps_match_chunkwise<M: RecurrentMixer>() {
    let t = 10;
    let x = M::inputs([2, t, 2, 3, 4], M::GATES.typical, 50, DType::F64);
    let m = M::DEFAULT;
    let tape = Tape::new();
    let (out_all, fin) = m.chunkwise(&tape, &x[..SEQ], Some(&x[SEQ..]), 4).unwrap();
    // Step `step` of a `[B, T, ..]` tensor, without the time axis.
    let at = |x: &Tensor, step: usize| {
        let mut dims = x.dims().to_vec();
        dims.remove(1);
        x.narrow(1, step, 1).unwrap().reshape(dims).unwrap()
    };
    let mut s = x[SEQ..].to_vec();
    for step in 0..t {
        let x_t: Vec<Tensor> = x[..SEQ].iter().map(|x| at(x, step)).collect();
        let (out_t, next) = m.step(&tape, &x_t, &s).unwrap();
        assert_close(
            &format!("output at step {step}"),
            &out_t.to_f64_vec().unwrap(),
            &at(&out_all, step).to_f64_vec().unwrap(),
            1e-12,
            1e-10,
        );
        s = next;
    }
    assert_eq!(s.len(), fin.len());
    for (a, b) in s.iter().zip(&fin) {
        assert_close(
            "final state",
            &a.to_f64_vec().unwrap(),
            &b.to_f64_vec().unwrap(),
            1e-12,
            1e-10,
        );
    }
}

/// A sequence run in pieces, each starting from the state the last one ended in, gives the
/// one-shot values, and gradients flow back through the carried states into the first state.
pub fn pieces_carrying_state_match_one_shot<M: RecurrentMixer>() {
    let x = M::inputs([1, 23, 2, 3, 2], M::GATES.typical, 60, DType::F64);
    let m = M::DEFAULT;
    let pieces = |tape: &Tape, x: &[Tensor]| {
        in_pieces(tape, x, SEQ, &[5, 11, 7], x[SEQ..].to_vec(), |p, s| {
            m.chunkwise(tape, p, Some(s), 4)
        })
    };
    let (pv, pg) = value_and_grads(pieces, &x, 60);
    let (ov, og) = value_and_grads(chunkwise_form(m, 8), &x, 60);
    assert_all_close("values", &pv, &ov, 1e-12, 1e-10);
    assert_all_close("grads", &pg, &og, 1e-11, 1e-9);
}

pub fn bad_input_is_an_error<M: RecurrentMixer>() {
    let x = M::inputs([1, 5, 2, 3, 4], M::GATES.typical, 70, DType::F64);
    let (seq, state) = x.split_at(SEQ);
    let m = M::DEFAULT;
    let tape = Tape::new();
    let with = |i: usize, bad: Tensor| {
        let mut s = seq.to_vec();
        s[i] = bad;
        s
    };
    let fails = |x: &[Tensor], state: Option<&[Tensor]>, chunk: usize| {
        m.chunkwise(&tape, x, state, chunk).is_err()
    };
    let short_k = with(1, seq[1].narrow(1, 0, 4).unwrap());
    assert!(fails(&short_k, None, 4), "k shorter than q");
    assert!(
        m.recurrent(&tape, &short_k, None).is_err(),
        "k shorter than q"
    );
    let other_heads = randn(&[1, 5, 3, 4], 1.0, 1, DType::F64);
    assert!(fails(&with(2, other_heads), None, 4), "v with other heads");
    for dims in [[1, 5, 1].as_slice(), &[1, 5, 2, 1]] {
        let gate = randn(dims, 1.0, 1, DType::F64);
        assert!(fails(&with(3, gate), None, 4), "a gate of shape {dims:?}");
    }
    let mut transposed = state.to_vec();
    transposed[0] = randn(&[1, 2, 4, 3], 1.0, 1, DType::F64);
    assert!(fails(seq, Some(&transposed), 4), "a state [B, H, Dv, Dk]");
    for i in [1, 2] {
        let f32 = with(i, seq[i].to_dtype(DType::F32).unwrap());
        assert!(fails(&f32, None, 4), "input {i} in f32, the rest f64");
    }
    assert!(fails(seq, None, 0), "chunk 0");
    let empty: Vec<Tensor> = seq
        .iter()
        .map(|x| {
            let mut dims = x.dims().to_vec();
            dims[1] = 0;
            randn(&dims, 1.0, 1, DType::F64)
        })
        .collect();
    assert!(fails(&empty, None, 4), "T = 0");
}

/// The tests every recurrent mixer passes, as `#[test]` functions for the mixer type `$m`
/// (a `RecurrentMixer`), in the test file that names it.
macro_rules! recurrent_mixer_tests {
    ($m:ty) => {
        #[test]
        fn reference_gradients() {
            recurrent_support::reference_gradients::<$m>();
        }

        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

            #[test]
            fn chunkwise_matches_recurrent(
                b in 1usize..3, t in 1usize..14, h in 1usize..3, dk in 1usize..5,
                dv in 1usize..5, chunk in 1usize..7,
                setting in proptest::prelude::any::<proptest::sample::Index>(),
                seed in 0u64..1000,
            ) {
                recurrent_support::chunkwise_matches_recurrent::<$m>(
                    [b, t, h, dk, dv], chunk, setting, seed,
                );
            }
        }

        #[test]
        fn chunkwise_gradients_by_finite_differences() {
            recurrent_support::chunkwise_gradients_by_finite_differences::<$m>();
        }

        #[test]
        fn long_sequence_matches_recurrent() {
            recurrent_support::long_sequence_matches_recurrent::<$m>();
        }

        #[test]
        fn extreme_gates_stay_finite() {
            recurrent_support::extreme_gates_stay_finite::<$m>();
        }

        #[test]
        fn steps_match_chunkwise() {
            recurrent_support::steps_match_chunkwise::<$m>();
        }

        #[test]
        fn pieces_carrying_state_match_one_shot() {
            recurrent_support::pieces_carrying_state_match_one_shot::<$m>();
        }

        #[test]
        fn bad_input_is_an_error() {
            recurrent_support::bad_input_is_an_error::<$m>();
        }
    };
}
