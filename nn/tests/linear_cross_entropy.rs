//! The fused linear cross-entropy against the unfused tape path (matmul, then cross_entropy) in
//! f64 on the CPU, loss and both gradients, at group sizes that do and do not divide the rows,
//! one row, every row ignored, one input tracked; finite differences; bf16 against f32; bad
//! input is an error that names the problem.
use swax_autograd::gradcheck::{self, Tolerance};
use swax_autograd::Tape;
use swax_nn::layers::linear_cross_entropy::linear_cross_entropy;
use swax_tensor::{DType, Device, Result, Tensor};

const IGNORE: u32 = u32::MAX;

fn randn(dims: &[usize], std: f64, seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), std, seed, DType::F64, Device::Cpu).unwrap()
}

/// x `[n, d]`, W `[d, v]` scaled so the logits are O(1), and targets with every third row
/// ignored.
fn inputs(n: usize, d: usize, v: usize, seed: u64) -> (Tensor, Tensor, Tensor) {
    let targets: Vec<u32> = (0..n)
        .map(|i| match i % 3 {
            1 => IGNORE,
            _ => ((i * 7 + seed as usize) % v) as u32,
        })
        .collect();
    (
        randn(&[n, d], 1.0, seed),
        randn(&[d, v], 1.0 / (d as f64).sqrt(), seed + 100),
        Tensor::from_vec(targets, [n], Device::Cpu).unwrap(),
    )
}

type Loss<'a> = &'a dyn Fn(&Tape, &Tensor, &Tensor, &Tensor) -> Result<Tensor>;

fn unfused(tape: &Tape, x: &Tensor, w: &Tensor, t: &Tensor) -> Result<Tensor> {
    tape.cross_entropy(&tape.matmul(x, w)?, t, Some(IGNORE))
}

fn fused(rows: usize) -> impl Fn(&Tape, &Tensor, &Tensor, &Tensor) -> Result<Tensor> {
    move |tape, x, w, t| linear_cross_entropy(tape, x, w, t, Some(IGNORE), rows)
}

/// The loss and the gradients of `upstream · loss` of the inputs in `watch` (x, W).
fn run(
    f: Loss,
    (x, w, t): &(Tensor, Tensor, Tensor),
    watch: [bool; 2],
    upstream: f64,
) -> (f64, [Option<Vec<f64>>; 2]) {
    let tape = Tape::new();
    for (input, on) in [x, w].into_iter().zip(watch) {
        if on {
            tape.watch(input);
        }
    }
    let loss = f(&tape, x, w, t).unwrap();
    let value = loss.to_scalar().unwrap();
    if !watch.contains(&true) {
        return (value, [None, None]);
    }
    let dy = Tensor::scalar(upstream, loss.dtype(), Device::Cpu).unwrap();
    let grads = tape.backward_from(&loss, &dy).unwrap();
    let grad = |input: &Tensor| grads.get(input).map(|g| g.to_f64_vec().unwrap());
    (value, [grad(x), grad(w)])
}

/// `|got - want| <= tol · (1 + max |want|)` elementwise.
fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = 1.0 + want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}[{i}]: fused {g:.15e}, unfused {w:.15e}"
        );
    }
}

/// Fused at `rows` against unfused, in f64: loss and the gradients of whichever inputs are
/// watched, under an upstream gradient that is not 1. Summation order is the only difference,
/// so they agree to ~1e-15 relative; 1e-12 leaves room and still catches any wrong weighting.
fn matches_unfused(what: &str, inputs: &(Tensor, Tensor, Tensor), rows: usize, watch: [bool; 2]) {
    let (want, want_grads) = run(&unfused, inputs, watch, 1.7);
    let (got, got_grads) = run(&fused(rows), inputs, watch, 1.7);
    assert_close(&format!("{what}: loss"), &[got], &[want], 1e-12);
    for (name, (g, w)) in ["dx", "dW"].iter().zip(got_grads.iter().zip(&want_grads)) {
        match (g, w) {
            (Some(g), Some(w)) => assert_close(&format!("{what}: {name}"), g, w, 1e-12),
            (None, None) => {}
            _ => panic!("{what}: {name} present on one side only"),
        }
    }
}

#[test]
fn matches_the_unfused_loss_and_gradients() {
    let inputs = inputs(11, 5, 13, 1);
    for rows in [1, 3, 4, 10, 11, 12, 100] {
        matches_unfused(&format!("rows {rows}"), &inputs, rows, [true, true]);
    }
}

#[test]
fn one_row_every_row_ignored_no_rows_and_no_ignore_index() {
    for rows in [1, 4] {
        matches_unfused("one row", &inputs(1, 5, 13, 2), rows, [true, true]);
    }
    let (x, w, _) = inputs(7, 5, 13, 3);
    let ignored = Tensor::from_vec(vec![IGNORE; 7], [7], Device::Cpu).unwrap();
    let all = (x, w, ignored);
    matches_unfused("every row ignored", &all, 3, [true, true]);
    let (loss, [dx, dw]) = run(&fused(3), &all, [true, true], 1.0);
    assert_eq!(loss, 0.0);
    assert!(dx.unwrap().iter().chain(&dw.unwrap()).all(|&g| g == 0.0));

    let none = inputs(0, 5, 13, 4);
    let (loss, [dx, dw]) = run(&fused(3), &none, [true, true], 1.0);
    assert_eq!(loss, 0.0);
    assert!(dx.unwrap().is_empty());
    assert!(dw.unwrap().iter().all(|&g| g == 0.0));

    // Without an ignore index every row counts, IGNORE's value included if it were in range.
    let (x, w, _) = inputs(9, 4, 6, 5);
    let t = Tensor::from_vec((0..9u32).map(|i| i % 6).collect(), [9], Device::Cpu).unwrap();
    let plain = |tape: &Tape, x: &Tensor, w: &Tensor, t: &Tensor| {
        tape.cross_entropy(&tape.matmul(x, w)?, t, None)
    };
    let fused_plain = |tape: &Tape, x: &Tensor, w: &Tensor, t: &Tensor| {
        linear_cross_entropy(tape, x, w, t, None, 4)
    };
    let inputs = (x, w, t);
    let (want, want_grads) = run(&plain, &inputs, [true, true], 1.0);
    let (got, got_grads) = run(&fused_plain, &inputs, [true, true], 1.0);
    assert_close("no ignore index: loss", &[got], &[want], 1e-12);
    for (g, w) in got_grads.iter().zip(&want_grads) {
        assert_close(
            "no ignore index",
            g.as_ref().unwrap(),
            w.as_ref().unwrap(),
            1e-12,
        );
    }
}

#[test]
fn only_the_tracked_inputs_get_gradients_and_an_untracked_call_records_nothing() {
    let inputs = inputs(10, 4, 9, 6);
    matches_unfused("x only", &inputs, 3, [true, false]);
    matches_unfused("W only", &inputs, 3, [false, true]);
    matches_unfused("neither", &inputs, 3, [false, false]);
    let tape = Tape::new();
    let (x, w, t) = &inputs;
    linear_cross_entropy(&tape, x, w, t, Some(IGNORE), 3).unwrap();
    assert!(tape.is_empty());
}

#[test]
fn gradients_hold_to_finite_differences() {
    let (x, w, t) = inputs(7, 3, 5, 7);
    for rows in [2, 7] {
        gradcheck::check(
            |tape, xs| linear_cross_entropy(tape, &xs[0], &xs[1], &xs[2], Some(IGNORE), rows),
            &[x.clone(), w.clone(), t.clone()],
            Tolerance::default(),
            11,
        )
        .unwrap();
    }
}

/// The inputs rounded to bf16, as bf16 and as f32 (so both sides see the same values).
fn in_bf16_and_f32(x: &Tensor) -> (Tensor, Tensor) {
    let b = x.to_dtype(DType::BF16).unwrap();
    let f = b.to_dtype(DType::F32).unwrap();
    (b, f)
}

/// The same loss in bf16 and in f32. bf16 rounds the logits and every stored gradient to 8
/// significant bits (2^-9 ≈ 2e-3 relative each, a few roundings deep), so the loss and each
/// gradient agree to 2e-2 relative (norm-wise), the tolerance the GPU parity tests give bf16.
#[test]
fn bf16_matches_f32_within_bf16_rounding() {
    let (x, w, t) = inputs(300, 64, 1000, 8);
    let ((xb, xf), (wb, wf)) = (in_bf16_and_f32(&x), in_bf16_and_f32(&w));
    let (want, want_grads) = run(&fused(128), &(xf, wf, t.clone()), [true, true], 1.0);
    let (got, got_grads) = run(&fused(128), &(xb.clone(), wb.clone(), t), [true, true], 1.0);
    assert!(
        (got - want).abs() <= 2e-2 * want.abs(),
        "loss bf16 {got}, f32 {want}"
    );
    for (name, (g, w)) in ["dx", "dW"].iter().zip(got_grads.iter().zip(&want_grads)) {
        let (g, w) = (g.as_ref().unwrap(), w.as_ref().unwrap());
        let diff: f64 = g.iter().zip(w).map(|(a, b)| (a - b).powi(2)).sum();
        let norm: f64 = w.iter().map(|b| b * b).sum();
        let rel = (diff / norm).sqrt();
        assert!(rel <= 2e-2, "{name}: relative error {rel:.3e}");
    }
}

/// dW sums one partial product per group. With 1024 identical rows, one per group, every
/// partial is the same value p and dW = mean of them = p, to well under bf16's rounding, when
/// the sum is kept in f32; a bf16 running sum stops growing near 256 p (a further p is under
/// half its last place) and would leave dW at a quarter of its value.
#[test]
fn dw_sums_the_groups_in_f32() {
    let (n, d, v) = (1024, 4, 8);
    let row = randn(&[1, d], 1.0, 9).to_dtype(DType::BF16).unwrap();
    let x = row.broadcast_to([n, d]).unwrap();
    let w = randn(&[d, v], 0.5, 10).to_dtype(DType::BF16).unwrap();
    let t = Tensor::from_vec(vec![3u32; n], [n], Device::Cpu).unwrap();
    let (_, [_, dw]) = run(&fused(1), &(x, w.clone(), t.clone()), [false, true], 1.0);
    let (_, [_, one]) = run(
        &fused(1),
        &(row, w, t.narrow(0, 0, 1).unwrap()),
        [false, true],
        1.0,
    );
    assert_eq!(dw.unwrap(), one.unwrap());
}

fn error_of(x: &Tensor, w: &Tensor, t: &Tensor, rows: usize) -> String {
    let tape = Tape::new();
    tape.watch(x);
    linear_cross_entropy(&tape, x, w, t, Some(IGNORE), rows)
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_input_is_an_error_that_names_it() {
    let (x, w, t) = inputs(6, 4, 5, 12);
    let outside = Tensor::from_vec(vec![0, 5, IGNORE, 1, 2, 3], [6], Device::Cpu).unwrap();
    let e = error_of(&x, &w, &outside, 4);
    assert!(e.contains("index 5") && e.contains("size 5"), "{e}");

    let cases: [(Tensor, Tensor, Tensor, &[&str]); 5] = [
        (
            randn(&[6, 3], 1.0, 0),
            w.clone(),
            t.clone(),
            &["[6, 3]", "[4, 5]"],
        ),
        (
            x.clone(),
            w.clone(),
            t.narrow(0, 0, 5).unwrap(),
            &["targets [5]"],
        ),
        (
            x.reshape([2, 3, 4]).unwrap(),
            w.clone(),
            t.clone(),
            &["[2, 3, 4]"],
        ),
        (
            x.clone(),
            w.to_dtype(DType::F32).unwrap(),
            t.clone(),
            &["F64", "F32"],
        ),
        (
            x.clone(),
            w.clone(),
            Tensor::zeros([6], DType::F64, Device::Cpu).unwrap(),
            &["U32"],
        ),
    ];
    for (x, w, t, needles) in cases {
        let e = error_of(&x, &w, &t, 4);
        assert!(e.contains("linear_cross_entropy"), "{e}");
        for needle in needles {
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
    }
    let e = error_of(&x, &w, &t, 0);
    assert!(e.contains("at least 1"), "{e}");
}
