//! What the chunkwise recurrent CPU kernels (the mLSTM's and the gated delta rule's, in swax-nn)
//! share: one (batch, head) sequence cut out of a `[B, T, H, D]` buffer as contiguous chunk tiles
//! and put back, small row-major tile products through the shared gemm, and the parallel loop
//! over heads.
use super::matmul::matmul;
use super::Real;
use crate::backend::MatmulLayout;
use rayon::prelude::*;
use swax_cuda::kernels::chunk::RecurrentShape;

/// Rows `t0..t0 + len` of head `bh` (= b·H + h) of a `[B, T, H, d]` buffer, as a `[len, d]`
/// tile (`d = 1` for the per-head gates `[B, T, H]`).
pub fn rows<T: Real>(
    x: &[T],
    dims: &RecurrentShape,
    d: usize,
    bh: usize,
    t0: usize,
    len: usize,
) -> Vec<T> {
    let (b, h) = (bh / dims.h, bh % dims.h);
    let mut out = Vec::with_capacity(len * d);
    for t in t0..t0 + len {
        let at = ((b * dims.t + t) * dims.h + h) * d;
        out.extend_from_slice(&x[at..at + d]);
    }
    out
}

/// Puts per-head `[T, d]` buffers (in b·H + h order) back into one `[B, T, H, d]` buffer.
pub fn interleave<T: Real>(heads: &[&[T]], dims: &RecurrentShape, d: usize) -> Vec<T> {
    let mut out = vec![T::zero(); dims.b * dims.t * dims.h * d];
    for (bh, head) in heads.iter().enumerate() {
        let (b, h) = (bh / dims.h, bh % dims.h);
        for t in 0..dims.t {
            let at = ((b * dims.t + t) * dims.h + h) * d;
            out[at..at + d].copy_from_slice(&head[t * d..(t + 1) * d]);
        }
    }
    out
}

/// Runs `job` for every (batch, head) pair, in parallel, results in b·H + h order: heads are
/// independent, and within a head the chunks depend on each other through the state.
pub fn per_head<R: Send>(dims: &RecurrentShape, job: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    (0..dims.b * dims.h).into_par_iter().map(job).collect()
}

/// `op(a) · op(b)`, `m × n` with inner size `k`, all row-major; a transposed operand is stored as
/// its transpose (`a` as `k × m`).
pub fn mm<T: Real>(a: &[T], ta: bool, b: &[T], tb: bool, m: usize, k: usize, n: usize) -> Vec<T> {
    let layout = MatmulLayout {
        batch: 1,
        m,
        n,
        k,
        lhs_transposed: ta,
        rhs_transposed: tb,
        lhs_batch_stride: 0,
        rhs_batch_stride: 0,
    };
    matmul(a, b, &layout)
}

pub fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    a.iter().zip(b).map(|(&x, &y)| x * y).sum()
}

/// `y += c · x`.
pub fn axpy<T: Real>(y: &mut [T], c: T, x: &[T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = *y + c * x;
    }
}

/// Each row of a `[rows, d]` tile times its own factor.
pub fn scale_rows<T: Real>(x: &[T], factors: &[T], d: usize) -> Vec<T> {
    x.chunks(d.max(1))
        .zip(factors)
        .flat_map(|(row, &c)| row.iter().map(move |&v| v * c))
        .collect()
}

/// Running sums from the end: the gradient of an inclusive cumulative sum.
pub fn reverse_cumsum<T: Real>(x: &[T]) -> Vec<T> {
    let mut out = x.to_vec();
    for j in (0..out.len().saturating_sub(1)).rev() {
        out[j] = out[j] + out[j + 1];
    }
    out
}
