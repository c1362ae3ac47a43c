//! Elementwise kernels against CPU references: cast, scaled cast, fill, unary (+ backward), binary with
//! broadcasting, strided copy, band mask, where. Sizes are odd so vector tails are exercised.

mod common;

use common::{assert_close, download, poisoned, rounded, tol, upload, Rng, FLOATS};
use half::bf16;
use swax_cuda::kernels::binary::{binary, binary_same_shape, BinaryOp};
use swax_cuda::kernels::cast::{cast, fill, scale_cast};
use swax_cuda::kernels::copy::strided_copy;
use swax_cuda::kernels::mask::{band_mask, where_select};
use swax_cuda::kernels::unary::{unary, unary_backward, Saved, UnaryOp};
use swax_cuda::DType;

const N: usize = 4099;

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn cast_rounds_like_half() {
    let dev = gpu!();
    let mut rng = Rng::new(1);
    let mut x = rng.vec(N, -300.0, 300.0);
    x[0] = f32::INFINITY;
    x[1] = 1.0 + 1.0 / 256.0; // a tie: rounds to even
    let gx = dev.htod(&x).unwrap();
    let mut gy = poisoned(&dev, DType::BF16, N);
    cast(&dev, &gx, &mut gy).unwrap();
    let want: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    assert_eq!(dev.dtoh::<bf16>(&gy).unwrap(), want);
    let mut back = poisoned(&dev, DType::F32, N);
    cast(&dev, &gy, &mut back).unwrap();
    let want: Vec<f32> = want.iter().map(|v| v.to_f32()).collect();
    assert_eq!(dev.dtoh::<f32>(&back).unwrap(), want);
}

/// Every pair of f32 and bf16: the f32 product with the factor read on the device, rounded to
/// nearest even as `half` rounds, bit for bit; a factor that is not one f32 is refused.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn scale_cast_rounds_the_f32_product_like_half() {
    let dev = gpu!();
    let mut rng = Rng::new(2);
    let s = -0.37f32;
    let gs = dev.htod(&[s][..]).unwrap();
    for from in FLOATS {
        let x = rounded(from, &rng.vec(N, -300.0, 300.0));
        let gx = upload(&dev, from, &x);
        for to in FLOATS {
            let mut gy = poisoned(&dev, to, N);
            scale_cast(&dev, &gx, &gs, &mut gy).unwrap();
            let want = rounded(to, &x.iter().map(|v| v * s).collect::<Vec<_>>());
            assert_eq!(download(&dev, &gy), want, "{from} -> {to}");
        }
    }
    let x = upload(&dev, DType::F32, &[1.0, 2.0]);
    let mut y = poisoned(&dev, DType::BF16, 2);
    let two = upload(&dev, DType::F32, &[1.0, 2.0]);
    let bf16_scale = upload(&dev, DType::BF16, &[1.0]);
    for (bad, says) in [(&two, "s has 2 elements"), (&bf16_scale, "s must be f32")] {
        let err = scale_cast(&dev, &x, bad, &mut y).unwrap_err().to_string();
        assert!(err.contains(says), "{err:?} does not say {says:?}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn fill_writes_every_element() {
    let dev = gpu!();
    for dt in FLOATS {
        let mut y = poisoned(&dev, dt, N);
        fill(&dev, &mut y, -2.5).unwrap();
        assert!(download(&dev, &y).iter().all(|&v| v == -2.5), "{dt}");
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// (f(x), f'(x)) in f64.
fn reference(op: UnaryOp, x: f64) -> (f64, f64) {
    match op {
        UnaryOp::Neg => (-x, -1.0),
        UnaryOp::Exp => (x.exp(), x.exp()),
        UnaryOp::Log => (x.ln(), 1.0 / x),
        UnaryOp::Sqrt => (x.sqrt(), 0.5 / x.sqrt()),
        UnaryOp::Rsqrt => (1.0 / x.sqrt(), -0.5 * x.powf(-1.5)),
        UnaryOp::Tanh => (x.tanh(), 1.0 - x.tanh().powi(2)),
        UnaryOp::Sigmoid => (sigmoid(x), sigmoid(x) * (1.0 - sigmoid(x))),
        UnaryOp::Silu => (x * sigmoid(x), sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x)))),
        UnaryOp::Softplus => (softplus(x), sigmoid(x)),
        UnaryOp::LogSigmoid => (-softplus(-x), sigmoid(-x)),
        UnaryOp::Relu => (x.max(0.0), if x > 0.0 { 1.0 } else { 0.0 }),
        UnaryOp::Square => (x * x, 2.0 * x),
        UnaryOp::Scale(c) => (x * c, c),
        UnaryOp::AddScalar(c) => (x + c, 1.0),
        UnaryOp::Clamp { lo, hi } => (x.clamp(lo, hi), if x >= lo && x <= hi { 1.0 } else { 0.0 }),
    }
}

const OPS: [UnaryOp; 15] = [
    UnaryOp::Neg,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Silu,
    UnaryOp::Softplus,
    UnaryOp::LogSigmoid,
    UnaryOp::Relu,
    UnaryOp::Square,
    UnaryOp::Scale(-1.75),
    UnaryOp::AddScalar(0.625),
    UnaryOp::Clamp { lo: -0.5, hi: 1.25 },
];

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn unary_forward_and_backward() {
    let dev = gpu!();
    let mut rng = Rng::new(2);
    for dt in FLOATS {
        for op in OPS {
            let positive = matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt);
            let (lo, hi) = if positive { (0.1, 4.0) } else { (-4.0, 4.0) };
            let x = rounded(dt, &rng.vec(N, lo, hi));
            let dy = rounded(dt, &rng.vec(N, -1.0, 1.0));
            let (gx, gdy) = (upload(&dev, dt, &x), upload(&dev, dt, &dy));
            let mut gy = poisoned(&dev, dt, N);
            unary(&dev, op, &gx, &mut gy).unwrap();
            let want: Vec<f64> = x.iter().map(|&v| reference(op, v as f64).0).collect();
            let y = download(&dev, &gy);
            assert_close(&format!("{op:?} {dt}"), &y, &want, tol(dt));

            let want: Vec<f64> = x
                .iter()
                .zip(&dy)
                .map(|(&v, &g)| g as f64 * reference(op, v as f64).1)
                .collect();
            let mut gdx = poisoned(&dev, dt, N);
            unary_backward(&dev, op, Saved::Input(&gx), &gdy, &mut gdx).unwrap();
            assert_close(
                &format!("{op:?}' from x {dt}"),
                &download(&dev, &gdx),
                &want,
                tol(dt),
            );
            if op.derivative_from_output() && dt == DType::F32 {
                // From the stored output; in f32 only (a bf16-rounded y shifts f'(x) by more
                // than the bf16 tolerance for steep functions).
                let mut gdx = poisoned(&dev, dt, N);
                unary_backward(&dev, op, Saved::Output(&gy), &gdy, &mut gdx).unwrap();
                assert_close(
                    &format!("{op:?}' from y"),
                    &download(&dev, &gdx),
                    &want,
                    (1e-4, 1e-5),
                );
            } else if !op.derivative_from_output() {
                let mut gdx = poisoned(&dev, dt, N);
                assert!(unary_backward(&dev, op, Saved::Output(&gy), &gdy, &mut gdx).is_err());
            }
        }
    }
}

fn apply(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Maximum => a.max(b),
    }
}

/// (output dims, a's strides, b's strides, a's length, b's length)
type BroadcastCase = (
    &'static [usize],
    &'static [usize],
    &'static [usize],
    usize,
    usize,
);

/// Reference broadcast: y[idx] = a[sum idx*sa] op b[sum idx*sb].
fn broadcast_ref(
    op: BinaryOp,
    dims: &[usize],
    a: &[f32],
    sa: &[usize],
    b: &[f32],
    sb: &[usize],
) -> Vec<f64> {
    let n: usize = dims.iter().product();
    (0..n)
        .map(|mut i| {
            let (mut oa, mut ob) = (0, 0);
            for d in (0..dims.len()).rev() {
                let c = i % dims[d];
                i /= dims[d];
                oa += c * sa[d];
                ob += c * sb[d];
            }
            apply(op, a[oa] as f64, b[ob] as f64)
        })
        .collect()
}

const BINARY_OPS: [BinaryOp; 5] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Maximum,
];

/// Runs `op` over one broadcast case on random operands of `dt` and checks it against
/// [`broadcast_ref`].
fn check_broadcast(
    dev: &swax_cuda::CudaDevice,
    rng: &mut Rng,
    dt: DType,
    op: BinaryOp,
    (dims, sa, sb, na, nb): BroadcastCase,
) {
    let a = rounded(dt, &rng.vec(na, -2.0, 2.0));
    let b = rounded(dt, &rng.vec(nb, 0.5, 2.0));
    let n: usize = dims.iter().product();
    let (ga, gb) = (upload(dev, dt, &a), upload(dev, dt, &b));
    let mut gy = poisoned(dev, dt, n);
    binary(dev, op, dims, &ga, sa, &gb, sb, &mut gy).unwrap();
    let want = broadcast_ref(op, dims, &a, sa, &b, sb);
    let what = format!("{op:?} {dt} {dims:?} {sa:?} {sb:?}");
    assert_close(&what, &download(dev, &gy), &want, tol(dt));
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn binary_same_shape_and_broadcast() {
    let dev = gpu!();
    let mut rng = Rng::new(3);
    for dt in FLOATS {
        for op in BINARY_OPS {
            let a = rounded(dt, &rng.vec(N, -2.0, 2.0));
            let b = rounded(dt, &rng.vec(N, 0.5, 2.0));
            let (ga, gb) = (upload(&dev, dt, &a), upload(&dev, dt, &b));
            let mut gy = poisoned(&dev, dt, N);
            binary_same_shape(&dev, op, &ga, &gb, &mut gy).unwrap();
            let want: Vec<f64> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| apply(op, x as f64, y as f64))
                .collect();
            assert_close(
                &format!("{op:?} {dt}"),
                &download(&dev, &gy),
                &want,
                tol(dt),
            );

            // [5, 7, 13] op [13]; [5, 1, 13] op [1, 7, 1]; rank 6 with a broadcast inside.
            let cases: [BroadcastCase; 3] = [
                (&[5, 7, 13], &[91, 13, 1], &[0, 0, 1], 455, 13),
                (&[5, 7, 13], &[13, 0, 1], &[0, 1, 0], 65, 7),
                (
                    &[2, 3, 1, 4, 5, 3],
                    &[180, 60, 0, 15, 3, 1],
                    &[0, 60, 0, 15, 3, 1],
                    360,
                    180,
                ),
            ];
            for case in cases {
                check_broadcast(&dev, &mut rng, dt, op, case);
            }
        }
    }
}

/// Broadcasts the grouped kernel takes (layout.rs `grouped`): a per-head weight over
/// [N, H, D] either side of the op, a per-row gate along D, both operands broadcast along the
/// rows, a bias over rows of 24 (three bf16 vectors, six f32); and rows of 12, which group in
/// f32 but not in bf16 (the strided kernel). Every op, both dtypes, against the reference loop.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn binary_broadcast_along_rows_in_groups() {
    let dev = gpu!();
    let mut rng = Rng::new(5);
    let cases: [BroadcastCase; 6] = [
        (&[7, 3, 16], &[48, 16, 1], &[0, 16, 1], 336, 48),
        (&[7, 3, 16], &[0, 16, 1], &[48, 16, 1], 48, 336),
        (&[5, 3, 32], &[3, 1, 0], &[96, 32, 1], 15, 480),
        (&[9, 8], &[1, 0], &[1, 0], 9, 9),
        (&[11, 24], &[24, 1], &[0, 1], 264, 24),
        (&[11, 12], &[12, 1], &[1, 0], 132, 11),
    ];
    for dt in FLOATS {
        for op in BINARY_OPS {
            for case in cases {
                check_broadcast(&dev, &mut rng, dt, op, case);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn strided_copy_patterns() {
    let dev = gpu!();
    let src: Vec<u32> = (0..3 * 5 * 7).map(|i| i * 3 + 1).collect();
    let gs = dev.htod(&src).unwrap();
    // Transpose [3, 5, 7] -> [7, 3, 5]: iterate the output shape, read with permuted strides.
    let mut gd = poisoned(&dev, DType::U32, src.len());
    strided_copy(
        &dev,
        &[7, 3, 5],
        &gs,
        &[1, 35, 7],
        0,
        &mut gd,
        &[15, 5, 1],
        0,
    )
    .unwrap();
    let got = dev.dtoh::<u32>(&gd).unwrap();
    for k in 0..7 {
        for i in 0..3 {
            for j in 0..5 {
                assert_eq!(got[k * 15 + i * 5 + j], src[i * 35 + j * 7 + k]);
            }
        }
    }
    // Narrow columns 2..6 of [15, 7] into the middle of a zeroed [15, 9] (pad / concat).
    let mut gd = dev.alloc_zeros(DType::U32, 15 * 9).unwrap();
    strided_copy(&dev, &[15, 4], &gs, &[7, 1], 2, &mut gd, &[9, 1], 3).unwrap();
    let got = dev.dtoh::<u32>(&gd).unwrap();
    for r in 0..15 {
        for c in 0..9 {
            let want = if (3..7).contains(&c) {
                src[r * 7 + c - 1]
            } else {
                0
            };
            assert_eq!(got[r * 9 + c], want, "r {r} c {c}");
        }
    }
    // broadcast_to: a [5] row to [4, 5], bf16 (2-byte elements).
    let row: Vec<bf16> = (0..5).map(|i| bf16::from_f32(i as f32 + 0.5)).collect();
    let gr = dev.htod(&row).unwrap();
    let mut gd = poisoned(&dev, DType::BF16, 20);
    strided_copy(&dev, &[4, 5], &gr, &[0, 1], 0, &mut gd, &[5, 1], 0).unwrap();
    let got = dev.dtoh::<bf16>(&gd).unwrap();
    assert!((0..20).all(|i| got[i] == row[i % 5]));
    // u8, and errors: out of bounds, a destination written twice.
    let bytes: Vec<u8> = (0..10).collect();
    let gb = dev.htod(&bytes).unwrap();
    let mut gd = dev.alloc_zeros(DType::U8, 10).unwrap();
    strided_copy(&dev, &[10], &gb, &[1], 0, &mut gd, &[1], 0).unwrap();
    assert_eq!(dev.dtoh::<u8>(&gd).unwrap(), bytes);
    assert!(strided_copy(&dev, &[11], &gb, &[1], 0, &mut gd, &[1], 0).is_err());
    assert!(strided_copy(&dev, &[2, 5], &gb, &[5, 1], 0, &mut gd, &[0, 1], 0).is_err());
}

/// Narrowing a column block out of rows, the copy a fused projection's split makes, at column
/// offsets and widths that allow 16-, 8-, 4-byte and only 2-byte moves (layout.rs `widened`),
/// into a destination placed at an offset too: every element lands where the plain loop puts it.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn strided_copy_moves_aligned_rows_in_wide_elements() {
    let dev = gpu!();
    let (rows, cols) = (37, 96);
    let src: Vec<bf16> = (0..rows * cols)
        .map(|i| bf16::from_bits((i * 7 + 3) as u16))
        .collect();
    let gs = dev.htod(&src).unwrap();
    for (col, width, dst_off) in [
        (32, 64, 0),
        (8, 24, 8),
        (4, 12, 4),
        (2, 6, 2),
        (3, 5, 1),
        (0, 96, 0),
    ] {
        let mut gd = dev
            .alloc_zeros(DType::BF16, dst_off + rows * width + 1)
            .unwrap();
        strided_copy(
            &dev,
            &[rows, width],
            &gs,
            &[cols, 1],
            col,
            &mut gd,
            &[width, 1],
            dst_off,
        )
        .unwrap();
        let got = dev.dtoh::<bf16>(&gd).unwrap();
        for (i, &g) in got.iter().enumerate() {
            let j = i.wrapping_sub(dst_off);
            let want = if i < dst_off || j >= rows * width {
                bf16::ZERO
            } else {
                src[(j / width) * cols + col + j % width]
            };
            assert_eq!(
                g, want,
                "col {col} width {width} dst offset {dst_off}: element {i}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn band_mask_keeps_the_window() {
    let dev = gpu!();
    let mut rng = Rng::new(4);
    let (batch, tq, tk) = (3, 37, 41);
    for dt in FLOATS {
        for (window, q_offset) in [(1, 4), (5, 4), (16, 0), (1000, 4)] {
            let x = rounded(dt, &rng.vec(batch * tq * tk, -1.0, 1.0));
            let gx = upload(&dev, dt, &x);
            let mut gy = poisoned(&dev, dt, x.len());
            band_mask(&dev, &gx, tq, tk, q_offset, window, -1e4, &mut gy).unwrap();
            let got = download(&dev, &gy);
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                let (t, s) = (((i / tk) % tq) as i64, (i % tk) as i64);
                let p = t + q_offset;
                let keep = s <= p && s > p - window as i64;
                let want = if keep { v } else { rounded(dt, &[-1e4])[0] };
                assert_eq!(g, want, "{dt} w {window} t {t} s {s}");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn where_selects() {
    let dev = gpu!();
    let mut rng = Rng::new(5);
    let n = 1031;
    let a = rng.vec(n, -1.0, 1.0);
    let b = rng.vec(n, 2.0, 3.0);
    let c8: Vec<u8> = (0..n).map(|_| rng.below(3) as u8).collect();
    let c32: Vec<u32> = c8.iter().map(|&c| c as u32 * 1000).collect();
    let (ga, gb) = (dev.htod(&a).unwrap(), dev.htod(&b).unwrap());
    let want: Vec<f64> = (0..n)
        .map(|i| if c8[i] != 0 { a[i] } else { b[i] } as f64)
        .collect();
    for cond in [dev.htod(&c8).unwrap(), dev.htod(&c32).unwrap()] {
        let mut gy = poisoned(&dev, DType::F32, n);
        where_select(&dev, &cond, &ga, &gb, &mut gy).unwrap();
        assert_close("where", &download(&dev, &gy), &want, (0.0, 0.0));
    }
}
