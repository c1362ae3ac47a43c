//! Tiles of larger buffers for the attention mixers' CPU kernels (SWA's and RAttention's linear
//! branch): single-threaded `gemm` products on strided views (the kernels already run one task
//! per core), so no tile is copied or transposed first, and the copy of a task's rows back into
//! a `[B, T, heads, D]` layout.
use gemm::{gemm, Parallelism};
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::cpu::Real;

/// A `rows × cols` matrix inside a slice: element (i, j) at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct View<'a, T> {
    pub data: &'a [T],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> View<'a, T> {
    /// Rows `start..start + rows` of a row-major matrix whose rows are `rs` apart and `cols`
    /// wide (a head's rows inside `[T, H, D]` are `H · D` apart).
    pub fn rows(data: &'a [T], start: usize, rows: usize, cols: usize, rs: usize) -> Self {
        View {
            data: &data[start * rs..],
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    pub fn t(self) -> Self {
        View {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

/// `dst = beta · a · b`, or `dst += beta · a · b` when `accumulate`; dst is `a.rows × b.cols`
/// with rows `dst_rs` apart.
pub(crate) fn mm<T: Real>(
    dst: &mut [T],
    dst_rs: usize,
    accumulate: bool,
    beta: T,
    a: View<T>,
    b: View<T>,
) {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    let out = View {
        data: &*dst,
        rows: m,
        cols: n,
        rs: dst_rs,
        cs: 1,
    };
    assert!(
        b.rows == k && a.fits() && b.fits() && out.fits(),
        "tile product out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|i| dst[i * dst_rs..i * dst_rs + n].fill(T::zero()));
        }
        return;
    }
    // SAFETY: the assert above keeps every element the three views address inside its slice,
    // and `dst` is borrowed mutably, so it aliases neither operand.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            T::one(),
            beta,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

/// Copies `rows`, laid out `[n, len, D]`, to times `t0..t0 + len` of heads `first..first + n` of
/// batch `b` in `dst`, a `[B, T, heads, D]` buffer.
pub(crate) fn place<T: Copy>(
    dst: &mut [T],
    rows: &[T],
    dims: AttnShape,
    (b, first, heads): (usize, usize, usize),
    (t0, len): (usize, usize),
) {
    let d = dims.d;
    for (i, row) in rows.chunks(d).enumerate() {
        let (head, t) = (first + i / len, t0 + i % len);
        let at = ((b * dims.t + t) * heads + head) * d;
        dst[at..at + d].copy_from_slice(row);
    }
}
