//! Cross-entropy over logit rows with integer targets: the mean over rows that are not ignored.
//! Rows are independent, so the forward saves each row's log-sum-exp and the backward needs no
//! second pass over the logits to normalise.
use super::softmax::for_rows;
use super::Real;

/// Returns the loss summed over the rows whose target is not ignored, the per-row log-sum-exp,
/// and the number of rows counted. Targets were checked to be `< v` (or the ignore index).
pub(crate) fn cross_entropy_sum<T: Real>(
    x: &[T],
    targets: &[u32],
    v: usize,
    ignore: Option<u32>,
) -> (T, Vec<T>, usize) {
    let lse: Vec<T> = (0..targets.len())
        .map(|r| {
            let row = &x[r * v..(r + 1) * v];
            let m = row.iter().copied().fold(T::neg_infinity(), T::max);
            m + row.iter().map(|&e| (e - m).exp()).sum::<T>().ln()
        })
        .collect();
    let count = targets.iter().filter(|&&t| Some(t) != ignore).count();
    let total: T = targets
        .iter()
        .enumerate()
        .filter(|(_, &t)| Some(t) != ignore)
        .map(|(r, &t)| lse[r] - x[r * v + t as usize])
        .sum();
    (total, lse, count)
}

/// The mean of [`cross_entropy_sum`]'s loss (0 when every row is ignored: nothing to learn
/// from, and no NaN), the per-row log-sum-exp, and the number of rows counted.
pub(crate) fn cross_entropy<T: Real>(
    x: &[T],
    targets: &[u32],
    v: usize,
    ignore: Option<u32>,
) -> (T, Vec<T>, usize) {
    let (total, lse, count) = cross_entropy_sum(x, targets, v, ignore);
    let loss = if count == 0 {
        T::zero()
    } else {
        total / T::of(count as f64)
    };
    (loss, lse, count)
}

pub(crate) fn cross_entropy_backward<T: Real>(
    x: &[T],
    targets: &[u32],
    lse: &[T],
    dloss: f64,
    count: usize,
    v: usize,
    ignore: Option<u32>,
) -> Vec<T> {
    let scale = T::of(dloss / count.max(1) as f64);
    for_rows(x.len(), v, |r, out| {
        let t = targets[r];
        if Some(t) == ignore {
            return;
        }
        for (k, o) in out.iter_mut().enumerate() {
            let p = (x[r * v + k] - lse[r]).exp();
            let onehot = if k == t as usize { T::one() } else { T::zero() };
            *o = (p - onehot) * scale;
        }
    })
}
