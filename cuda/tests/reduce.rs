//! Reductions, cumsum, sum_to and softmax against CPU references, on row (inner = 1) and
//! column (inner > 1, chunked) layouts. Row lengths cover several rows a warp, a row held in
//! registers, rows longer than one register tile (16384 bf16, 8192 f32 elements), and lengths
//! that are and are not a whole number of 16-byte vectors (the `_scalar` kernels).

mod common;

use common::{assert_close, download, poisoned, rounded, tol, upload, Rng, FLOATS};
use swax_cuda::kernels::reduce::{cumsum, reduce, sum_to, AxisDims, ReduceOp};
use swax_cuda::kernels::softmax::{softmax, softmax_backward, Softmax};
use swax_cuda::DType;

fn reference(op: ReduceOp, v: &[f64]) -> (f64, u32) {
    match op {
        ReduceOp::Sum => (v.iter().sum(), 0),
        ReduceOp::Mean => (v.iter().sum::<f64>() / v.len() as f64, 0),
        ReduceOp::Max => {
            let mut best = 0;
            for (i, &x) in v.iter().enumerate() {
                if x > v[best] {
                    best = i;
                }
            }
            (v[best], best as u32)
        }
        ReduceOp::LogSumExp => {
            let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            (m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln(), 0)
        }
    }
}

const AXES: [AxisDims; 7] = [
    AxisDims {
        outer: 7,
        n: 1,
        inner: 1,
    },
    AxisDims {
        outer: 33,
        n: 301,
        inner: 1,
    },
    AxisDims {
        outer: 3,
        n: 5001,
        inner: 1,
    },
    AxisDims {
        outer: 5,
        n: 19,
        inner: 37,
    },
    AxisDims {
        outer: 2,
        n: 3001,
        inner: 45,
    },
    AxisDims {
        outer: 5,
        n: 4096,
        inner: 1,
    },
    AxisDims {
        outer: 2,
        n: 20000,
        inner: 1,
    },
];

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn reductions_match_reference() {
    let dev = gpu!();
    let mut rng = Rng::new(10);
    for dt in FLOATS {
        for axis in AXES {
            let x = rounded(dt, &rng.vec(axis.outer * axis.n * axis.inner, -1.0, 1.0));
            let gx = upload(&dev, dt, &x);
            for op in [
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::LogSumExp,
            ] {
                let outputs = axis.outer * axis.inner;
                let mut gy = poisoned(&dev, dt, outputs);
                let mut garg = poisoned(&dev, DType::U32, outputs);
                let arg = if op == ReduceOp::Max {
                    Some(&mut garg)
                } else {
                    None
                };
                reduce(&dev, op, &gx, axis, &mut gy, arg).unwrap();
                let mut want = Vec::new();
                let mut want_arg = Vec::new();
                for o in 0..axis.outer {
                    for c in 0..axis.inner {
                        let col: Vec<f64> = (0..axis.n)
                            .map(|j| x[(o * axis.n + j) * axis.inner + c] as f64)
                            .collect();
                        let (v, a) = reference(op, &col);
                        want.push(v);
                        want_arg.push(a);
                    }
                }
                // Sums of thousands of f32 values: allow for accumulation order.
                let (rtol, atol) = tol(dt);
                let atol = atol * (axis.n as f64).sqrt().max(1.0) / 4.0;
                let what = format!("{op:?} {dt} {axis:?}");
                assert_close(&what, &download(&dev, &gy), &want, (rtol, atol.max(1e-5)));
                if op == ReduceOp::Max {
                    assert_eq!(dev.dtoh::<u32>(&garg).unwrap(), want_arg, "{what}");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn argmax_takes_the_first_maximum() {
    let dev = gpu!();
    let x = vec![1.0f32, 3.0, 3.0, -1.0, 3.0, 2.0];
    let gx = dev.htod(&x).unwrap();
    let mut gy = poisoned(&dev, DType::F32, 1);
    let mut ga = poisoned(&dev, DType::U32, 1);
    let axis = AxisDims {
        outer: 1,
        n: 6,
        inner: 1,
    };
    reduce(&dev, ReduceOp::Max, &gx, axis, &mut gy, Some(&mut ga)).unwrap();
    assert_eq!(dev.dtoh::<u32>(&ga).unwrap(), vec![1]);
    assert_eq!(dev.dtoh::<f32>(&gy).unwrap(), vec![3.0]);
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn cumsum_matches_reference() {
    let dev = gpu!();
    let mut rng = Rng::new(11);
    for dt in FLOATS {
        for axis in AXES {
            let x = rounded(dt, &rng.vec(axis.outer * axis.n * axis.inner, -1.0, 1.0));
            let gx = upload(&dev, dt, &x);
            let mut gy = poisoned(&dev, dt, x.len());
            cumsum(&dev, &gx, axis, &mut gy).unwrap();
            let mut want = vec![0.0f64; x.len()];
            for o in 0..axis.outer {
                for c in 0..axis.inner {
                    let mut acc = 0.0;
                    for j in 0..axis.n {
                        let i = (o * axis.n + j) * axis.inner + c;
                        acc += x[i] as f64;
                        want[i] = acc;
                    }
                }
            }
            let (rtol, atol) = tol(dt);
            let atol = (atol * (axis.n as f64).sqrt() / 4.0).max(1e-5);
            let what = format!("cumsum {dt} {axis:?}");
            assert_close(&what, &download(&dev, &gy), &want, (rtol, atol));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn sum_to_undoes_broadcasting() {
    let dev = gpu!();
    let mut rng = Rng::new(12);
    let cases: [(&[usize], &[usize]); 5] = [
        (&[4, 5, 6], &[6]),
        (&[4, 5, 6], &[4, 1, 6]),
        (&[2, 1, 3, 7], &[1, 1, 3, 1]),
        (&[9, 11], &[9, 11]),
        (&[3, 400, 5], &[1]),
    ];
    for dt in FLOATS {
        for (xd, yd) in cases {
            let n: usize = xd.iter().product();
            let x = rounded(dt, &rng.vec(n, -1.0, 1.0));
            let gx = upload(&dev, dt, &x);
            let m: usize = yd.iter().product();
            let mut gy = poisoned(&dev, dt, m);
            sum_to(&dev, &gx, xd, &mut gy, yd).unwrap();
            // Reference: accumulate each x element into its broadcast source.
            let lead = xd.len() - yd.len();
            let mut want = vec![0.0f64; m];
            for (i, &v) in x.iter().enumerate() {
                let (mut rem, mut out, mut stride) = (i, 0, 1);
                for d in (0..xd.len()).rev() {
                    let c = rem % xd[d];
                    rem /= xd[d];
                    if d >= lead {
                        let yd_d = yd[d - lead];
                        if yd_d != 1 {
                            out += c * stride;
                        }
                        stride *= yd_d;
                    }
                }
                want[out] += v as f64;
            }
            let (rtol, atol) = tol(dt);
            let what = format!("sum_to {dt} {xd:?} -> {yd:?}");
            assert_close(&what, &download(&dev, &gy), &want, (rtol, atol * 4.0));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn softmax_forward_and_backward() {
    let dev = gpu!();
    let mut rng = Rng::new(13);
    for dt in FLOATS {
        // 4096: vectorised, one tile. 8200: vectorised; one bf16 tile, three f32 tiles.
        // 20000 / 20001: several tiles, vectorised / scalar.
        for (rows, n) in [
            (13, 1),
            (37, 77),
            (9, 1025),
            (3, 5003),
            (5, 4096),
            (3, 8200),
            (2, 20000),
            (2, 20001),
        ] {
            for kind in [Softmax::Softmax, Softmax::LogSoftmax] {
                let x = rounded(dt, &rng.vec(rows * n, -3.0, 3.0));
                let dy = rounded(dt, &rng.vec(rows * n, -1.0, 1.0));
                let gx = upload(&dev, dt, &x);
                let mut gy = poisoned(&dev, dt, x.len());
                softmax(&dev, kind, &gx, n, &mut gy).unwrap();
                let mut want = Vec::new();
                for r in x.chunks(n) {
                    let r: Vec<f64> = r.iter().map(|&v| v as f64).collect();
                    let lse = reference(ReduceOp::LogSumExp, &r).0;
                    want.extend(r.iter().map(|v| match kind {
                        Softmax::Softmax => (v - lse).exp(),
                        Softmax::LogSoftmax => v - lse,
                    }));
                }
                let what = format!("{kind:?} {dt} {rows}x{n}");
                let y = download(&dev, &gy);
                assert_close(&what, &y, &want, tol(dt));

                // Backward from the device's y, reference in f64 from the same y.
                let gdy = upload(&dev, dt, &dy);
                let mut gdx = poisoned(&dev, dt, x.len());
                softmax_backward(&dev, kind, &gy, &gdy, n, &mut gdx).unwrap();
                let mut want = Vec::new();
                for (yr, gr) in y.chunks(n).zip(dy.chunks(n)) {
                    let dot: f64 = match kind {
                        Softmax::Softmax => {
                            yr.iter().zip(gr).map(|(&a, &b)| a as f64 * b as f64).sum()
                        }
                        Softmax::LogSoftmax => gr.iter().map(|&b| b as f64).sum(),
                    };
                    want.extend(yr.iter().zip(gr).map(|(&a, &b)| match kind {
                        Softmax::Softmax => a as f64 * (b as f64 - dot),
                        Softmax::LogSoftmax => b as f64 - (a as f64).exp() * dot,
                    }));
                }
                let (rtol, atol) = tol(dt);
                let atol = atol * if dt == DType::F32 { 10.0 } else { 1.0 };
                let what = format!("{kind:?} backward {dt} {rows}x{n}");
                assert_close(&what, &download(&dev, &gdx), &want, (rtol, atol));
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn softmax_of_masked_rows() {
    let dev = gpu!();
    for dt in FLOATS {
        // A fully masked row gives zeros (as the CPU backend), a partly masked one zeros where
        // masked; at one register tile and at several.
        for n in [100, 20000] {
            let mut x = vec![f32::NEG_INFINITY; 2 * n];
            for j in (0..n).step_by(3) {
                x[n + j] = (j % 7) as f32;
            }
            let mut gy = poisoned(&dev, dt, x.len());
            softmax(&dev, Softmax::Softmax, &upload(&dev, dt, &x), n, &mut gy).unwrap();
            let y = download(&dev, &gy);
            let m = 6.0f64;
            let sum: f64 = (0..n).step_by(3).map(|j| ((j % 7) as f64 - m).exp()).sum();
            let want: Vec<f64> = (0..2 * n)
                .map(|i| {
                    let j = i % n;
                    if i < n || j % 3 != 0 {
                        0.0
                    } else {
                        ((j % 7) as f64 - m).exp() / sum
                    }
                })
                .collect();
            assert_close(&format!("masked softmax {dt} n={n}"), &y, &want, tol(dt));
        }
    }
}
