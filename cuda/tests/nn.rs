//! Network-level kernels against CPU references: embedding / index_select, RMSNorm,
//! LayerNorm, cross-entropy, RoPE, the multi-tensor AdamW, global norm and accumulation.

mod common;

use common::{assert_close, download, poisoned, rounded, to_f64, tol, upload, Rng, FLOATS};
use std::sync::{Mutex, MutexGuard};
use swax_cuda::kernels::cross_entropy::{
    cross_entropy, cross_entropy_backward, cross_entropy_summed,
};
use swax_cuda::kernels::embedding::{embedding, embedding_backward, index_select};
use swax_cuda::kernels::norm::{layer_norm, layer_norm_backward, rms_norm, rms_norm_backward};
use swax_cuda::kernels::optim::{adamw, add_into, global_norm, AdamWBuffers, AdamWStep};
use swax_cuda::kernels::rope::{rope, rope_backward, RopeDims};
use swax_cuda::{Buffer, DType};

/// The tests of one binary share one device (`CudaDevice::new` hands every caller the same
/// one), and with it one error word: a test that reads the flags could take another's. Every
/// test that launches a flagging kernel and reads the flags holds this while it does.
static ERROR_WORD: Mutex<()> = Mutex::new(());

fn error_word() -> MutexGuard<'static, ()> {
    ERROR_WORD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn embedding_gather_and_scatter() {
    let _flags = error_word();
    let dev = gpu!();
    let mut rng = Rng::new(20);
    let (vocab, dim, count) = (101, 37, 259);
    for dt in FLOATS {
        let table = rounded(dt, &rng.vec(vocab * dim, -1.0, 1.0));
        let ids: Vec<u32> = (0..count).map(|_| rng.below(vocab as u32)).collect();
        let (gt, gi) = (upload(&dev, dt, &table), dev.htod(&ids).unwrap());
        let mut go = poisoned(&dev, dt, count * dim);
        embedding(&dev, &gi, &gt, vocab, dim, &mut go).unwrap();
        let want: Vec<f64> = ids
            .iter()
            .flat_map(|&id| table[id as usize * dim..][..dim].iter().map(|&v| v as f64))
            .collect();
        assert_close(
            &format!("embedding {dt}"),
            &download(&dev, &go),
            &want,
            (0.0, 0.0),
        );

        let dout = rounded(dt, &rng.vec(count * dim, -1.0, 1.0));
        let init = rng.vec(vocab * dim, -1.0, 1.0);
        let mut gdt = dev.htod(&init).unwrap();
        embedding_backward(&dev, &gi, &upload(&dev, dt, &dout), vocab, dim, &mut gdt).unwrap();
        let mut want = to_f64(&init);
        for (r, &id) in ids.iter().enumerate() {
            for j in 0..dim {
                want[id as usize * dim + j] += dout[r * dim + j] as f64;
            }
        }
        assert_close(
            &format!("embedding backward {dt}"),
            &download(&dev, &gdt),
            &want,
            (1e-5, 1e-5),
        );
    }
    dev.take_kernel_errors().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn out_of_range_ids_are_flagged_not_written() {
    let _flags = error_word();
    let dev = gpu!();
    let src: Vec<u32> = (0..4 * 3).collect();
    let ids = vec![1u32, 7, 3];
    let (gs, gi) = (dev.htod(&src).unwrap(), dev.htod(&ids).unwrap());
    let mut go = poisoned(&dev, DType::U32, 9);
    index_select(&dev, &gs, 3, &gi, &mut go).unwrap();
    assert_eq!(
        dev.dtoh::<u32>(&go).unwrap(),
        vec![3, 4, 5, 0, 0, 0, 9, 10, 11]
    );
    let err = dev.take_kernel_errors().unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");
    dev.take_kernel_errors().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn a_target_outside_the_vocabulary_makes_the_summed_loss_nan_and_is_flagged() {
    let _flags = error_word();
    let dev = gpu!();
    let (rows, vocab) = (3, 40);
    let logits = vec![0.5f32; rows * vocab];
    let gl = upload(&dev, DType::F32, &logits);
    let gt = dev.htod(&[1u32, 40, u32::MAX]).unwrap();
    let mut totals = dev.htod(&[0.0f32, 0.0]).unwrap();
    let mut gd = poisoned(&dev, DType::F32, logits.len());
    cross_entropy_summed(&dev, &gl, vocab, &gt, u32::MAX, &mut totals, Some(&mut gd)).unwrap();
    assert!(dev.dtoh::<f32>(&totals).unwrap()[0].is_nan());
    let err = dev.take_kernel_errors().unwrap_err().to_string();
    assert!(err.contains("cross-entropy target was >= vocab"), "{err}");
    dev.take_kernel_errors().unwrap();
}

/// (y, mean, rstd) of one row, f64.
fn norm_row(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f64) -> (Vec<f64>, f64, f64) {
    let n = x.len() as f64;
    let mean = if b.is_some() {
        x.iter().map(|&v| v as f64).sum::<f64>() / n
    } else {
        0.0
    };
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    let y = (0..x.len())
        .map(|j| (x[j] as f64 - mean) * rstd * w[j] as f64 + b.map_or(0.0, |b| b[j] as f64))
        .collect();
    (y, mean, rstd)
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn norms_forward_and_backward() {
    let dev = gpu!();
    let mut rng = Rng::new(21);
    let eps = 1e-5f32;
    for dt in FLOATS {
        // 4096: vectorised, one register tile. 20000 / 20001: several tiles (the statistics
        // walk, then the output walk), vectorised / scalar.
        for (rows, n) in [
            (37, 67),
            (5, 1500),
            (300, 33),
            (3, 4096),
            (2, 20000),
            (2, 20001),
        ] {
            for center in [false, true] {
                let x = rounded(dt, &rng.vec(rows * n, -2.0, 2.0));
                let dy = rounded(dt, &rng.vec(rows * n, -1.0, 1.0));
                // RMSNorm adds a residual into y, and its backward a residual's gradient into dx
                // (the same values serve as both); LayerNorm has neither.
                let dres = match center {
                    true => vec![0.0; rows * n],
                    false => rounded(dt, &rng.vec(rows * n, -1.0, 1.0)),
                };
                let w = rng.vec(n, 0.5, 1.5);
                let b = rng.vec(n, -0.5, 0.5);
                let (gx, gdy) = (upload(&dev, dt, &x), upload(&dev, dt, &dy));
                let gres = upload(&dev, dt, &dres);
                let (gw, gb) = (dev.htod(&w).unwrap(), dev.htod(&b).unwrap());
                let mut gy = poisoned(&dev, dt, x.len());
                let mut grstd = poisoned(&dev, DType::F32, rows);
                let mut gmean = poisoned(&dev, DType::F32, rows);
                if center {
                    layer_norm(&dev, &gx, n, &gw, &gb, eps, &mut gy, &mut gmean, &mut grstd)
                        .unwrap();
                } else {
                    rms_norm(&dev, &gx, n, &gw, eps, Some(&gres), &mut gy, &mut grstd).unwrap();
                }
                let (mut want_y, mut want_mean, mut want_rstd) = (vec![], vec![], vec![]);
                let (mut want_dx, mut want_dw, mut want_db) =
                    (vec![], vec![0.0f64; n], vec![0.0f64; n]);
                for ((xr, gr), rr) in x.chunks(n).zip(dy.chunks(n)).zip(dres.chunks(n)) {
                    let (y, mean, rstd) = norm_row(xr, &w, center.then_some(&b[..]), eps as f64);
                    want_y.extend(y.iter().zip(rr).map(|(y, &r)| y + r as f64));
                    want_mean.push(mean);
                    want_rstd.push(rstd);
                    let xh: Vec<f64> = xr.iter().map(|&v| (v as f64 - mean) * rstd).collect();
                    let g: Vec<f64> = (0..n).map(|j| gr[j] as f64 * w[j] as f64).collect();
                    let mg = if center {
                        g.iter().sum::<f64>() / n as f64
                    } else {
                        0.0
                    };
                    let mgx = g.iter().zip(&xh).map(|(a, b)| a * b).sum::<f64>() / n as f64;
                    want_dx.extend((0..n).map(|j| rstd * (g[j] - mg - xh[j] * mgx) + rr[j] as f64));
                    for j in 0..n {
                        want_dw[j] += gr[j] as f64 * xh[j];
                        want_db[j] += gr[j] as f64;
                    }
                }
                let what = format!("norm center={center} {dt} {rows}x{n}");
                assert_close(&what, &download(&dev, &gy), &want_y, tol(dt));
                assert_close(&what, &download(&dev, &grstd), &want_rstd, (1e-4, 1e-5));
                if center {
                    assert_close(&what, &download(&dev, &gmean), &want_mean, (1e-5, 1e-5));
                }

                let mut gdx = poisoned(&dev, dt, x.len());
                let mut gdw = poisoned(&dev, DType::F32, n);
                let mut gdb = poisoned(&dev, DType::F32, n);
                if center {
                    layer_norm_backward(
                        &dev, &gx, n, &gw, &gmean, &grstd, &gdy, &mut gdx, &mut gdw, &mut gdb,
                    )
                    .unwrap();
                    let tol_db = (1e-4, 1e-4 * rows as f64);
                    assert_close(
                        &format!("{what} db"),
                        &download(&dev, &gdb),
                        &want_db,
                        tol_db,
                    );
                } else {
                    rms_norm_backward(
                        &dev,
                        &gx,
                        n,
                        &gw,
                        &grstd,
                        &gdy,
                        Some(&gres),
                        &mut gdx,
                        &mut gdw,
                    )
                    .unwrap();
                }
                let (rtol, atol) = tol(dt);
                assert_close(
                    &format!("{what} dx"),
                    &download(&dev, &gdx),
                    &want_dx,
                    (rtol * 10.0, atol * 10.0),
                );
                let tol_dw = (1e-4, 1e-4 * rows as f64);
                assert_close(
                    &format!("{what} dw"),
                    &download(&dev, &gdw),
                    &want_dw,
                    tol_dw,
                );
            }
        }
    }
}

/// The forwards of RMSNorm, LayerNorm and the gated head norm read bf16 weights of bf16 data as
/// they are (norm.cu's `_wt_` kernels): the same outputs, bit for bit, as from those weights in
/// f32, on one tile and several, vectorised and scalar; bf16 weights of f32 data are refused.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn norm_forwards_read_bf16_weights_as_their_f32_values() {
    use swax_cuda::kernels::norm::gated_head_norm;
    let dev = gpu!();
    let mut rng = Rng::new(23);
    let (dt, eps) = (DType::BF16, 1e-5f32);
    for (rows, n, heads) in [(37, 67, 1), (6, 4096, 3), (2, 20001, 2), (8, 64, 4)] {
        let x = upload(&dev, dt, &rng.vec(rows * n, -2.0, 2.0));
        let o = upload(&dev, dt, &rng.vec(rows * n, -2.0, 2.0));
        let (w, b) = (rng.vec(heads * n, 0.5, 1.5), rng.vec(n, -0.5, 0.5));
        let (w, b) = (rounded(dt, &w), rounded(dt, &b));
        let (w16, b16) = (upload(&dev, dt, &w), upload(&dev, dt, &b));
        let (w32, b32) = (dev.htod(&w).unwrap(), dev.htod(&b).unwrap());
        // y from weights in `w`, `b`: RMSNorm (n of the weights), LayerNorm, the gated head norm.
        let run = |w: &Buffer, b: &Buffer, wn: &Buffer| {
            let (mut y, mut rstd) = (
                poisoned(&dev, dt, rows * n),
                poisoned(&dev, DType::F32, rows),
            );
            let mut mean = poisoned(&dev, DType::F32, rows);
            let mut out = Vec::new();
            rms_norm(&dev, &x, n, wn, eps, None, &mut y, &mut rstd).unwrap();
            out.push(download(&dev, &y));
            layer_norm(&dev, &x, n, wn, b, eps, &mut y, &mut mean, &mut rstd).unwrap();
            out.push(download(&dev, &y));
            gated_head_norm(&dev, &x, &o, w, heads, n, eps, &mut y).unwrap();
            out.push(download(&dev, &y));
            out
        };
        let (n16, n32) = (upload(&dev, dt, &w[..n]), dev.htod(&w[..n]).unwrap());
        let same = run(&w16, &b16, &n16) == run(&w32, &b32, &n32);
        assert!(
            same,
            "bf16 weights differ from their f32 values at {rows}x{n}"
        );
    }
    let x32 = upload(&dev, DType::F32, &rng.vec(64, -1.0, 1.0));
    let w16 = upload(&dev, DType::BF16, &[1.0; 64]);
    let (mut y, mut rstd) = (
        poisoned(&dev, DType::F32, 64),
        poisoned(&dev, DType::F32, 1),
    );
    let err = rms_norm(&dev, &x32, 64, &w16, eps, None, &mut y, &mut rstd)
        .unwrap_err()
        .to_string();
    assert!(err.contains("weights of bf16 for f32 data"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn cross_entropy_forward_and_backward() {
    let _flags = error_word();
    let dev = gpu!();
    let mut rng = Rng::new(22);
    let ignore = u32::MAX;
    for dt in FLOATS {
        // 50304: vectorised, several chunks a row; 50257 (GPT-2's vocabulary): the same,
        // element by element.
        for (rows, vocab) in [(37, 53), (11, 3001), (5, 50304), (3, 50257)] {
            let logits = rounded(dt, &rng.vec(rows * vocab, -4.0, 4.0));
            let targets: Vec<u32> = (0..rows)
                .map(|r| {
                    if r % 5 == 3 {
                        ignore
                    } else {
                        rng.below(vocab as u32)
                    }
                })
                .collect();
            let (gl, gt) = (upload(&dev, dt, &logits), dev.htod(&targets).unwrap());
            let saved = cross_entropy(&dev, &gl, vocab, &gt, ignore).unwrap();
            let (mut losses, mut lses) = (vec![], vec![]);
            for (r, row) in logits.chunks(vocab).enumerate() {
                let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
                let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
                lses.push(lse);
                let t = targets[r];
                losses.push(if t == ignore {
                    0.0
                } else {
                    lse - row[t as usize] as f64
                });
            }
            let count = targets.iter().filter(|&&t| t != ignore).count() as f64;
            let mean = losses.iter().sum::<f64>() / count;
            let what = format!("cross_entropy {dt} {rows}x{vocab}");
            assert_close(&what, &download(&dev, &saved.loss), &losses, (1e-5, 1e-5));
            assert_close(&what, &download(&dev, &saved.lse), &lses, (1e-5, 1e-5));
            assert_close(
                &what,
                &download(&dev, &saved.stats),
                &[mean, count],
                (1e-5, 1e-5),
            );

            // The gradient of the mean times `scale`: (softmax - onehot) * scale / count.
            let grad = |scale: f64| {
                let mut want = vec![];
                for (r, row) in logits.chunks(vocab).enumerate() {
                    let t = targets[r];
                    want.extend(row.iter().enumerate().map(|(j, &v)| {
                        if t == ignore {
                            0.0
                        } else {
                            let p = (v as f64 - lses[r]).exp();
                            (p - if j as u32 == t { 1.0 } else { 0.0 }) * scale / count
                        }
                    }));
                }
                want
            };
            let (rtol, _) = tol(dt);
            let dloss = dev.htod(&[0.5f32]).unwrap();
            let mut gd = poisoned(&dev, dt, logits.len());
            cross_entropy_backward(
                &dev,
                &gl,
                vocab,
                &gt,
                ignore,
                &saved.lse,
                &saved.stats,
                &dloss,
                &mut gd,
            )
            .unwrap();
            assert_close(
                &format!("{what} backward"),
                &download(&dev, &gd),
                &grad(0.5),
                (rtol, 1e-6),
            );

            // The summed loss added into totals that already hold something, with and without
            // its gradient (the gradient of the sum: the mean's times count).
            let sum = losses.iter().sum::<f64>();
            for with_grad in [true, false] {
                let mut totals = dev.htod(&[0.25f32, 3.0]).unwrap();
                let mut gd = poisoned(&dev, dt, logits.len());
                let d = with_grad.then_some(&mut gd);
                cross_entropy_summed(&dev, &gl, vocab, &gt, ignore, &mut totals, d).unwrap();
                let what = format!("{what} summed (gradient: {with_grad})");
                assert_close(
                    &what,
                    &download(&dev, &totals),
                    &[0.25 + sum, 3.0 + count],
                    (1e-5, 1e-5),
                );
                if with_grad {
                    assert_close(&what, &download(&dev, &gd), &grad(count), (rtol, 1e-6));
                }
            }
        }
    }
    dev.take_kernel_errors().unwrap();
}

/// Head dims whose half is odd (the scalar kernel), 4 (vectors of f32, single bf16), 8 and 32
/// (vectors of both); the backward with and without a gradient to add.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rope_rotates_and_unrotates() {
    let dev = gpu!();
    let mut rng = Rng::new(23);
    for (dt, d) in FLOATS
        .into_iter()
        .flat_map(|dt| [10, 8, 16, 64].map(|d| (dt, d)))
    {
        let r = RopeDims {
            b: 2,
            t: 37,
            h: 3,
            d,
            offset: 5,
            theta: 10000.0,
        };
        let x = rounded(dt, &rng.vec(r.b * r.t * r.h * r.d, -1.0, 1.0));
        let gx = upload(&dev, dt, &x);
        let mut gy = poisoned(&dev, dt, x.len());
        rope(&dev, r, &gx, &mut gy).unwrap();
        let half = r.d / 2;
        let rotate = |v: &[f32], sign: f64| {
            let mut out = vec![0.0f64; v.len()];
            for (row_idx, row) in v.chunks(r.d).enumerate() {
                let t = (row_idx / r.h) % r.t;
                let p = (t + r.offset) as f64;
                for k in 0..half {
                    let ang = p * r.theta.powf(-2.0 * k as f64 / r.d as f64);
                    let (s, c) = (sign * ang.sin(), ang.cos());
                    let (x1, x2) = (row[k] as f64, row[k + half] as f64);
                    out[row_idx * r.d + k] = x1 * c - x2 * s;
                    out[row_idx * r.d + k + half] = x2 * c + x1 * s;
                }
            }
            out
        };
        assert_close(
            &format!("rope {dt} d {d}"),
            &download(&dev, &gy),
            &rotate(&x, 1.0),
            tol(dt),
        );
        let mut gdx = poisoned(&dev, dt, x.len());
        rope_backward(&dev, r, &gx, None, &mut gdx).unwrap();
        assert_close(
            &format!("rope backward {dt} d {d}"),
            &download(&dev, &gdx),
            &rotate(&x, -1.0),
            tol(dt),
        );
        // With dres, the backward adds it.
        let dres = rounded(dt, &rng.vec(x.len(), -1.0, 1.0));
        let want: Vec<f64> = rotate(&x, -1.0)
            .iter()
            .zip(&dres)
            .map(|(a, &b)| a + b as f64)
            .collect();
        rope_backward(&dev, r, &gx, Some(&upload(&dev, dt, &dres)), &mut gdx).unwrap();
        assert_close(
            &format!("rope backward + dres {dt} d {d}"),
            &download(&dev, &gdx),
            &want,
            tol(dt),
        );
    }
}

/// AdamW over many tensors in one launch (odd sizes, chunk edges, an empty one, decay on and
/// off), clipped by the global norm, and gradient accumulation over many tensors, against f64
/// references.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn multi_tensor_adamw_norm_and_accumulation() {
    let dev = gpu!();
    let mut rng = Rng::new(24);
    let sizes = [10_007, 1, 4096, 4097, 0, 3, 8191, 333];
    let host = |n: usize, rng: &mut Rng| {
        (
            rng.vec(n, -1.0, 1.0),
            rng.vec(n, -3.0, 3.0),
            rng.vec(n, -0.1, 0.1),
            rng.vec(n, 0.0, 0.1),
        )
    };
    let data: Vec<_> = sizes.iter().map(|&n| host(n, &mut rng)).collect();
    let up = |v: &[f32]| dev.htod(v).unwrap();
    let mut bufs: Vec<_> = data
        .iter()
        .map(|(p, g, m, v)| (up(p), up(g), up(m), up(v)))
        .collect();

    let mut norm = poisoned(&dev, DType::F32, 1);
    let grads: Vec<&swax_cuda::Buffer> = bufs.iter().map(|b| &b.1).collect();
    global_norm(&dev, &grads, &mut norm).unwrap();
    let want_sq: f64 = data
        .iter()
        .flat_map(|d| d.1.iter())
        .map(|&x| x as f64 * x as f64)
        .sum();
    assert_close(
        "global_norm",
        &download(&dev, &norm),
        &[want_sq.sqrt()],
        (1e-5, 0.0),
    );

    for (clip, step) in [(Some(5.0f32), 3), (None, 4)] {
        let hp = AdamWStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            step,
        };
        let before: Vec<_> = bufs
            .iter()
            .map(|b| {
                (
                    download(&dev, &b.0),
                    download(&dev, &b.2),
                    download(&dev, &b.3),
                )
            })
            .collect();
        let mut params: Vec<AdamWBuffers> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, (p, g, m, v))| AdamWBuffers {
                param: p,
                grad: g,
                m,
                v,
                decay: i % 2 == 0,
            })
            .collect();
        adamw(&dev, hp, &mut params, clip.map(|c| (&norm, c))).unwrap();
        let scale = clip.map_or(1.0, |c| (c as f64 / (want_sq.sqrt() + 1e-6)).min(1.0));
        let (b1, b2) = (hp.beta1, hp.beta2);
        let (bc1, bc2) = (1.0 - b1.powi(step as i32), 1.0 - b2.powi(step as i32));
        for (i, ((p, m, v), (gp, _, gm, gv))) in before.iter().zip(&bufs).enumerate() {
            let wd = if i % 2 == 0 { hp.weight_decay } else { 0.0 };
            let (mut wp, mut wm, mut wv) = (vec![], vec![], vec![]);
            for j in 0..p.len() {
                let gj = data[i].1[j] as f64 * scale;
                let mj = b1 * m[j] as f64 + (1.0 - b1) * gj;
                let vj = b2 * v[j] as f64 + (1.0 - b2) * gj * gj;
                wp.push(
                    p[j] as f64 * (1.0 - hp.lr * wd)
                        - hp.lr * (mj / bc1) / ((vj / bc2).sqrt() + hp.eps),
                );
                wm.push(mj);
                wv.push(vj);
            }
            let what = |x: &str| format!("adamw {x} of tensor {i} (n {}, clip {clip:?})", p.len());
            assert_close(&what("p"), &download(&dev, gp), &wp, (1e-5, 1e-6));
            assert_close(&what("m"), &download(&dev, gm), &wm, (1e-5, 1e-6));
            assert_close(&what("v"), &download(&dev, gv), &wv, (1e-5, 1e-7));
        }
    }

    let addends: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(n, -1.0, 1.0)).collect();
    let xs: Vec<_> = addends.iter().map(|a| up(a)).collect();
    let want: Vec<Vec<f64>> = bufs
        .iter()
        .zip(&addends)
        .map(|(b, a)| {
            download(&dev, &b.1)
                .iter()
                .zip(a)
                .map(|(&g, &x)| g as f64 + x as f64)
                .collect()
        })
        .collect();
    let mut acc: Vec<&mut swax_cuda::Buffer> = bufs.iter_mut().map(|b| &mut b.1).collect();
    add_into(&dev, &mut acc, &xs.iter().collect::<Vec<_>>()).unwrap();
    for (i, (b, w)) in bufs.iter().zip(&want).enumerate() {
        assert_close(
            &format!("add_into {i}"),
            &download(&dev, &b.1),
            w,
            (1e-6, 0.0),
        );
    }
}
