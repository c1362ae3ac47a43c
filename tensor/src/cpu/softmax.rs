//! Softmax and log-softmax over contiguous rows, and their backwards.
use super::{Real, PAR_MIN};
use crate::backend::Softmax;
use rayon::prelude::*;

/// Runs `f(row_in..., row_out)` over rows of length `n`, in parallel when the buffer is large
/// (also for the row kernels in swax-nn).
pub fn for_rows<T: Real>(
    len: usize,
    n: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) -> Vec<T> {
    let mut out = vec![T::zero(); len];
    if n == 0 {
        return out;
    }
    if len >= PAR_MIN {
        out.par_chunks_mut(n).enumerate().for_each(|(r, o)| f(r, o));
    } else {
        out.chunks_mut(n).enumerate().for_each(|(r, o)| f(r, o));
    }
    out
}

pub(crate) fn softmax<T: Real>(x: &[T], n: usize, kind: Softmax) -> Vec<T> {
    for_rows(x.len(), n, |r, out| {
        let row = &x[r * n..(r + 1) * n];
        let m = row.iter().copied().fold(T::neg_infinity(), T::max);
        // A fully masked softmax row (all -inf) gives zeros rather than 0/0.
        let m = if m == T::neg_infinity() { T::zero() } else { m };
        if kind == Softmax::LogSoftmax {
            let log_sum = row.iter().map(|&v| (v - m).exp()).sum::<T>().ln();
            for (o, &v) in out.iter_mut().zip(row) {
                *o = v - m - log_sum;
            }
        } else {
            // One exp per element: write the numerators, then scale by the sum.
            let mut sum = T::zero();
            for (o, &v) in out.iter_mut().zip(row) {
                *o = (v - m).exp();
                sum = sum + *o;
            }
            let inv = if sum > T::zero() {
                sum.recip()
            } else {
                T::zero()
            };
            out.iter_mut().for_each(|o| *o = *o * inv);
        }
    })
}

pub(crate) fn softmax_backward<T: Real>(y: &[T], dy: &[T], n: usize, kind: Softmax) -> Vec<T> {
    for_rows(y.len(), n, |r, out| {
        let (yr, gr) = (&y[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
        if kind == Softmax::LogSoftmax {
            let total: T = gr.iter().copied().sum();
            for k in 0..n {
                out[k] = gr[k] - yr[k].exp() * total;
            }
        } else {
            let dot: T = yr.iter().zip(gr).map(|(&a, &b)| a * b).sum();
            for k in 0..n {
                out[k] = yr[k] * (gr[k] - dot);
            }
        }
    })
}
