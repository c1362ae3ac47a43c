//! `Tensor::matmul_acc_into` on the CPU: `acc += op(a) · op(b)` against plain loops in f64, over
//! several calls into one accumulator, for f64, f32 and bf16 operands (bf16 into an f32
//! accumulator, never rounded to bf16), every transpose, batched, a shared 2-d right operand and
//! a shared left one; and every bad input an error that names it, the accumulator untouched.
use swax_tensor::{DType, Device, Error, Tensor};

fn randn(dims: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(dims.to_vec(), 1.0, seed, dtype, Device::Cpu).unwrap()
}

/// Element `[r, c]` of `op(x)`, a `rows × cols` matrix whose storage starts at `base`: row-major
/// as it is, or its transpose stored row-major when `transposed`.
fn at(
    x: &[f64],
    base: usize,
    transposed: bool,
    (rows, cols): (usize, usize),
    r: usize,
    c: usize,
) -> f64 {
    if transposed {
        x[base + c * rows + r]
    } else {
        x[base + r * cols + c]
    }
}

/// `acc + op(a[i]) · op(b[i])` for every batch entry, the operands' batch strides given (0 for
/// a shared operand), summed in f64.
#[allow(clippy::too_many_arguments)]
fn reference(
    acc: &[f64],
    a: &[f64],
    b: &[f64],
    (batch, m, n, k): (usize, usize, usize, usize),
    (ta, tb): (bool, bool),
    (sa, sb): (usize, usize),
) -> Vec<f64> {
    let mut out = acc.to_vec();
    for i in 0..batch {
        for r in 0..m {
            for c in 0..n {
                let dot: f64 = (0..k)
                    .map(|p| at(a, i * sa, ta, (m, k), r, p) * at(b, i * sb, tb, (k, n), p, c))
                    .sum();
                out[(i * m + r) * n + c] += dot;
            }
        }
    }
    out
}

/// What one product may be off by in the accumulator's precision: f64 rounding, or f32 sums of
/// `k` exact products of bf16 or f32 values (a bf16 rounding of a term, 2^-9, would exceed it).
fn tolerance(dtype: DType, k: usize) -> f64 {
    let unit = match dtype {
        DType::F64 => 1e-13,
        _ => 2e-6,
    };
    unit * (k as f64).sqrt()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g:.9e}, want {w:.9e}"
        );
    }
}

/// Three products of fresh operands added one after another into one non-zero accumulator.
fn accumulates(dtype: DType, batch: usize, (ta, tb): (bool, bool), shared: Option<usize>) {
    let (m, n, k) = (13, 17, 29);
    let op_dims = |rows: usize, cols: usize, t: bool, batched: bool| {
        let mut dims = if batched { vec![batch] } else { vec![] };
        dims.extend(if t { [cols, rows] } else { [rows, cols] });
        dims
    };
    // `shared` names the operand (0 left, 1 right) that is one 2-d matrix for the whole batch.
    let a_batched = batch > 1 && shared != Some(0);
    let b_batched = batch > 1 && shared != Some(1);
    let out_dims: Vec<usize> = if batch > 1 {
        vec![batch, m, n]
    } else {
        vec![m, n]
    };
    let acc_dtype = dtype.accumulator();
    let mut acc = randn(&out_dims, 99, acc_dtype);
    let mut want = acc.to_f64_vec().unwrap();
    for call in 0..3u64 {
        let a = randn(&op_dims(m, k, ta, a_batched), 10 + call, dtype);
        let b = randn(&op_dims(k, n, tb, b_batched), 20 + call, dtype);
        a.matmul_acc_into(&b, ta, tb, &mut acc).unwrap();
        let strides = (
            if a_batched { m * k } else { 0 },
            if b_batched { k * n } else { 0 },
        );
        want = reference(
            &want,
            &a.to_f64_vec().unwrap(),
            &b.to_f64_vec().unwrap(),
            (batch, m, n, k),
            (ta, tb),
            strides,
        );
        assert_eq!(acc.dtype(), acc_dtype);
        assert_eq!(acc.dims(), out_dims.as_slice());
        let what = format!("{dtype:?} batch {batch} ta {ta} tb {tb} shared {shared:?} call {call}");
        assert_close(
            &what,
            &acc.to_f64_vec().unwrap(),
            &want,
            tolerance(dtype, k),
        );
    }
}

#[test]
fn accumulates_products_in_the_accumulation_dtype() {
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        for t in [(false, false), (true, false), (false, true), (true, true)] {
            accumulates(dtype, 1, t, None);
            accumulates(dtype, 3, t, None);
            accumulates(dtype, 3, t, Some(0));
            accumulates(dtype, 3, t, Some(1));
        }
    }
}

/// In f64 the in-place sum is the out-of-place product added: the same to rounding.
#[test]
fn equals_the_product_added_in_f64() {
    let a = randn(&[40, 23], 1, DType::F64);
    let b = randn(&[40, 31], 2, DType::F64);
    let acc0 = randn(&[23, 31], 3, DType::F64);
    let mut acc = acc0.clone().into_unique().unwrap();
    a.matmul_acc_into(&b, true, false, &mut acc).unwrap();
    let want = acc0.add(&a.matmul_t(&b, true, false).unwrap()).unwrap();
    assert_close(
        "f64",
        &acc.to_f64_vec().unwrap(),
        &want.to_f64_vec().unwrap(),
        1e-14,
    );
}

/// `op` failed with a message containing every one of `words`, and `acc` was left as it was.
fn rejects(what: &str, a: &Tensor, b: &Tensor, t: (bool, bool), acc: &mut Tensor, words: &[&str]) {
    let before = acc.to_f64_vec().unwrap();
    let err = a.matmul_acc_into(b, t.0, t.1, acc).unwrap_err();
    let msg = err.to_string();
    for w in words {
        assert!(msg.contains(w), "{what}: {msg:?} does not say {w:?}");
    }
    assert_eq!(
        acc.to_f64_vec().unwrap(),
        before,
        "{what}: accumulator changed"
    );
}

#[test]
fn bad_inputs_are_errors_that_name_the_problem() {
    let (a, b) = (
        randn(&[4, 5], 1, DType::BF16),
        randn(&[5, 6], 2, DType::BF16),
    );
    let mut acc = randn(&[4, 6], 3, DType::F32);
    a.matmul_acc_into(&b, false, false, &mut acc).unwrap();

    let mut bf16_acc = randn(&[4, 6], 3, DType::BF16);
    rejects(
        "bf16 accumulator",
        &a,
        &b,
        (false, false),
        &mut bf16_acc,
        &["accumulator", "must be f32", "bf16"],
    );
    let (a64, b64) = (
        a.to_dtype(DType::F64).unwrap(),
        b.to_dtype(DType::F64).unwrap(),
    );
    rejects(
        "f32 accumulator of f64",
        &a64,
        &b64,
        (false, false),
        &mut acc,
        &["must be f64", "f32"],
    );
    let mut wrong = randn(&[6, 4], 4, DType::F32);
    rejects(
        "wrong shape",
        &a,
        &b,
        (false, false),
        &mut wrong,
        &["[4, 6]", "[6, 4]"],
    );
    rejects(
        "inner sizes differ",
        &a,
        &b,
        (true, false),
        &mut acc,
        &["matmul_acc_into", "[4, 5]", "[5, 6]"],
    );
    let b32 = b.to_dtype(DType::F32).unwrap();
    assert!(matches!(
        a.matmul_acc_into(&b32, false, false, &mut acc),
        Err(Error::DTypeMismatch { .. })
    ));
    let ids = Tensor::from_vec(vec![0u32; 20], [4, 5], Device::Cpu).unwrap();
    let ids_b = Tensor::from_vec(vec![0u32; 30], [5, 6], Device::Cpu).unwrap();
    assert!(matches!(
        ids.matmul_acc_into(&ids_b, false, false, &mut acc),
        Err(Error::UnsupportedDType { .. })
    ));

    // A clone of the accumulator alive: writing it would change the clone too.
    let alias = acc.clone();
    rejects(
        "shared accumulator",
        &a,
        &b,
        (false, false),
        &mut acc,
        &["shared", "in place"],
    );
    assert_eq!(alias.to_f64_vec().unwrap(), acc.to_f64_vec().unwrap());
}
