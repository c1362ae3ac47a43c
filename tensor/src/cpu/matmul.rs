//! Batched matrix products through the `gemm` crate (a tuned, multithreaded CPU GEMM). Operand
//! transposes are folded into the strides it takes, so no transposed copy is ever made.
use super::Real;
use crate::backend::MatmulLayout;
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

/// Below this many multiply-adds per product, batches run in parallel with one thread each;
/// above it, each product is split over all threads.
const SMALL_PRODUCT: usize = 1 << 18;

pub(crate) fn matmul<T: Real>(a: &[T], b: &[T], l: &MatmulLayout) -> Vec<T> {
    let mut out = vec![T::zero(); l.batch * l.m * l.n];
    product_into(a, b, l, &mut out, false);
    out
}

/// `c += a · b` for the `batch` products of `l`, `c` holding them contiguously.
pub(crate) fn matmul_acc<T: Real>(a: &[T], b: &[T], l: &MatmulLayout, c: &mut [T]) {
    product_into(a, b, l, c, true);
}

/// Writes the products into `out`, or adds them to what it holds when `accumulate`.
fn product_into<T: Real>(a: &[T], b: &[T], l: &MatmulLayout, out: &mut [T], accumulate: bool) {
    let MatmulLayout { batch, m, n, k, .. } = *l;
    debug_assert_eq!(out.len(), batch * m * n);
    if m * n == 0 {
        return;
    }
    // (row stride, column stride) of each operand as the m×k and k×n matrices of the product.
    let (a_rs, a_cs) = if l.lhs_transposed { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if l.rhs_transposed { (1, k) } else { (n, 1) };
    let product = |bi: usize, c: &mut [T], par: Parallelism| {
        let (pa, pb) = (&a[bi * l.lhs_batch_stride..], &b[bi * l.rhs_batch_stride..]);
        // SAFETY: the op layer checked that every operand holds `batch` products of these sizes
        // at these strides, so each pointer walks only inside its slice; `c` is m×n, row-major.
        unsafe {
            gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                accumulate,
                pa.as_ptr(),
                a_cs as isize,
                a_rs as isize,
                pb.as_ptr(),
                b_cs as isize,
                b_rs as isize,
                // c = 1·c + 1·(a·b) when reading c, c = a·b otherwise.
                T::one(),
                T::one(),
                false,
                false,
                false,
                par,
            )
        }
    };
    if m * n * k < SMALL_PRODUCT && batch > 1 {
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(bi, c)| product(bi, c, Parallelism::None));
    } else {
        let threads = rayon::current_num_threads();
        let par = if m * n * k < SMALL_PRODUCT {
            Parallelism::None
        } else {
            Parallelism::Rayon(threads)
        };
        out.chunks_mut(m * n)
            .enumerate()
            .for_each(|(bi, c)| product(bi, c, par));
    }
}
