//! Gradient property tests: every differentiable op's hand-written backward against central
//! differences, in f64, on random shapes (size 1 and odd sizes included) and random values.
//! Tolerances are `Tolerance::default()` unless a test says why not (see gradcheck.rs).
use proptest::prelude::*;
use swax_autograd::gradcheck::{check, GradCheckError, Tolerance};
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Result, Tensor, UnaryOp};

fn randn(dims: &[usize], seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), 1.0, seed, DType::F64, Device::Cpu).unwrap()
}

/// Values mapped by `f`, e.g. kept away from a kink or a pole.
fn mapped(dims: &[usize], seed: u64, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = randn(dims, seed)
        .to_f64_vec()
        .unwrap()
        .into_iter()
        .map(f)
        .collect();
    Tensor::from_f64s(&v, dims.to_vec(), DType::F64, Device::Cpu).unwrap()
}

fn away_from_zero(x: f64) -> f64 {
    x.signum() * (0.2 + x.abs())
}

fn positive(x: f64) -> f64 {
    0.3 + x.abs()
}

fn ids(values: &[u32], dims: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), dims.to_vec(), Device::Cpu).unwrap()
}

fn assert_grad(
    f: impl Fn(&Tape, &[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    tol: Tolerance,
    seed: u64,
) {
    if let Err(e) = check(f, inputs, tol, seed) {
        panic!("gradient check failed: {e}");
    }
}

fn grad(f: impl Fn(&Tape, &[Tensor]) -> Result<Tensor>, inputs: &[Tensor], seed: u64) {
    assert_grad(f, inputs, Tolerance::default(), seed)
}

fn dims(max_rank: usize, max_dim: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1..=max_dim, 1..=max_rank)
}

/// A shape and a second shape that broadcasts against it (some dims set to 1, some leading dims
/// dropped).
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    dims(4, 4)
        .prop_flat_map(|a| {
            let r = a.len();
            (Just(a), prop::collection::vec(any::<bool>(), r), 0..=r)
        })
        .prop_map(|(a, ones, drop)| {
            let b: Vec<usize> = a
                .iter()
                .zip(&ones)
                .map(|(&d, &one)| if one { 1 } else { d })
                .collect();
            (a, b[drop.min(b.len() - 1)..].to_vec())
        })
}

/// A unary op and the map that keeps its inputs inside its smooth domain.
type UnaryCase = (UnaryOp, fn(f64) -> f64);

const UNARY: [UnaryCase; 15] = [
    (UnaryOp::Neg, std::convert::identity),
    (UnaryOp::Exp, std::convert::identity),
    (UnaryOp::Log, positive),
    (UnaryOp::Sqrt, positive),
    (UnaryOp::Rsqrt, positive),
    (UnaryOp::Tanh, std::convert::identity),
    (UnaryOp::Sigmoid, std::convert::identity),
    (UnaryOp::Silu, std::convert::identity),
    (UnaryOp::Softplus, std::convert::identity),
    (UnaryOp::LogSigmoid, std::convert::identity),
    (UnaryOp::Relu, away_from_zero),
    (UnaryOp::Square, std::convert::identity),
    (UnaryOp::Scale(-1.7), std::convert::identity),
    (UnaryOp::AddScalar(0.4), std::convert::identity),
    // Values within 0.05 of a bound are moved off it, so no difference straddles the kink.
    (UnaryOp::Clamp { lo: -0.5, hi: 0.8 }, |x| {
        if (x + 0.5).abs() < 0.05 || (x - 0.8).abs() < 0.05 {
            x + 0.11
        } else {
            x
        }
    }),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Every unary op in every case: a draw of one op per case would leave some ops unchecked
    /// in a run.
    #[test]
    fn unary_ops(d in dims(3, 5), seed in any::<u64>()) {
        for (op, domain) in UNARY {
            let x = mapped(&d, seed, domain);
            if let Err(e) = check(|t, v| t.unary(&v[0], op), &[x], Tolerance::default(), seed) {
                panic!("{op:?}: gradient check failed: {e}");
            }
        }
    }

    #[test]
    fn add_sub_mul_div_broadcast((a, b) in broadcast_pair(), seed in any::<u64>(), swap in any::<bool>()) {
        let (a, b) = if swap { (b, a) } else { (a, b) };
        let (x, y) = (randn(&a, seed), mapped(&b, seed ^ 1, away_from_zero));
        grad(|t, v| t.add(&v[0], &v[1]), &[x.clone(), y.clone()], seed);
        grad(|t, v| t.sub(&v[0], &v[1]), &[x.clone(), y.clone()], seed);
        grad(|t, v| t.mul(&v[0], &v[1]), &[x.clone(), y.clone()], seed);
        grad(|t, v| t.div(&v[0], &v[1]), &[x, y], seed);
    }

    #[test]
    fn maximum_broadcast((a, b) in broadcast_pair(), seed in any::<u64>()) {
        // b's values sit on a grid offset from a's by at least 0.05: no difference near a tie.
        let x = mapped(&a, seed, |v| (v * 4.0).round() / 4.0);
        let y = mapped(&b, seed ^ 7, |v| (v * 4.0).round() / 4.0 + 0.1);
        grad(|t, v| t.maximum(&v[0], &v[1]), &[x, y], seed);
    }

    #[test]
    fn reductions(d in dims(4, 5), seed in any::<u64>(), axis_pick in any::<prop::sample::Index>(), keep in any::<bool>()) {
        let axis = axis_pick.index(d.len()) as isize;
        let x = randn(&d, seed);
        grad(|t, v| t.sum(&v[0], axis, keep), std::slice::from_ref(&x), seed);
        grad(|t, v| t.mean(&v[0], axis, keep), std::slice::from_ref(&x), seed);
        grad(|t, v| t.max(&v[0], axis, keep), std::slice::from_ref(&x), seed);
        grad(|t, v| t.logsumexp(&v[0], axis, keep), std::slice::from_ref(&x), seed);
        grad(|t, v| t.cumsum(&v[0], axis, false), std::slice::from_ref(&x), seed);
        grad(|t, v| t.cumsum(&v[0], axis, true), std::slice::from_ref(&x), seed);
        grad(|t, v| t.sum_all(&v[0]), &[x], seed);
    }

    #[test]
    fn softmaxes(d in dims(3, 6), seed in any::<u64>()) {
        let x = randn(&d, seed);
        grad(|t, v| t.softmax(&v[0]), std::slice::from_ref(&x), seed);
        grad(|t, v| t.log_softmax(&v[0]), &[x], seed);
    }

    #[test]
    fn matmuls(b in 1usize..4, m in 1usize..6, k in 1usize..6, n in 1usize..6, ta in any::<bool>(), tb in any::<bool>(), shared in any::<bool>(), seed in any::<u64>()) {
        let a_dims = if ta { vec![b, k, m] } else { vec![b, m, k] };
        let b_dims = match (shared, tb) {
            (true, true) => vec![n, k],
            (true, false) => vec![k, n],
            (false, true) => vec![b, n, k],
            (false, false) => vec![b, k, n],
        };
        let inputs = [randn(&a_dims, seed), randn(&b_dims, seed ^ 3)];
        grad(|t, v| t.matmul_t(&v[0], &v[1], ta, tb), &inputs, seed);
    }

    #[test]
    fn layout_ops(d in dims(4, 4), seed in any::<u64>(), pick in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>(), k in -5isize..6) {
        let x = randn(&d, seed);
        let axis = pick.index(d.len());
        let n = d[axis];
        let start = cut.index(n);
        let len = n - start;
        let mut perm: Vec<usize> = (0..d.len()).rev().collect();
        perm.rotate_left(axis);
        let flat = [d.iter().product::<usize>()];
        grad(|t, v| t.reshape(&v[0], flat), std::slice::from_ref(&x), seed);
        grad(|t, v| t.permute(&v[0], &perm), std::slice::from_ref(&x), seed);
        grad(|t, v| t.transpose(&v[0], 0, -1), std::slice::from_ref(&x), seed);
        grad(|t, v| t.narrow(&v[0], axis as isize, start, len), std::slice::from_ref(&x), seed);
        grad(|t, v| t.pad(&v[0], axis as isize, start, 2), std::slice::from_ref(&x), seed);
        grad(|t, v| t.shift(&v[0], axis as isize, k), std::slice::from_ref(&x), seed);
        if n >= 2 {
            // Both parts reordered (each part's gradient in its place), and one part alone (the
            // other's gradient zeros).
            let sizes = [1 + start % (n - 1), n - 1 - start % (n - 1)];
            let ax = axis as isize;
            grad(|t, v| {
                let p = t.split(&v[0], ax, &sizes)?;
                t.concat(&[&p[1], &p[0]], ax)
            }, std::slice::from_ref(&x), seed);
            grad(|t, v| Ok(t.split(&v[0], ax, &sizes)?.remove(1)), std::slice::from_ref(&x), seed);
        }
        let y = randn(&d, seed ^ 5);
        grad(|t, v| t.concat(&[&v[0], &v[1], &v[0]], axis as isize), &[x.clone(), y], seed);
        let mut wide = vec![3];
        wide.extend(d.iter().map(|&s| if s == 1 { 2 } else { s }));
        let ones: Vec<usize> = d.iter().map(|&s| if s == 1 { 1 } else { s }).collect();
        grad(|t, v| t.broadcast_to(&v[0], wide.clone()), &[randn(&ones, seed)], seed);
    }

    #[test]
    fn embedding_and_index_select(v in 1usize..7, c in 1usize..5, picks in prop::collection::vec(any::<prop::sample::Index>(), 1..9), seed in any::<u64>()) {
        // Repeated ids included: their gradients must accumulate.
        let id_values: Vec<u32> = picks.iter().map(|p| p.index(v) as u32).collect();
        let id_tensor = ids(&id_values, &[id_values.len()]);
        let table = randn(&[v, c], seed);
        grad(|t, x| t.embedding(&x[0], &x[1]), &[table, id_tensor.clone()], seed);
        let x = randn(&[2, v, c], seed ^ 9);
        grad(|t, x| t.index_select(&x[0], 1, &x[1]), &[x, id_tensor], seed);
    }

    #[test]
    fn masks(rows in 1usize..6, extra in 0usize..4, window in 1usize..8, seed in any::<u64>()) {
        let cols = rows + extra;
        let x = randn(&[2, rows, cols], seed);
        grad(|t, v| t.masked_fill_band(&v[0], window, -2.5), std::slice::from_ref(&x), seed);
        let mask = Tensor::band_mask(rows, cols, window, Device::Cpu).unwrap();
        grad(|t, v| t.masked_fill(&v[0], &v[1], 3.0), &[x.clone(), mask.clone()], seed);
        let y = randn(&[2, rows, cols], seed ^ 2);
        let cond = mask.broadcast_to([2, rows, cols]).unwrap();
        grad(|t, v| t.where_cond(&v[2], &v[0], &v[1]), &[x, y, cond], seed);
    }

    #[test]
    fn norms(d in dims(3, 6), seed in any::<u64>()) {
        let n = *d.last().unwrap();
        let (x, w, b) = (randn(&d, seed), randn(&[n], seed ^ 1), randn(&[n], seed ^ 2));
        grad(|t, v| t.rms_norm(&v[0], &v[1], 1e-5), &[x.clone(), w.clone()], seed);
        grad(|t, v| t.layer_norm(&v[0], &v[1], &v[2], 1e-5), &[x.clone(), w.clone(), b], seed);
        // Both outputs of the residual norm reach the result, the skip weighted by r, so that
        // x's gradient is the skip's plus the norm's, summed in the norm's backward.
        let r = randn(&d, seed ^ 3);
        let residual = |t: &Tape, v: &[Tensor]| {
            let (skip, y) = t.residual_rms_norm(&v[0], &v[1], 1e-5)?;
            t.add(&t.mul(&skip, &v[2])?, &y)
        };
        grad(residual, &[x, w, r], seed);
    }

    #[test]
    fn cross_entropy(rows in 1usize..7, v in 1usize..9, picks in prop::collection::vec(any::<prop::sample::Index>(), 7), ignore_some in any::<bool>(), seed in any::<u64>()) {
        let ignore = 9999u32;
        let targets: Vec<u32> = (0..rows).map(|r| {
            if ignore_some && r % 3 == 1 { ignore } else { picks[r].index(v) as u32 }
        }).collect();
        let inputs = [randn(&[rows, v], seed), ids(&targets, &[rows])];
        grad(|t, x| t.cross_entropy(&x[0], &x[1], Some(ignore)), &inputs, seed);
    }

    #[test]
    fn rope(b in 1usize..3, t_len in 1usize..6, h in 1usize..3, half in 1usize..4, offset in 0usize..50, seed in any::<u64>()) {
        let x = randn(&[b, t_len, h, 2 * half], seed);
        grad(|t, v| t.rope(&v[0], offset, 10000.0), &[x], seed);
    }
}

#[test]
fn cast_round_trip_passes_the_gradient_through() {
    // Through f32 the function is the identity up to f32 rounding (~1e-7 relative): a step of
    // 1e-2 keeps the rounding noise in the difference quotient near 1e-5.
    let tol = Tolerance {
        step: 1e-2,
        atol: 1e-4,
        rtol: 1e-4,
    };
    let f = |t: &Tape, v: &[Tensor]| {
        let low = t.to_dtype(&v[0], DType::F32)?;
        t.to_dtype(&low, DType::F64)
    };
    assert_grad(f, &[randn(&[3, 5], 11)], tol, 11);
}

/// Fails unless `result` is the checker's mismatch on input `input`: any other error (a missing
/// gradient, a failed op) would pass a plain `is_err` whether or not the wrong gradient was seen.
fn assert_mismatch_on(result: std::result::Result<(), GradCheckError>, input: usize) {
    match result {
        Err(GradCheckError::Mismatch { input: i, .. }) if i == input => {}
        other => panic!("expected a mismatch on input {input}, got {other:?}"),
    }
}

#[test]
fn the_checker_rejects_a_wrong_backward() {
    // exp with a backward off by a factor of 2, and a matmul whose backward forgets a transpose
    // in dA (its dB right): the check must find each wrong gradient, or it proves nothing.
    let doubled = |t: &Tape, v: &[Tensor]| {
        let y = v[0].exp()?;
        let saved = y.clone();
        Ok(t.record("bad_exp", &[&v[0]], y, move |dy, _| {
            Ok(vec![Some(dy.mul(&saved)?.scale(2.0)?)])
        }))
    };
    assert_mismatch_on(
        check(doubled, &[randn(&[4], 1)], Tolerance::default(), 1),
        0,
    );

    let untransposed = |t: &Tape, v: &[Tensor]| {
        let y = v[0].matmul(&v[1])?;
        let (a, b) = (v[0].clone(), v[1].clone());
        Ok(t.record("bad_matmul", &[&v[0], &v[1]], y, move |dy, _| {
            Ok(vec![
                Some(dy.matmul(&b.transpose(0, 1)?.transpose(0, 1)?.reshape([3, 3])?)?),
                Some(a.transpose(0, 1)?.matmul(dy)?),
            ])
        }))
    };
    assert_mismatch_on(
        check(
            untransposed,
            &[randn(&[3, 3], 2), randn(&[3, 3], 3)],
            Tolerance::default(),
            2,
        ),
        0,
    );

    // The correct ops pass the same harness at the same shapes.
    assert!(check(
        |t, v| t.exp(&v[0]),
        &[randn(&[4], 1)],
        Tolerance::default(),
        1
    )
    .is_ok());
    assert!(check(
        |t, v| t.matmul(&v[0], &v[1]),
        &[randn(&[3, 3], 2), randn(&[3, 3], 3)],
        Tolerance::default(),
        2
    )
    .is_ok());
}
