//! xLSTM's gated head norm on the CPU, forward and backward (the equations: `mod.rs`): one
//! row of D at a time, the row statistics recomputed in the backward.
use super::{GatedHeadNormBackward, GatedHeadNormGrads, GatedHeadNormIn};
use swax_tensor::backend::Backend;
use swax_tensor::cpu::{for_rows, row_stats, sigmoid, CpuStorage, Real};
use swax_tensor::{DType, Error, Result};

/// The forward on storage of any float dtype: bf16 computed in f32, y rounded back.
pub(super) fn forward(
    op: &'static str,
    x: &GatedHeadNormIn<&CpuStorage>,
    heads: usize,
    n: usize,
    eps: f64,
) -> Result<CpuStorage> {
    fn run<T: Real>(
        op: &'static str,
        x: &GatedHeadNormIn<&CpuStorage>,
        heads: usize,
        n: usize,
        eps: f64,
    ) -> Result<CpuStorage> {
        let v = x.try_map(|s| T::read(op, s))?;
        let y = forward_values(&v.x, &v.o, &v.weight, heads, n, eps);
        Ok(T::store(y, x.x.dtype()))
    }
    match x.x.dtype() {
        DType::F64 => run::<f64>(op, x, heads, n, eps),
        DType::F32 | DType::BF16 => run::<f32>(op, x, heads, n, eps),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The backward on storage of any float dtype, the gradients in the inputs' dtype.
pub(super) fn backward(
    op: &'static str,
    x: &GatedHeadNormBackward<&CpuStorage>,
    heads: usize,
    n: usize,
    eps: f64,
) -> Result<GatedHeadNormGrads<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &GatedHeadNormBackward<&CpuStorage>,
        heads: usize,
        n: usize,
        eps: f64,
    ) -> Result<GatedHeadNormGrads<CpuStorage>> {
        let v = x.try_map(|s| T::read(op, s))?;
        let i = &v.input;
        let (dx, d_o, dw) = backward_values(&i.x, &i.o, &i.weight, &v.dy, heads, n, eps);
        let out = |g: Vec<T>| T::store(g, x.input.x.dtype());
        Ok(GatedHeadNormIn {
            x: out(dx),
            o: out(d_o),
            weight: out(dw),
        })
    }
    match x.input.x.dtype() {
        DType::F64 => run::<f64>(op, x, heads, n, eps),
        DType::F32 | DType::BF16 => run::<f32>(op, x, heads, n, eps),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// xLSTM's gated head norm: with xhat the LayerNorm of each row of `n` (no affine of its own)
/// and row r in head `r % heads`, y = xhat · w[head] · sigmoid(o); `w` is `[heads, n]`.
fn forward_values<T: Real>(x: &[T], o: &[T], w: &[T], heads: usize, n: usize, eps: f64) -> Vec<T> {
    for_rows(x.len(), n, |r, out| {
        let (xr, or, wh) = (
            &x[r * n..(r + 1) * n],
            &o[r * n..(r + 1) * n],
            &w[(r % heads) * n..(r % heads + 1) * n],
        );
        let (mean, rstd) = row_stats(xr, eps);
        for k in 0..n {
            out[k] = (xr[k] - mean) * rstd * wh[k] * sigmoid(or[k]);
        }
    })
}

/// Backward of [`forward_values`], the statistics recomputed: with s = sigmoid(o) and
/// g = dy·s·w (the gradient reaching xhat), dx = rstd·(g − mean(g) − xhat·mean(g·xhat)),
/// do = dy·xhat·w·s·(1 − s), dw[head] = Σ over the head's rows of dy·s·xhat.
fn backward_values<T: Real>(
    x: &[T],
    o: &[T],
    w: &[T],
    dy: &[T],
    heads: usize,
    n: usize,
    eps: f64,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let nf = T::of(n as f64);
    let rows = x.len().checked_div(n).unwrap_or(0);
    let stats: Vec<(T, T)> = (0..rows)
        .map(|r| row_stats(&x[r * n..(r + 1) * n], eps))
        .collect();
    let xhat = |r: usize, k: usize| (x[r * n + k] - stats[r].0) * stats[r].1;
    let gate = |r: usize, k: usize| sigmoid(o[r * n + k]);
    let wt = |r: usize, k: usize| w[(r % heads) * n + k];
    let dx = for_rows(x.len(), n, |r, out| {
        let g = |k: usize| dy[r * n + k] * gate(r, k) * wt(r, k);
        let mean_g = (0..n).map(g).sum::<T>() / nf;
        let mean_gx = (0..n).map(|k| g(k) * xhat(r, k)).sum::<T>() / nf;
        for k in 0..n {
            out[k] = stats[r].1 * (g(k) - mean_g - xhat(r, k) * mean_gx);
        }
    });
    let d_o = for_rows(x.len(), n, |r, out| {
        for k in 0..n {
            let s = gate(r, k);
            out[k] = dy[r * n + k] * xhat(r, k) * wt(r, k) * s * (T::one() - s);
        }
    });
    let mut dw = vec![T::zero(); heads * n];
    for r in 0..rows {
        let h = r % heads;
        for k in 0..n {
            dw[h * n + k] = dw[h * n + k] + dy[r * n + k] * gate(r, k) * xhat(r, k);
        }
    }
    (dx, d_o, dw)
}
