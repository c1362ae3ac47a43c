//! RMSNorm and LayerNorm over the last axis, with weight (and bias), forward and backward.
//! Statistics accumulate in the compute type (f32 for f32/bf16 storage, f64 for f64).
use super::softmax::for_rows;
use super::Real;

/// Sums per-row contributions into one vector of length `n` (weight and bias gradients).
fn column_sums<T: Real>(rows: usize, n: usize, f: impl Fn(usize, usize) -> T) -> Vec<T> {
    let mut acc = vec![T::zero(); n];
    for r in 0..rows {
        for (k, a) in acc.iter_mut().enumerate() {
            *a = *a + f(r, k);
        }
    }
    acc
}

/// y = x·rstd·w, plus `res` where given; rstd = 1 / sqrt(mean(x²) + eps) per row.
pub(crate) fn rms_norm<T: Real>(
    x: &[T],
    w: &[T],
    res: Option<&[T]>,
    n: usize,
    eps: f64,
) -> (Vec<T>, Vec<T>) {
    let rows = x.len().checked_div(n).unwrap_or(0);
    let rstd: Vec<T> = (0..rows)
        .map(|r| {
            let row = &x[r * n..(r + 1) * n];
            let ms = row.iter().map(|&v| v * v).sum::<T>() / T::of(n as f64);
            (ms + T::of(eps)).sqrt().recip()
        })
        .collect();
    let y = for_rows(x.len(), n, |r, out| {
        for k in 0..n {
            let i = r * n + k;
            out[k] = x[i] * rstd[r] * w[k] + res.map_or(T::zero(), |res| res[i]);
        }
    });
    (y, rstd)
}

/// With xhat = x·rstd: dx = rstd·(g − xhat·mean(g·xhat)) where g = dy·w, plus `dres` where
/// given (a residual's gradient reaching x by another path); dw = Σ_rows dy·xhat.
pub(crate) fn rms_norm_backward<T: Real>(
    x: &[T],
    w: &[T],
    rstd: &[T],
    dy: &[T],
    dres: Option<&[T]>,
    n: usize,
) -> (Vec<T>, Vec<T>) {
    let nf = T::of(n as f64);
    let dx = for_rows(x.len(), n, |r, out| {
        let (xr, gr) = (&x[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
        let dot: T = (0..n).map(|k| gr[k] * w[k] * xr[k] * rstd[r]).sum::<T>() / nf;
        for k in 0..n {
            let res = dres.map_or(T::zero(), |d| d[r * n + k]);
            out[k] = rstd[r] * (gr[k] * w[k] - xr[k] * rstd[r] * dot) + res;
        }
    });
    let rows = rstd.len();
    let dw = column_sums(rows, n, |r, k| dy[r * n + k] * x[r * n + k] * rstd[r]);
    (dx, dw)
}

pub(crate) fn layer_norm<T: Real>(
    x: &[T],
    w: &[T],
    b: &[T],
    n: usize,
    eps: f64,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let rows = x.len().checked_div(n).unwrap_or(0);
    let (mean, rstd): (Vec<T>, Vec<T>) = (0..rows)
        .map(|r| row_stats(&x[r * n..(r + 1) * n], eps))
        .unzip();
    let y = for_rows(x.len(), n, |r, out| {
        for k in 0..n {
            out[k] = (x[r * n + k] - mean[r]) * rstd[r] * w[k] + b[k];
        }
    });
    (y, mean, rstd)
}

/// With xhat = (x − mean)·rstd and g = dy·w: dx = rstd·(g − mean(g) − xhat·mean(g·xhat)).
pub(crate) fn layer_norm_backward<T: Real>(
    x: &[T],
    w: &[T],
    mean: &[T],
    rstd: &[T],
    dy: &[T],
    n: usize,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let nf = T::of(n as f64);
    let xhat = |r: usize, k: usize| (x[r * n + k] - mean[r]) * rstd[r];
    let dx = for_rows(x.len(), n, |r, out| {
        let g = |k: usize| dy[r * n + k] * w[k];
        let mean_g = (0..n).map(g).sum::<T>() / nf;
        let mean_gx = (0..n).map(|k| g(k) * xhat(r, k)).sum::<T>() / nf;
        for k in 0..n {
            out[k] = rstd[r] * (g(k) - mean_g - xhat(r, k) * mean_gx);
        }
    });
    let rows = rstd.len();
    let dw = column_sums(rows, n, |r, k| dy[r * n + k] * xhat(r, k));
    let db = column_sums(rows, n, |r, k| dy[r * n + k]);
    (dx, dw, db)
}

/// A row's mean and rstd = 1 / sqrt(biased variance + eps): LayerNorm's statistics (also
/// those of xLSTM's gated head norm, in swax-nn).
pub fn row_stats<T: Real>(row: &[T], eps: f64) -> (T, T) {
    let nf = T::of(row.len() as f64);
    let mean = row.iter().copied().sum::<T>() / nf;
    let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<T>() / nf;
    (mean, (var + T::of(eps)).sqrt().recip())
}
