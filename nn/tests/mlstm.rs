//! The mLSTM: the references hold to finite differences (f64), the parallel form and the fused
//! chunkwise node hold to the recurrence on values and every gradient (q, k, v, gates, initial
//! state) at chunk sizes that do and do not divide T, T = 1 and long T; single steps and
//! pieces carrying the state hold to one shot; extreme gates stay finite; bad input is an error.
mod recurrent_support;

use proptest::prelude::*;
use recurrent_support::*;
use swax_autograd::Tape;
use swax_nn::mixers::mlstm::{self, MlstmState};
use swax_tensor::{DType, Result, Tensor};

/// q, k, v, i, f, c0, n0, m0 for `[B, T, H, Dk]` / `Dv`, gates with the given (mean, std).
fn inputs(
    dims: [usize; 5],
    i_gate: (f64, f64),
    f_gate: (f64, f64),
    seed: u64,
    dtype: DType,
) -> Vec<Tensor> {
    let [b, t, h, dk, dv] = dims;
    let gate = |(mean, std): (f64, f64), s: u64| {
        randn(&[b, t, h], std, s, dtype).add_scalar(mean).unwrap()
    };
    vec![
        randn(&[b, t, h, dk], 1.0, seed, dtype),
        randn(&[b, t, h, dk], 1.0, seed + 1, dtype),
        randn(&[b, t, h, dv], 1.0, seed + 2, dtype),
        gate(i_gate, seed + 3),
        gate(f_gate, seed + 4),
        randn(&[b, h, dk, dv], 0.5, seed + 5, dtype),
        randn(&[b, h, dk], 0.5, seed + 6, dtype),
        randn(&[b, h], 0.5, seed + 7, dtype),
    ]
}

fn state(x: &[Tensor]) -> MlstmState {
    MlstmState {
        c: x[5].clone(),
        n: x[6].clone(),
        m: x[7].clone(),
    }
}

fn outputs(r: Result<(Tensor, MlstmState)>) -> Result<Vec<Tensor>> {
    let (h, s) = r?;
    Ok(vec![h, s.c, s.n, s.m])
}

fn recurrent(eps: f64) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| {
        outputs(mlstm::recurrent(
            tape,
            &x[0],
            &x[1],
            &x[2],
            &x[3],
            &x[4],
            Some(&state(x)),
            eps,
        ))
    }
}

fn parallel(eps: f64) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| {
        outputs(mlstm::parallel(
            tape,
            &x[0],
            &x[1],
            &x[2],
            &x[3],
            &x[4],
            Some(&state(x)),
            eps,
        ))
    }
}

fn chunkwise(chunk: usize, eps: f64) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| {
        outputs(mlstm::chunkwise(
            tape,
            &x[0],
            &x[1],
            &x[2],
            &x[3],
            &x[4],
            Some(&state(x)),
            chunk,
            eps,
        ))
    }
}

#[test]
fn recurrent_reference_gradients() {
    for (dims, eps, seed) in [([2, 4, 2, 3, 2], mlstm::EPS, 1), ([1, 3, 1, 2, 3], 0.3, 2)] {
        gradcheck(
            recurrent(eps),
            &inputs(dims, (0.0, 1.5), (1.0, 2.0), seed, DType::F64),
            seed,
        );
    }
}

#[test]
fn parallel_reference_gradients() {
    gradcheck(
        parallel(0.3),
        &inputs([1, 4, 2, 2, 3], (0.0, 1.5), (1.0, 2.0), 3, DType::F64),
        3,
    );
}

#[test]
fn parallel_matches_recurrent() {
    for (dims, seed) in [([2, 9, 3, 4, 5], 10), ([1, 1, 1, 3, 2], 11)] {
        let x = inputs(dims, (0.0, 3.0), (2.0, 3.0), seed, DType::F64);
        let (rv, rg) = value_and_grads(recurrent(0.1), &x, seed);
        let (pv, pg) = value_and_grads(parallel(0.1), &x, seed);
        assert_all_close("values", &pv, &rv, 1e-10, 1e-9);
        assert_all_close("grads", &pg, &rg, 1e-10, 1e-9);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Values and every gradient, random sizes, chunks that do and do not divide T (and chunks
    /// longer than T), small and large eps (large eps makes the stabilizer's own path count).
    #[test]
    fn chunkwise_matches_recurrent(
        b in 1usize..3, t in 1usize..14, h in 1usize..3, dk in 1usize..5, dv in 1usize..5,
        chunk in 1usize..7, big_eps in any::<bool>(), seed in 0u64..1000,
    ) {
        let eps = if big_eps { 0.5 } else { mlstm::EPS };
        let x = inputs([b, t, h, dk, dv], (0.0, 3.0), (1.0, 3.0), seed, DType::F64);
        let (rv, rg) = value_and_grads(recurrent(eps), &x, seed);
        let (cv, cg) = value_and_grads(chunkwise(chunk, eps), &x, seed);
        assert_all_close("values", &cv, &rv, 1e-10, 1e-9);
        assert_all_close("grads", &cg, &rg, 1e-9, 1e-8);
    }
}

#[test]
fn chunkwise_gradients_by_finite_differences() {
    let x = inputs([1, 7, 2, 3, 2], (0.0, 2.0), (1.0, 2.0), 20, DType::F64);
    gradcheck(chunkwise(3, 0.3), &x, 20);
}

/// Long T where the stabilizer matters: large input gates and forget gates near 1 would
/// overflow exp(i) and the accumulated state without it. Values only: the reference is slow.
#[test]
fn long_sequence_matches_recurrent() {
    let x = inputs([1, 4096, 1, 4, 3], (20.0, 5.0), (6.0, 2.0), 30, DType::F64);
    let rv = values(&recurrent(mlstm::EPS)(&Tape::new(), &x).unwrap());
    let cv = values(&chunkwise(64, mlstm::EPS)(&Tape::new(), &x).unwrap());
    assert_all_close("values", &cv, &rv, 1e-8, 1e-7);
}

#[test]
fn extreme_gates_stay_finite() {
    for (i_gate, f_gate) in [
        ((0.0, 1.0), (-30.0, 5.0)),
        ((0.0, 1.0), (30.0, 5.0)),
        ((80.0, 20.0), (0.0, 30.0)),
    ] {
        let x = inputs([2, 300, 2, 8, 8], i_gate, f_gate, 40, DType::F32);
        let (v, g) = value_and_grads(chunkwise(64, mlstm::EPS), &x, 40);
        for (n, a) in v.iter().chain(&g).enumerate() {
            assert_finite(&format!("output or gradient #{n}"), a);
        }
    }
}

#[test]
fn steps_match_chunkwise() {
    let [b, t, h, dk, dv] = [2, 10, 2, 3, 4];
    let x = inputs([b, t, h, dk, dv], (0.0, 2.0), (1.0, 2.0), 50, DType::F64);
    let tape = Tape::new();
    let (h_all, fin) = mlstm::chunkwise(
        &tape,
        &x[0],
        &x[1],
        &x[2],
        &x[3],
        &x[4],
        Some(&state(&x)),
        4,
        mlstm::EPS,
    )
    .unwrap();
    let mut s = state(&x);
    for step in 0..t {
        let at =
            |x: &Tensor, shape: Vec<usize>| x.narrow(1, step, 1).unwrap().reshape(shape).unwrap();
        let (h_t, next) = mlstm::step(
            &tape,
            &at(&x[0], vec![b, h, dk]),
            &at(&x[1], vec![b, h, dk]),
            &at(&x[2], vec![b, h, dv]),
            &at(&x[3], vec![b, h]),
            &at(&x[4], vec![b, h]),
            &s,
            mlstm::EPS,
        )
        .unwrap();
        let want = at(&h_all, vec![b, h, dv]).to_f64_vec().unwrap();
        assert_close(
            &format!("h at step {step}"),
            &h_t.to_f64_vec().unwrap(),
            &want,
            1e-12,
            1e-10,
        );
        s = next;
    }
    for (a, b) in [(&s.c, &fin.c), (&s.n, &fin.n), (&s.m, &fin.m)] {
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
#[test]
fn pieces_carrying_state_match_one_shot() {
    let [b, t, h, dk, dv] = [1, 23, 2, 3, 2];
    let x = inputs([b, t, h, dk, dv], (0.0, 2.0), (1.0, 2.0), 60, DType::F64);
    let pieces = |tape: &Tape, x: &[Tensor]| {
        let s = state(x);
        in_pieces(tape, x, 5, &[5, 11, 7], vec![s.c, s.n, s.m], |p, s| {
            let s = MlstmState {
                c: s[0].clone(),
                n: s[1].clone(),
                m: s[2].clone(),
            };
            let (h, next) = mlstm::chunkwise(
                tape,
                &p[0],
                &p[1],
                &p[2],
                &p[3],
                &p[4],
                Some(&s),
                4,
                mlstm::EPS,
            )?;
            Ok((h, vec![next.c, next.n, next.m]))
        })
    };
    let (pv, pg) = value_and_grads(pieces, &x, 60);
    let (ov, og) = value_and_grads(chunkwise(8, mlstm::EPS), &x, 60);
    assert_all_close("values", &pv, &ov, 1e-12, 1e-10);
    assert_all_close("grads", &pg, &og, 1e-11, 1e-9);
}

#[test]
fn bad_input_is_an_error() {
    let x = inputs([1, 5, 2, 3, 4], (0.0, 1.0), (0.0, 1.0), 70, DType::F64);
    let tape = Tape::new();
    let run =
        |q: &Tensor, k: &Tensor, v: &Tensor, i: &Tensor, s: Option<&MlstmState>, chunk: usize| {
            mlstm::chunkwise(&tape, q, k, v, i, &x[4], s, chunk, mlstm::EPS).map(|_| ())
        };
    let short_k = x[1].narrow(1, 0, 4).unwrap();
    let wrong_v = randn(&[1, 5, 3, 4], 1.0, 1, DType::F64);
    let wrong_gate = randn(&[1, 5, 1], 1.0, 1, DType::F64);
    let mut bad_state = state(&x);
    bad_state.c = randn(&[1, 2, 4, 3], 1.0, 1, DType::F64);
    let f32_k = x[1].to_dtype(DType::F32).unwrap();
    assert!(run(&x[0], &short_k, &x[2], &x[3], None, 4).is_err());
    assert!(run(&x[0], &x[1], &wrong_v, &x[3], None, 4).is_err());
    assert!(run(&x[0], &x[1], &x[2], &wrong_gate, None, 4).is_err());
    assert!(run(&x[0], &x[1], &x[2], &x[3], Some(&bad_state), 4).is_err());
    assert!(run(&x[0], &f32_k, &x[2], &x[3], None, 4).is_err());
    assert!(run(&x[0], &x[1], &x[2], &x[3], None, 0).is_err());
    assert!(mlstm::recurrent(
        &tape,
        &x[0],
        &short_k,
        &x[2],
        &x[3],
        &x[4],
        None,
        mlstm::EPS
    )
    .is_err());
    assert!(mlstm::parallel(
        &tape,
        &x[0],
        &x[1],
        &wrong_v,
        &x[3],
        &x[4],
        None,
        mlstm::EPS
    )
    .is_err());
    let empty = randn(&[1, 0, 2, 3], 1.0, 1, DType::F64);
    assert!(run(&empty, &empty, &empty, &x[3], None, 4).is_err());
}
