//! Sliding-window attention on the CPU, flash-attention style. The forward walks each block of
//! query rows over the key tiles inside its band with an online softmax and keeps only each
//! row's log-sum-exp; the backward recomputes the probabilities from it. Only tiles that meet
//! the band are touched, so the cost grows with T·W, not T². Tiles are multiplied with `gemm`
//! on strided views straight into `[B, T, H, D]`.
//!
//! Work is spread over (batch, head, query block) in the forward; in the backward over (batch,
//! kv head), because one task then owns every gradient it writes: dk and dv of its kv head
//! (summed over the q heads sharing it) and dq of those q heads. A task's results are gathered
//! into the strided outputs at the end.
use super::tile::{mm, place, View};
use super::{SwaBackward, SwaGrads, SwaIn, SwaOut};
use rayon::prelude::*;
use std::borrow::Cow;
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::backend::Backend;
use swax_tensor::cpu::{CpuStorage, Real};
use swax_tensor::{DType, Error, Result};

/// Query rows and keys per tile. 64 keeps a score tile in L1/L2 while giving `gemm` products
/// big enough to run near its peak.
const BLOCK: usize = 64;

fn visible(t: usize, s: usize, window: usize) -> bool {
    s <= t && t - s < window
}

/// Offset of row 0 of head `h` of batch `b` in a `[B, T, heads, D]` buffer (rows are
/// `heads · D` apart).
fn head_start(dims: AttnShape, b: usize, h: usize, heads: usize) -> usize {
    (b * dims.t * heads + h) * dims.d
}

/// The forward on storage of any float dtype: bf16 computed in f32, o rounded back, lse kept
/// f32 (`Real::store` of `F32` keeps f32 as f32 and f64 as f64).
pub(super) fn forward(
    op: &'static str,
    x: &SwaIn<&CpuStorage>,
    dims: &AttnShape,
    window: usize,
    scale: f64,
) -> Result<SwaOut<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &SwaIn<&CpuStorage>,
        dims: AttnShape,
        window: usize,
        scale: f64,
    ) -> Result<SwaOut<CpuStorage>> {
        let dtype = x.q.dtype();
        let x = x.try_map(|s| T::read(op, s))?;
        let (o, lse) = forward_values(&x, dims, window, scale);
        Ok(SwaOut {
            o: T::store(o, dtype),
            lse: T::store(lse, DType::F32),
        })
    }
    match x.q.dtype() {
        DType::F64 => run::<f64>(op, x, *dims, window, scale),
        DType::F32 | DType::BF16 => run::<f32>(op, x, *dims, window, scale),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The backward on storage of any float dtype, the gradients in the inputs' dtype.
pub(super) fn backward(
    op: &'static str,
    x: &SwaBackward<&CpuStorage>,
    dims: &AttnShape,
    window: usize,
    scale: f64,
) -> Result<SwaGrads<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &SwaBackward<&CpuStorage>,
        dims: AttnShape,
        window: usize,
        scale: f64,
    ) -> Result<SwaGrads<CpuStorage>> {
        let dtype = x.input.q.dtype();
        let (dq, dk, dv) = backward_values(&x.try_map(|s| T::read(op, s))?, dims, window, scale);
        Ok(SwaIn {
            q: T::store(dq, dtype),
            k: T::store(dk, dtype),
            v: T::store(dv, dtype),
        })
    }
    match x.input.q.dtype() {
        DType::F64 => run::<f64>(op, x, *dims, window, scale),
        DType::F32 | DType::BF16 => run::<f32>(op, x, *dims, window, scale),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// Returns `(o, lse)`: o `[B, T, H, D]`, lse `[B, H, T]`.
fn forward_values<T: Real>(
    x: &SwaIn<Cow<[T]>>,
    dims: AttnShape,
    window: usize,
    scale: f64,
) -> (Vec<T>, Vec<T>) {
    let (q, k, v) = (&x.q, &x.k, &x.v);
    let AttnShape { b, t, h, hkv, d } = dims;
    let group = h / hkv;
    let blocks = t.div_ceil(BLOCK);
    let tiles: Vec<(Vec<T>, Vec<T>)> = (0..b * h * blocks)
        .into_par_iter()
        .map(|task| {
            let (bh, t0) = (task / blocks, task % blocks * BLOCK);
            let (bi, hi) = (bh / h, bh % h);
            let kv = head_start(dims, bi, hi / group, hkv);
            let query = View::rows(
                &q[head_start(dims, bi, hi, h)..],
                t0,
                BLOCK.min(t - t0),
                d,
                h * d,
            );
            forward_tile(query, t0, &k[kv..], &v[kv..], hkv * d, window, T::of(scale))
        })
        .collect();
    let mut o = vec![T::zero(); b * t * h * d];
    let mut lse = vec![T::zero(); b * h * t];
    for (task, (ot, lt)) in tiles.iter().enumerate() {
        let (bh, t0) = (task / blocks, task % blocks * BLOCK);
        place(&mut o, ot, dims, (bh / h, bh % h, h), (t0, lt.len()));
        lse[bh * t + t0..bh * t + t0 + lt.len()].copy_from_slice(lt);
    }
    (o, lse)
}

/// One block of query rows starting at time `t0` against its head's keys and values (rows `rs`
/// apart): the output rows and their log-sum-exps.
fn forward_tile<T: Real>(
    query: View<T>,
    t0: usize,
    k: &[T],
    v: &[T],
    rs: usize,
    window: usize,
    scale: T,
) -> (Vec<T>, Vec<T>) {
    let (m, d) = (query.rows, query.cols);
    let mut acc = vec![T::zero(); m * d];
    let mut max = vec![T::neg_infinity(); m];
    let mut sum = vec![T::zero(); m];
    let mut p = vec![T::zero(); m * BLOCK];
    let (lo, hi) = ((t0 + 1).saturating_sub(window), t0 + m);
    for s0 in (lo..hi).step_by(BLOCK) {
        let n = BLOCK.min(hi - s0);
        mm(
            &mut p,
            n,
            false,
            scale,
            query,
            View::rows(k, s0, n, d, rs).t(),
        );
        for r in 0..m {
            let row = &mut p[r * n..(r + 1) * n];
            let mut tile_max = T::neg_infinity();
            for (c, x) in row.iter_mut().enumerate() {
                if visible(t0 + r, s0 + c, window) {
                    tile_max = tile_max.max(*x);
                } else {
                    *x = T::neg_infinity();
                }
            }
            let new_max = max[r].max(tile_max);
            if new_max == T::neg_infinity() {
                // Nothing seen yet: the row's keys all lie in later tiles.
                row.fill(T::zero());
                continue;
            }
            let rescale = (max[r] - new_max).exp();
            let mut tile_sum = T::zero();
            for x in row.iter_mut() {
                *x = (*x - new_max).exp();
                tile_sum = tile_sum + *x;
            }
            sum[r] = sum[r] * rescale + tile_sum;
            max[r] = new_max;
            acc[r * d..(r + 1) * d]
                .iter_mut()
                .for_each(|a| *a = *a * rescale);
        }
        let probs = View::rows(&p, 0, m, n, n);
        mm(
            &mut acc,
            d,
            true,
            T::one(),
            probs,
            View::rows(v, s0, n, d, rs),
        );
    }
    for r in 0..m {
        acc[r * d..(r + 1) * d]
            .iter_mut()
            .for_each(|a| *a = *a / sum[r]);
        max[r] = max[r] + sum[r].ln();
    }
    (acc, max)
}

/// Returns `(dq, dk, dv)` in the layouts of q, k, v.
fn backward_values<T: Real>(
    io: &SwaBackward<Cow<[T]>>,
    dims: AttnShape,
    window: usize,
    scale: f64,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let AttnShape { b, hkv, .. } = dims;
    let parts: Vec<(Vec<T>, Vec<T>, Vec<T>)> = (0..b * hkv)
        .into_par_iter()
        .map(|task| backward_group(io, dims, task / hkv, task % hkv, window, T::of(scale)))
        .collect();
    place_groups(&parts, dims)
}

/// Gathers per-(batch, kv head) results — q-side rows `[group, T, D]`, kv-side rows `[T, D]`
/// twice — into `[B, T, H, D]` and two `[B, T, Hkv, D]` buffers.
pub(crate) fn place_groups<T: Real>(
    parts: &[(Vec<T>, Vec<T>, Vec<T>)],
    dims: AttnShape,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let AttnShape { b, t, h, hkv, d } = dims;
    let group = h / hkv;
    let mut dq = vec![T::zero(); b * t * h * d];
    let mut dk = vec![T::zero(); b * t * hkv * d];
    let mut dv = vec![T::zero(); b * t * hkv * d];
    for (task, (pq, pk, pv)) in parts.iter().enumerate() {
        let (bi, g) = (task / hkv, task % hkv);
        place(&mut dq, pq, dims, (bi, g * group, h), (0, t));
        place(&mut dk, pk, dims, (bi, g, hkv), (0, t));
        place(&mut dv, pv, dims, (bi, g, hkv), (0, t));
    }
    (dq, dk, dv)
}

/// The gradients one kv head `g` of batch `bi` owns: dq `[group, T, D]` of its q heads, and its
/// own dk, dv `[T, D]`. Key tiles outer, so dk and dv of a tile finish before the next.
fn backward_group<T: Real>(
    io: &SwaBackward<Cow<[T]>>,
    dims: AttnShape,
    bi: usize,
    g: usize,
    window: usize,
    scale: T,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let AttnShape { t, h, hkv, d, .. } = dims;
    let group = h / hkv;
    let (qrs, krs) = (h * d, hkv * d);
    let kv = head_start(dims, bi, g, hkv);
    let (k, v) = (&io.input.k[kv..], &io.input.v[kv..]);
    let heads: Vec<usize> = (0..group)
        .map(|j| head_start(dims, bi, g * group + j, h))
        .collect();
    // delta_t = do_t · o_t: the softmax backward's row term, sum_s p_ts dp_ts.
    let delta: Vec<T> = heads
        .iter()
        .flat_map(|&start| {
            (0..t).map(move |tq| {
                let at = start + tq * qrs;
                (0..d)
                    .map(|x| io.dout[at + x] * io.out.o[at + x])
                    .sum::<T>()
            })
        })
        .collect();
    let mut dq = vec![T::zero(); group * t * d];
    let mut dk = vec![T::zero(); t * d];
    let mut dv = vec![T::zero(); t * d];
    let mut p = vec![T::zero(); BLOCK * BLOCK];
    let mut ds = vec![T::zero(); BLOCK * BLOCK];
    for s0 in (0..t).step_by(BLOCK) {
        let n = BLOCK.min(t - s0);
        let (keys, values) = (View::rows(k, s0, n, d, krs), View::rows(v, s0, n, d, krs));
        // The last query that sees any key of this tile.
        let q_end = (s0 + n - 1).saturating_add(window).min(t);
        for (j, &start) in heads.iter().enumerate() {
            let (q, dout) = (&io.input.q[start..], &io.dout[start..]);
            let row0 = (bi * h + g * group + j) * t;
            let (lse, delta) = (&io.out.lse[row0..row0 + t], &delta[j * t..(j + 1) * t]);
            for t0 in (s0..q_end).step_by(BLOCK) {
                let m = BLOCK.min(q_end - t0);
                let (query, dout) = (
                    View::rows(q, t0, m, d, qrs),
                    View::rows(dout, t0, m, d, qrs),
                );
                mm(&mut p, n, false, scale, query, keys.t());
                for r in 0..m {
                    for (c, x) in p[r * n..(r + 1) * n].iter_mut().enumerate() {
                        *x = if visible(t0 + r, s0 + c, window) {
                            (*x - lse[t0 + r]).exp()
                        } else {
                            T::zero()
                        };
                    }
                }
                mm(&mut ds, n, false, T::one(), dout, values.t());
                for r in 0..m {
                    for c in 0..n {
                        let at = r * n + c;
                        ds[at] = p[at] * (ds[at] - delta[t0 + r]);
                    }
                }
                let (probs, dscores) = (View::rows(&p, 0, m, n, n), View::rows(&ds, 0, m, n, n));
                mm(&mut dv[s0 * d..], d, true, T::one(), probs.t(), dout);
                mm(&mut dq[(j * t + t0) * d..], d, true, scale, dscores, keys);
                mm(&mut dk[s0 * d..], d, true, scale, dscores.t(), query);
            }
        }
    }
    (dq, dk, dv)
}
