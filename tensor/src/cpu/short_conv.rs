//! Causal depthwise convolution along time (the short convolution of Gated DeltaNet and Mamba
//! layers), forward and backward in one pass over the input each: composing it from shifted
//! copies would read and write the whole activation K times.
use super::Real;
use crate::backend::ConvDims;
use rayon::prelude::*;

/// `y[b, t, c] = bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c]`, batches in parallel.
pub(crate) fn forward<T: Real>(x: &[T], w: &[T], bias: &[T], dims: ConvDims) -> Vec<T> {
    let ConvDims { t, c, k, .. } = dims;
    let mut y = vec![T::zero(); x.len()];
    if y.is_empty() {
        return y;
    }
    y.par_chunks_mut(t * c).enumerate().for_each(|(b, yb)| {
        let xb = &x[b * t * c..(b + 1) * t * c];
        for ti in 0..t {
            let out = &mut yb[ti * c..(ti + 1) * c];
            out.copy_from_slice(bias);
            for j in 0..k {
                let Some(src) = (ti + j + 1).checked_sub(k) else {
                    continue;
                };
                for (ch, o) in out.iter_mut().enumerate() {
                    *o = *o + w[ch * k + j] * xb[src * c + ch];
                }
            }
        }
    });
    y
}

/// `(dx, dw, dbias)`: dx is the convolution of dy run backwards in time with the same taps;
/// dw and dbias sum over batch and time (per batch in parallel, then added).
pub(crate) fn backward<T: Real>(
    x: &[T],
    w: &[T],
    dy: &[T],
    dims: ConvDims,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let ConvDims { b, t, c, k } = dims;
    let mut dx = vec![T::zero(); x.len()];
    if dx.is_empty() {
        return (dx, vec![T::zero(); c * k], vec![T::zero(); c]);
    }
    let partial: Vec<(Vec<T>, Vec<T>)> = dx
        .par_chunks_mut(t * c)
        .enumerate()
        .map(|(bi, dxb)| {
            let (xb, dyb) = (
                &x[bi * t * c..(bi + 1) * t * c],
                &dy[bi * t * c..(bi + 1) * t * c],
            );
            let (mut dw, mut db) = (vec![T::zero(); c * k], vec![T::zero(); c]);
            for ti in 0..t {
                let g = &dyb[ti * c..(ti + 1) * c];
                for (d, &g) in db.iter_mut().zip(g) {
                    *d = *d + g;
                }
                for j in 0..k {
                    let Some(src) = (ti + j + 1).checked_sub(k) else {
                        continue;
                    };
                    for ch in 0..c {
                        dw[ch * k + j] = dw[ch * k + j] + g[ch] * xb[src * c + ch];
                        dxb[src * c + ch] = dxb[src * c + ch] + g[ch] * w[ch * k + j];
                    }
                }
            }
            (dw, db)
        })
        .collect();
    let mut dw = vec![T::zero(); c * k];
    let mut db = vec![T::zero(); c];
    for (pw, pb) in partial.iter().take(b) {
        for (d, &p) in dw.iter_mut().zip(pw) {
            *d = *d + p;
        }
        for (d, &p) in db.iter_mut().zip(pb) {
            *d = *d + p;
        }
    }
    (dx, dw, db)
}
