//! Data movement: strided gathers and copies (behind transpose, permute, narrow, concat, pad and
//! broadcast), and index select / index add along an axis (behind embeddings).
use super::Real;
use crate::backend::{AxisDims, StridedLayout};

/// Calls `f(src_offset, dst_offset, run)` for each contiguous run of the innermost dim, so the
/// callers copy slices rather than single elements.
fn for_each_run(
    shape: &[usize],
    src: &[usize],
    src_off: usize,
    dst: &[usize],
    dst_off: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let rank = shape.len();
    if rank == 0 {
        return f(src_off, dst_off, 1);
    }
    let last = shape[rank - 1];
    let contiguous = src[rank - 1] == 1 && dst[rank - 1] == 1;
    for r in 0..n / last {
        let (mut rest, mut s, mut d) = (r, src_off, dst_off);
        for i in (0..rank - 1).rev() {
            let c = rest % shape[i];
            rest /= shape[i];
            s += c * src[i];
            d += c * dst[i];
        }
        if contiguous {
            f(s, d, last);
        } else {
            for j in 0..last {
                f(s + j * src[rank - 1], d + j * dst[rank - 1], 1);
            }
        }
    }
}

fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    crate::Shape::new(shape).strides()
}

pub(crate) fn gather_strided<T: Copy + Default>(x: &[T], l: &StridedLayout) -> Vec<T> {
    let mut out = vec![T::default(); l.shape.iter().product()];
    let dst = contiguous_strides(&l.shape);
    for_each_run(&l.shape, &l.strides, l.offset, &dst, 0, |s, d, run| {
        out[d..d + run].copy_from_slice(&x[s..s + run]);
    });
    out
}

pub(crate) fn copy_into<T: Copy>(x: &[T], src: &StridedLayout, out: &mut [T], dst: &StridedLayout) {
    for_each_run(
        &src.shape,
        &src.strides,
        src.offset,
        &dst.strides,
        dst.offset,
        |s, d, run| {
            out[d..d + run].copy_from_slice(&x[s..s + run]);
        },
    );
}

/// `ids` were checked to be `< d.n` by the op layer.
pub(crate) fn index_select<T: Copy + Default>(x: &[T], ids: &[u32], d: AxisDims) -> Vec<T> {
    let AxisDims { outer, n, inner } = d;
    let m = ids.len();
    let mut out = vec![T::default(); outer * m * inner];
    for o in 0..outer {
        for (j, &id) in ids.iter().enumerate() {
            let s = (o * n + id as usize) * inner;
            let t = (o * m + j) * inner;
            out[t..t + inner].copy_from_slice(&x[s..s + inner]);
        }
    }
    out
}

/// `x` is `[outer, ids.len(), inner]`; the result `[outer, n, inner]`.
pub(crate) fn index_add<T: Real>(x: &[T], ids: &[u32], d: AxisDims) -> Vec<T> {
    let AxisDims { outer, n, inner } = d;
    let m = ids.len();
    let mut out = vec![T::zero(); outer * n * inner];
    for o in 0..outer {
        for (j, &id) in ids.iter().enumerate() {
            let s = (o * m + j) * inner;
            let t = (o * n + id as usize) * inner;
            for (acc, &v) in out[t..t + inner].iter_mut().zip(&x[s..s + inner]) {
                *acc = *acc + v;
            }
        }
    }
    out
}
