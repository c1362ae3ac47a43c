//! `gemm` against a CPU reference: every transpose combination, batches with strides
//! (including a broadcast operand), alpha/beta, f32 and bf16 inputs.

mod common;

use common::{assert_close, download, poisoned, rounded, upload, Rng};
use swax_cuda::{gemm, CudaDevice, DType, GemmArgs, MatmulLayout};

/// Row-major op(a) [m, k] of batch entry `i`.
fn at(a: &[f32], i: usize, stride: usize, t: bool, m: usize, k: usize, r: usize, c: usize) -> f64 {
    let base = i * stride;
    (if t {
        a[base + c * m + r]
    } else {
        a[base + r * k + c]
    }) as f64
}

#[allow(clippy::too_many_arguments)]
fn check(dev: &CudaDevice, dt: DType, out: DType, ta: bool, tb: bool, b_stride0: bool, beta: f32) {
    let (m, n, k, batch) = (37, 29, 53, 3);
    let mut rng = Rng::new(7 + ta as u64 * 2 + tb as u64);
    let (sa, sb, sc) = (m * k + 5, if b_stride0 { 0 } else { k * n + 3 }, m * n + 11);
    let a = rounded(dt, &rng.vec(sa * batch, -1.0, 1.0));
    let b = rounded(dt, &rng.vec(sb * (batch - 1) + k * n, -1.0, 1.0));
    let c0 = rounded(out, &rng.vec(sc * batch, -1.0, 1.0));
    let alpha = 0.75f32;

    let (ga, gb) = (upload(dev, dt, &a), upload(dev, dt, &b));
    let mut gc = if beta == 0.0 {
        poisoned(dev, out, c0.len())
    } else {
        upload(dev, out, &c0)
    };
    let args = GemmArgs {
        layout: MatmulLayout {
            batch,
            m,
            n,
            k,
            lhs_transposed: ta,
            rhs_transposed: tb,
            lhs_batch_stride: sa,
            rhs_batch_stride: sb,
        },
        a: &ga,
        b: &gb,
        c: &mut gc,
        c_stride: sc,
        alpha,
        beta,
        allow_tf32: false,
    };
    gemm(dev, args).unwrap();
    let got = download(dev, &gc);

    let mut want = vec![f64::NAN; got.len()];
    let mut got_used = vec![0.0f32; 0];
    for i in 0..batch {
        for r in 0..m {
            for c in 0..n {
                let dot: f64 = (0..k)
                    .map(|p| at(&a, i, sa, ta, m, k, r, p) * at(&b, i, sb, tb, k, n, p, c))
                    .sum();
                let idx = i * sc + r * n + c;
                let prev = if beta == 0.0 { 0.0 } else { c0[idx] as f64 };
                want[idx] = alpha as f64 * dot + beta as f64 * prev;
                got_used.push(got[idx]);
            }
        }
    }
    let want_used: Vec<f64> = want.into_iter().filter(|w| !w.is_nan()).collect();
    let tol = match (dt, out) {
        (DType::F32, _) => (1e-5, 1e-4),
        (_, DType::F32) => (1e-4, 1e-4), // bf16 inputs, exact products, f32 sums
        _ => (1e-2, 1e-2),
    };
    let what = format!("gemm {dt}->{out} ta={ta} tb={tb} b_stride0={b_stride0} beta={beta}");
    assert_close(&what, &got_used, &want_used, tol);
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn gemm_matches_reference() {
    let dev = gpu!();
    for (dt, out) in [
        (DType::F32, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::BF16, DType::F32),
    ] {
        for ta in [false, true] {
            for tb in [false, true] {
                check(&dev, dt, out, ta, tb, false, 0.0);
            }
        }
        check(&dev, dt, out, false, true, true, 0.5);
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn gemm_rejects_bad_sizes() {
    let dev = gpu!();
    let a = dev.alloc(DType::F32, 6).unwrap();
    let b = dev.alloc(DType::F32, 6).unwrap();
    let mut c = dev.alloc(DType::F32, 3).unwrap();
    let args = GemmArgs {
        layout: MatmulLayout {
            batch: 1,
            m: 2,
            n: 2,
            k: 3,
            lhs_transposed: false,
            rhs_transposed: false,
            lhs_batch_stride: 0,
            rhs_batch_stride: 0,
        },
        a: &a,
        b: &b,
        c: &mut c,
        c_stride: 0,
        alpha: 1.0,
        beta: 0.0,
        allow_tf32: false,
    };
    let err = gemm(&dev, args).unwrap_err().to_string();
    assert!(err.contains("c needs 1 matrices of 2x2"), "{err}");
}
