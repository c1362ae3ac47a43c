//! Reductions along one axis of an `[outer, n, inner]` view, and the scatters and running sums
//! their backwards need.
use super::Real;
use crate::backend::{AxisDims, ReduceOp};

/// Folds the middle axis for every `(o, i)` output position.
fn fold<T: Real, R: Send + Copy>(
    x: &[T],
    d: AxisDims,
    f: impl Fn(&mut dyn Iterator<Item = T>) -> R + Sync,
) -> Vec<R> {
    let AxisDims { outer, n, inner } = d;
    let at = |j: usize| {
        let (o, i) = (j / inner, j % inner);
        let mut it = (0..n).map(move |k| x[(o * n + k) * inner + i]);
        f(&mut it)
    };
    let len = outer * inner;
    if len * n >= super::PAR_MIN {
        use rayon::prelude::*;
        (0..len).into_par_iter().map(at).collect()
    } else {
        (0..len).map(at).collect()
    }
}

pub(crate) fn reduce<T: Real>(x: &[T], op: ReduceOp, d: AxisDims) -> Vec<T> {
    let n = T::of(d.n as f64);
    fold(x, d, |it| match op {
        ReduceOp::Sum => it.sum(),
        ReduceOp::Mean => it.sum::<T>() / n,
        ReduceOp::Max => it.fold(T::neg_infinity(), T::max),
        ReduceOp::LogSumExp => {
            let v: Vec<T> = it.collect();
            let m = v.iter().copied().fold(T::neg_infinity(), T::max);
            if m == T::neg_infinity() {
                return m;
            }
            m + v.iter().map(|&e| (e - m).exp()).sum::<T>().ln()
        }
    })
}

/// The first index of the maximum (NaN compares as neither larger nor equal).
pub(crate) fn argmax<T: Real>(x: &[T], d: AxisDims) -> Vec<u32> {
    fold(x, d, |it| {
        let mut best = (0u32, T::neg_infinity());
        for (k, v) in it.enumerate() {
            if v > best.1 {
                best = (k as u32, v);
            }
        }
        best.0
    })
}

pub(crate) fn scatter_axis<T: Real>(src: &[T], idx: &[u32], d: AxisDims) -> Vec<T> {
    let AxisDims { outer, n, inner } = d;
    let mut out = vec![T::zero(); outer * n * inner];
    for o in 0..outer {
        for i in 0..inner {
            let j = o * inner + i;
            out[(o * n + idx[j] as usize) * inner + i] = src[j];
        }
    }
    out
}

pub(crate) fn cumsum<T: Real>(x: &[T], d: AxisDims, reverse: bool) -> Vec<T> {
    let AxisDims { outer, n, inner } = d;
    let mut out = vec![T::zero(); x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = T::zero();
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                let at = (o * n + k) * inner + i;
                acc = acc + x[at];
                out[at] = acc;
            }
        }
    }
    out
}
