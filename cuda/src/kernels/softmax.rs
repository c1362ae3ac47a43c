//! Softmax and log-softmax over the last axis, and their backwards (`kernels/softmax.cu`).

use super::{check_device, check_like, launch, row_kernel, rows_of, to_u32, vector_rows, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "softmax",
    source: &[include_str!("../../kernels/softmax.cu")],
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Softmax {
    /// y = exp(x - logsumexp(x))
    Softmax,
    /// y = x - logsumexp(x)
    LogSoftmax,
}

impl Softmax {
    fn log_flag(self) -> i32 {
        i32::from(self == Softmax::LogSoftmax)
    }
}

/// `y = kind(x)` over each row of `n` (the last axis); `x` and `y` the same dtype (f32 or
/// bf16) and length, a multiple of n.
pub fn softmax(
    dev: &CudaDevice,
    kind: Softmax,
    x: &Buffer,
    n: usize,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "softmax";
    check_device(OP, dev, &[x, y])?;
    check_like(OP, "y", y, x)?;
    let rows = rows_of(OP, x, n)?;
    let n = to_u32(OP, "n", n)?;
    let vec = vector_rows(n, x.dtype(), &[x.device_ptr(), y.device_ptr()]);
    let name = row_kernel!(OP, "softmax", x.dtype(), vec)?;
    if rows == 0 {
        return Ok(());
    }
    let log = kind.log_flag();
    // SAFETY: softmax_T(const T* x, T* y, u32 rows, u32 n, int log); both hold rows * n; the
    // vectorised instantiation only where vector_rows holds.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::rows(rows, n, x.dtype()),
            &[x, y, &rows, &n, &log],
        )
    }
}

/// Backward of [`softmax`] from its output `y` and the output gradient `dy`:
/// softmax `dx = y * (dy - sum(dy * y))`, log-softmax `dx = dy - exp(y) * sum(dy)`, per row.
pub fn softmax_backward(
    dev: &CudaDevice,
    kind: Softmax,
    y: &Buffer,
    dy: &Buffer,
    n: usize,
    dx: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "softmax_backward";
    check_device(OP, dev, &[y, dy, dx])?;
    check_like(OP, "dy", dy, y)?;
    check_like(OP, "dx", dx, y)?;
    let rows = rows_of(OP, y, n)?;
    let n = to_u32(OP, "n", n)?;
    let vec = vector_rows(
        n,
        y.dtype(),
        &[y.device_ptr(), dy.device_ptr(), dx.device_ptr()],
    );
    let name = row_kernel!(OP, "softmax_bwd", y.dtype(), vec)?;
    if rows == 0 {
        return Ok(());
    }
    let log = kind.log_flag();
    // SAFETY: softmax_bwd_T(const T* y, const T* dy, T* dx, u32 rows, u32 n, int log); all
    // hold rows * n; the vectorised instantiation only where vector_rows holds.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::rows(rows, n, y.dtype()),
            &[y, dy, dx, &rows, &n, &log],
        )
    }
}
