//! The gated delta rule: the reference holds to finite differences (f64), the fused chunkwise
//! node (WY form) holds to the reference on values and every gradient (q, k, v, beta, decay,
//! initial state) at chunk sizes that do and do not divide T, T = 1 and long T; single steps
//! and pieces carrying the state hold to one shot; extreme gates stay finite; bad input is an
//! error.
mod recurrent_support;

use proptest::prelude::*;
use recurrent_support::*;
use swax_autograd::Tape;
use swax_nn::mixers::gated_delta;
use swax_tensor::{DType, Result, Tensor};

/// q, k, v, beta, g, s0 for `[B, T, H, Dk]` / `Dv`, beta uniform in `beta`, g uniform in `g`.
fn inputs(
    dims: [usize; 5],
    beta: (f64, f64),
    g: (f64, f64),
    seed: u64,
    dtype: DType,
) -> Vec<Tensor> {
    let [b, t, h, dk, dv] = dims;
    vec![
        randn(&[b, t, h, dk], 1.0, seed, dtype),
        randn(&[b, t, h, dk], 1.0, seed + 1, dtype),
        randn(&[b, t, h, dv], 1.0, seed + 2, dtype),
        uniform(&[b, t, h], beta.0, beta.1, seed + 3, dtype),
        uniform(&[b, t, h], g.0, g.1, seed + 4, dtype),
        randn(&[b, h, dk, dv], 0.5, seed + 5, dtype),
    ]
}

const BETA: (f64, f64) = (0.05, 0.95);
const DECAY: (f64, f64) = (-1.0, 0.0);

fn outputs(r: Result<(Tensor, Tensor)>) -> Result<Vec<Tensor>> {
    let (o, s) = r?;
    Ok(vec![o, s])
}

fn recurrent(tape: &Tape, x: &[Tensor]) -> Result<Vec<Tensor>> {
    outputs(gated_delta::recurrent(
        tape,
        &x[0],
        &x[1],
        &x[2],
        &x[3],
        &x[4],
        Some(&x[5]),
    ))
}

fn chunkwise(chunk: usize) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| {
        outputs(gated_delta::chunkwise(
            tape,
            &x[0],
            &x[1],
            &x[2],
            &x[3],
            &x[4],
            Some(&x[5]),
            chunk,
        ))
    }
}

#[test]
fn reference_gradients() {
    for (dims, seed) in [([2, 4, 2, 3, 2], 1), ([1, 3, 1, 2, 3], 2)] {
        gradcheck(
            recurrent,
            &inputs(dims, BETA, DECAY, seed, DType::F64),
            seed,
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Values and every gradient, random sizes, chunks that do and do not divide T (and chunks
    /// longer than T).
    #[test]
    fn chunkwise_matches_recurrent(
        b in 1usize..3, t in 1usize..14, h in 1usize..3, dk in 1usize..5, dv in 1usize..5,
        chunk in 1usize..7, seed in 0u64..1000,
    ) {
        let x = inputs([b, t, h, dk, dv], BETA, DECAY, seed, DType::F64);
        let (rv, rg) = value_and_grads(recurrent, &x, seed);
        let (cv, cg) = value_and_grads(chunkwise(chunk), &x, seed);
        assert_all_close("values", &cv, &rv, 1e-10, 1e-9);
        assert_all_close("grads", &cg, &rg, 1e-9, 1e-8);
    }
}

#[test]
fn chunkwise_gradients_by_finite_differences() {
    let x = inputs([1, 7, 2, 3, 2], BETA, DECAY, 20, DType::F64);
    gradcheck(chunkwise(3), &x, 20);
}

/// Long T, decays near 1 (the state keeps everything) and beta near 1 (the deltas overwrite
/// it): chunk states carried across 64 chunks. Values only: the reference is slow.
#[test]
fn long_sequence_matches_recurrent() {
    let x = inputs([1, 4096, 1, 4, 3], (0.5, 1.0), (-0.01, 0.0), 30, DType::F64);
    let rv = values(&recurrent(&Tape::new(), &x).unwrap());
    let cv = values(&chunkwise(64)(&Tape::new(), &x).unwrap());
    assert_all_close("values", &cv, &rv, 1e-8, 1e-7);
}

#[test]
fn extreme_gates_stay_finite() {
    for (beta, g) in [
        ((0.999, 1.0), (-1e-4, 0.0)),
        ((0.0, 1e-3), (-60.0, -20.0)),
        (BETA, (-200.0, 0.0)),
    ] {
        let x = inputs([2, 300, 2, 8, 8], beta, g, 40, DType::F32);
        let (v, gr) = value_and_grads(chunkwise(64), &x, 40);
        for (n, a) in v.iter().chain(&gr).enumerate() {
            assert_finite(&format!("output or gradient #{n}"), a);
        }
    }
}

#[test]
fn steps_match_chunkwise() {
    let [b, t, h, dk, dv] = [2, 10, 2, 3, 4];
    let x = inputs([b, t, h, dk, dv], BETA, DECAY, 50, DType::F64);
    let tape = Tape::new();
    let (o_all, fin) =
        gated_delta::chunkwise(&tape, &x[0], &x[1], &x[2], &x[3], &x[4], Some(&x[5]), 4).unwrap();
    let mut s = x[5].clone();
    for step in 0..t {
        let at =
            |x: &Tensor, shape: Vec<usize>| x.narrow(1, step, 1).unwrap().reshape(shape).unwrap();
        let (o_t, next) = gated_delta::step(
            &tape,
            &at(&x[0], vec![b, h, dk]),
            &at(&x[1], vec![b, h, dk]),
            &at(&x[2], vec![b, h, dv]),
            &at(&x[3], vec![b, h]),
            &at(&x[4], vec![b, h]),
            &s,
        )
        .unwrap();
        let want = at(&o_all, vec![b, h, dv]).to_f64_vec().unwrap();
        assert_close(
            &format!("o at step {step}"),
            &o_t.to_f64_vec().unwrap(),
            &want,
            1e-12,
            1e-10,
        );
        s = next;
    }
    assert_close(
        "final state",
        &s.to_f64_vec().unwrap(),
        &fin.to_f64_vec().unwrap(),
        1e-12,
        1e-10,
    );
}

/// A sequence run in pieces, each starting from the state the last one ended in, gives the
/// one-shot values, and gradients flow back through the carried states into the first state.
#[test]
fn pieces_carrying_state_match_one_shot() {
    let x = inputs([1, 23, 2, 3, 2], BETA, DECAY, 60, DType::F64);
    let pieces = |tape: &Tape, x: &[Tensor]| {
        in_pieces(tape, x, 5, &[5, 11, 7], vec![x[5].clone()], |p, s| {
            let (o, next) =
                gated_delta::chunkwise(tape, &p[0], &p[1], &p[2], &p[3], &p[4], Some(&s[0]), 4)?;
            Ok((o, vec![next]))
        })
    };
    let (pv, pg) = value_and_grads(pieces, &x, 60);
    let (ov, og) = value_and_grads(chunkwise(8), &x, 60);
    assert_all_close("values", &pv, &ov, 1e-12, 1e-10);
    assert_all_close("grads", &pg, &og, 1e-11, 1e-9);
}

#[test]
fn bad_input_is_an_error() {
    let x = inputs([1, 5, 2, 3, 4], BETA, DECAY, 70, DType::F64);
    let tape = Tape::new();
    let run = |k: &Tensor, v: &Tensor, beta: &Tensor, s: Option<&Tensor>, chunk: usize| {
        gated_delta::chunkwise(&tape, &x[0], k, v, beta, &x[4], s, chunk).map(|_| ())
    };
    let short_k = x[1].narrow(1, 0, 4).unwrap();
    let wrong_v = randn(&[1, 5, 3, 4], 1.0, 1, DType::F64);
    let wrong_beta = randn(&[1, 5, 2, 1], 1.0, 1, DType::F64);
    let wrong_state = randn(&[1, 2, 4, 3], 1.0, 1, DType::F64);
    let f32_v = x[2].to_dtype(DType::F32).unwrap();
    assert!(run(&short_k, &x[2], &x[3], None, 4).is_err());
    assert!(run(&x[1], &wrong_v, &x[3], None, 4).is_err());
    assert!(run(&x[1], &x[2], &wrong_beta, None, 4).is_err());
    assert!(run(&x[1], &x[2], &x[3], Some(&wrong_state), 4).is_err());
    assert!(run(&x[1], &f32_v, &x[3], None, 4).is_err());
    assert!(run(&x[1], &x[2], &x[3], None, 0).is_err());
    assert!(gated_delta::recurrent(&tape, &x[0], &short_k, &x[2], &x[3], &x[4], None).is_err());
}
