//! RAttention's residual linear attention on the CPU, chunkwise, with the feature map fused in.
//!
//! `o_t = phi(q_t) · S_{t-W}`, `S_u = sum_{s <= u} phi(k_s)^T v_s`. Shifting keys and values
//! W steps later (`k'_t = k_{t-W}`, nothing before W) turns this into plain causal linear
//! attention between q_t and the shifted keys `s' <= t`, which runs chunk by chunk: a chunk's
//! output is its queries against the state at the chunk's start plus a masked quadratic term
//! inside the chunk; then the state takes the chunk's keys. The cost is O(T·C·D + T·D²).
//!
//! One task per (batch, kv head): the state belongs to the kv head, and every q head of its group
//! reads it. The backward keeps the states at chunk boundaries (from a first pass over keys and
//! values only), then walks the chunks in reverse carrying the state's gradient.
use super::{RlaBackward, RlaGrads, RlaIn};
use crate::mixers::attention::cpu::place_groups;
use crate::mixers::attention::tile::{mm, place, View};
use crate::mixers::attention::SwaIn;
use rayon::prelude::*;
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::backend::Backend;
use swax_tensor::cpu::{CpuStorage, Real};
use swax_tensor::{DType, Error, Result};

/// `phi(x) = [softmax(x), softmax(-x)]` of one head row into `out` (2D wide).
fn feature<T: Real>(x: &[T], out: &mut [T]) {
    let (pos, neg) = out.split_at_mut(x.len());
    let max = x.iter().copied().fold(T::neg_infinity(), T::max);
    let min = x.iter().copied().fold(T::infinity(), T::min);
    for ((&xi, p), n) in x.iter().zip(pos.iter_mut()).zip(neg.iter_mut()) {
        *p = (xi - max).exp();
        *n = (min - xi).exp();
    }
    let (sp, sn) = (
        pos.iter().copied().sum::<T>(),
        neg.iter().copied().sum::<T>(),
    );
    pos.iter_mut().for_each(|p| *p = *p / sp);
    neg.iter_mut().for_each(|n| *n = *n / sn);
}

/// The gradient of one row `x` from its features' gradient `g` (2D wide): each half is a
/// softmax backward, the second one negated. `f` is scratch, 2D wide.
fn feature_backward<T: Real>(x: &[T], g: &[T], f: &mut [T], dx: &mut [T]) {
    feature(x, f);
    let d = x.len();
    let (p, n) = f.split_at(d);
    let (gp, gn) = g.split_at(d);
    let dot = |a: &[T], b: &[T]| a.iter().zip(b).map(|(&x, &y)| x * y).sum::<T>();
    let (dp, dn) = (dot(p, gp), dot(n, gn));
    for i in 0..d {
        dx[i] = p[i] * (gp[i] - dp) - n[i] * (gn[i] - dn);
    }
}

/// A kv head's inputs in the form the chunk loops read: phi of each q head of its group
/// `[group, T, 2D]`, and the shifted phi(k) `[T, 2D]` and v `[T, D]`, zero before `shift`.
struct Group<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    shift: usize,
}

impl<T: Real> Group<T> {
    fn new(
        q: &[T],
        k: &[T],
        v: &[T],
        dims: AttnShape,
        (bi, g): (usize, usize),
        window: usize,
    ) -> Self {
        let AttnShape { t, h, hkv, d, .. } = dims;
        let (group, f, shift) = (h / hkv, 2 * d, window.min(t));
        let mut fq = vec![T::zero(); group * t * f];
        for (i, out) in fq.chunks_mut(f).enumerate() {
            let at = ((bi * t + i % t) * h + g * group + i / t) * d;
            feature(&q[at..at + d], out);
        }
        let mut fk = vec![T::zero(); t * f];
        let mut sv = vec![T::zero(); t * d];
        for s in 0..t - shift {
            let at = ((bi * t + s) * hkv + g) * d;
            let to = s + shift;
            feature(&k[at..at + d], &mut fk[to * f..(to + 1) * f]);
            sv[to * d..(to + 1) * d].copy_from_slice(&v[at..at + d]);
        }
        Group {
            q: fq,
            k: fk,
            v: sv,
            shift,
        }
    }

    fn query(&self, j: usize, c0: usize, n: usize, t: usize) -> View<'_, T> {
        let f = self.k.len() / t;
        View::rows(&self.q[j * t * f..], c0, n, f, f)
    }
}

/// Zeroes what lies above the diagonal of an `n × n` tile: query i sees shifted keys j <= i.
fn lower<T: Real>(a: &mut [T], n: usize) {
    for i in 0..n {
        a[i * n + i + 1..(i + 1) * n].fill(T::zero());
    }
}

/// Chunk starts and lengths, skipping the leading chunks whose shifted keys are all zero: their
/// outputs and gradients are zero.
fn chunks(t: usize, chunk: usize, shift: usize) -> impl DoubleEndedIterator<Item = (usize, usize)> {
    (0..t)
        .step_by(chunk)
        .map(move |c0| (c0, chunk.min(t - c0)))
        .filter(move |&(c0, n)| c0 + n > shift)
}

/// The forward on storage of any float dtype (bf16 computed in f32, o rounded back).
pub(super) fn forward(
    op: &'static str,
    x: &RlaIn<&CpuStorage>,
    dims: &AttnShape,
    window: usize,
    chunk: usize,
) -> Result<CpuStorage> {
    fn run<T: Real>(
        op: &'static str,
        x: &RlaIn<&CpuStorage>,
        dims: AttnShape,
        window: usize,
        chunk: usize,
    ) -> Result<CpuStorage> {
        let dtype = x.q.dtype();
        let x = x.try_map(|s| T::read(op, s))?;
        let o = forward_values(&x.q, &x.k, &x.v, dims, window, chunk);
        Ok(T::store(o, dtype))
    }
    match x.q.dtype() {
        DType::F64 => run::<f64>(op, x, *dims, window, chunk),
        DType::F32 | DType::BF16 => run::<f32>(op, x, *dims, window, chunk),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The backward on storage of any float dtype, the gradients in the inputs' dtype.
pub(super) fn backward(
    op: &'static str,
    x: &RlaBackward<&CpuStorage>,
    dims: &AttnShape,
    window: usize,
    chunk: usize,
) -> Result<RlaGrads<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &RlaBackward<&CpuStorage>,
        dims: AttnShape,
        window: usize,
        chunk: usize,
    ) -> Result<RlaGrads<CpuStorage>> {
        let dtype = x.input.q.dtype();
        let i = x.input.try_map(|s| T::read(op, s))?;
        let dout = T::read(op, x.dout)?;
        let (dq, dk, dv) = backward_values(&i.q, &i.k, &i.v, &dout, dims, window, chunk);
        Ok(SwaIn {
            q: T::store(dq, dtype),
            k: T::store(dk, dtype),
            v: T::store(dv, dtype),
        })
    }
    match x.input.q.dtype() {
        DType::F64 => run::<f64>(op, x, *dims, window, chunk),
        DType::F32 | DType::BF16 => run::<f32>(op, x, *dims, window, chunk),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

fn forward_values<T: Real>(
    q: &[T],
    k: &[T],
    v: &[T],
    dims: AttnShape,
    window: usize,
    chunk: usize,
) -> Vec<T> {
    let AttnShape { b, t, h, hkv, d } = dims;
    let parts: Vec<Vec<T>> = (0..b * hkv)
        .into_par_iter()
        .map(|task| {
            let gr = Group::new(q, k, v, dims, (task / hkv, task % hkv), window);
            forward_group(&gr, dims, chunk)
        })
        .collect();
    let mut o = vec![T::zero(); b * t * h * d];
    for (task, part) in parts.iter().enumerate() {
        let (bi, g) = (task / hkv, task % hkv);
        place(&mut o, part, dims, (bi, g * (h / hkv), h), (0, t));
    }
    o
}

/// The outputs `[group, T, D]` of one kv head's q heads.
fn forward_group<T: Real>(gr: &Group<T>, dims: AttnShape, chunk: usize) -> Vec<T> {
    let AttnShape { t, h, hkv, d, .. } = dims;
    let (group, f) = (h / hkv, 2 * d);
    let mut state = vec![T::zero(); f * d];
    let mut o = vec![T::zero(); group * t * d];
    let mut a = vec![T::zero(); chunk * chunk];
    for (c0, n) in chunks(t, chunk, gr.shift) {
        let (keys, values) = (
            View::rows(&gr.k, c0, n, f, f),
            View::rows(&gr.v, c0, n, d, d),
        );
        for j in 0..group {
            let query = gr.query(j, c0, n, t);
            mm(&mut a, n, false, T::one(), query, keys.t());
            lower(&mut a, n);
            let out = &mut o[(j * t + c0) * d..];
            mm(out, d, false, T::one(), View::rows(&a, 0, n, n, n), values);
            mm(
                out,
                d,
                true,
                T::one(),
                query,
                View::rows(&state, 0, f, d, d),
            );
        }
        mm(&mut state, d, true, T::one(), keys.t(), values);
    }
    o
}

fn backward_values<T: Real>(
    q: &[T],
    k: &[T],
    v: &[T],
    dout: &[T],
    dims: AttnShape,
    window: usize,
    chunk: usize,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let AttnShape { b, hkv, .. } = dims;
    let parts: Vec<(Vec<T>, Vec<T>, Vec<T>)> = (0..b * hkv)
        .into_par_iter()
        .map(|task| {
            let (bi, g) = (task / hkv, task % hkv);
            let gr = Group::new(q, k, v, dims, (bi, g), window);
            let (dfq, dfk, dsv) = backward_group(&gr, dout, dims, (bi, g), chunk);
            inputs_grad(q, k, dims, (bi, g), &gr, (dfq, dfk, dsv))
        })
        .collect();
    place_groups(&parts, dims)
}

/// Gradients of one kv head's features: phi(q) `[group, T, 2D]`, shifted phi(k) `[T, 2D]` and
/// shifted v `[T, D]`.
fn backward_group<T: Real>(
    gr: &Group<T>,
    dout: &[T],
    dims: AttnShape,
    (bi, g): (usize, usize),
    chunk: usize,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let AttnShape { t, h, hkv, d, .. } = dims;
    let (group, f) = (h / hkv, 2 * d);
    let mut states = vec![T::zero(); t.div_ceil(chunk) * f * d];
    let mut state = vec![T::zero(); f * d];
    for (c0, n) in chunks(t, chunk, gr.shift) {
        states[c0 / chunk * f * d..][..f * d].copy_from_slice(&state);
        let (keys, values) = (
            View::rows(&gr.k, c0, n, f, f),
            View::rows(&gr.v, c0, n, d, d),
        );
        mm(&mut state, d, true, T::one(), keys.t(), values);
    }
    // The gradient of the state that later chunks read.
    let mut dstate = vec![T::zero(); f * d];
    let mut dfq = vec![T::zero(); group * t * f];
    let mut dfk = vec![T::zero(); t * f];
    let mut dsv = vec![T::zero(); t * d];
    let (mut a, mut da) = (
        vec![T::zero(); chunk * chunk],
        vec![T::zero(); chunk * chunk],
    );
    for (c0, n) in chunks(t, chunk, gr.shift).rev() {
        let (keys, values) = (
            View::rows(&gr.k, c0, n, f, f),
            View::rows(&gr.v, c0, n, d, d),
        );
        let state = View::rows(&states[c0 / chunk * f * d..], 0, f, d, d);
        let (dk, dv) = (&mut dfk[c0 * f..], &mut dsv[c0 * d..]);
        for j in 0..group {
            let query = gr.query(j, c0, n, t);
            let start = ((bi * t) * h + g * group + j) * d;
            let dout = View::rows(&dout[start..], c0, n, d, h * d);
            mm(&mut a, n, false, T::one(), query, keys.t());
            lower(&mut a, n);
            mm(&mut da, n, false, T::one(), dout, values.t());
            lower(&mut da, n);
            let (scores, dscores) = (View::rows(&a, 0, n, n, n), View::rows(&da, 0, n, n, n));
            let dq = &mut dfq[(j * t + c0) * f..];
            mm(dq, f, false, T::one(), dscores, keys);
            mm(dq, f, true, T::one(), dout, state.t());
            mm(dk, f, true, T::one(), dscores.t(), query);
            mm(dv, d, true, T::one(), scores.t(), dout);
        }
        let dst = View::rows(&dstate, 0, f, d, d);
        mm(dk, f, true, T::one(), values, dst.t());
        mm(dv, d, true, T::one(), keys, dst);
        for j in 0..group {
            let start = ((bi * t) * h + g * group + j) * d;
            let dout = View::rows(&dout[start..], c0, n, d, h * d);
            mm(
                &mut dstate,
                d,
                true,
                T::one(),
                gr.query(j, c0, n, t).t(),
                dout,
            );
        }
    }
    (dfq, dfk, dsv)
}

/// Carries the features' gradients back through phi and the shift: dq `[group, T, D]` and
/// dk, dv `[T, D]` of kv head `g` of batch `bi`.
fn inputs_grad<T: Real>(
    q: &[T],
    k: &[T],
    dims: AttnShape,
    (bi, g): (usize, usize),
    gr: &Group<T>,
    (dfq, dfk, dsv): (Vec<T>, Vec<T>, Vec<T>),
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let AttnShape { t, h, hkv, d, .. } = dims;
    let (group, f) = (h / hkv, 2 * d);
    let mut scratch = vec![T::zero(); f];
    let mut dq = vec![T::zero(); group * t * d];
    for (i, dx) in dq.chunks_mut(d).enumerate() {
        let at = ((bi * t + i % t) * h + g * group + i / t) * d;
        feature_backward(&q[at..at + d], &dfq[i * f..(i + 1) * f], &mut scratch, dx);
    }
    let mut dk = vec![T::zero(); t * d];
    let mut dv = vec![T::zero(); t * d];
    for s in 0..t - gr.shift {
        let (at, from) = (((bi * t + s) * hkv + g) * d, s + gr.shift);
        let dx = &mut dk[s * d..(s + 1) * d];
        feature_backward(
            &k[at..at + d],
            &dfk[from * f..(from + 1) * f],
            &mut scratch,
            dx,
        );
        dv[s * d..(s + 1) * d].copy_from_slice(&dsv[from * d..(from + 1) * d]);
    }
    (dq, dk, dv)
}
