//! The SwiGLU activation of an MLP's pre-activation, forward and backward (`kernels/swiglu.cu`):
//! `gu = [gate | up]` rows of 2F to `h = silu(gate) · up` rows of F, and back.

use super::{
    check_device, check_dtype, check_len, check_like, row_kernel, rows_of, to_u32, vector_rows,
    Launch,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "swiglu",
    source: &[include_str!("../../kernels/swiglu.cu")],
};

/// Most threads a row gets; a row of F = 2048 bf16 (256 vectors) gets one vector a thread.
const ROW_THREADS: u32 = 256;
/// Blocks per SM at most: the blocks walk the rows.
const BLOCKS_PER_SM: u64 = 16;

/// `h = silu(gate) · up` of `gu` `[rows, 2f]` into `h` `[rows, f]`; f32 or bf16, one dtype.
pub fn swiglu(dev: &CudaDevice, gu: &Buffer, f: usize, h: &mut Buffer) -> Result<(), CudaError> {
    const OP: &str = "swiglu";
    check_device(OP, dev, &[gu, h])?;
    let (rows, f_u32) = sizes(OP, gu, f)?;
    check_dtype(OP, "h", h, gu.dtype())?;
    check_len(OP, "h", h, gu.len() / 2)?;
    let vec = vector_rows(f_u32, gu.dtype(), &[gu.device_ptr(), h.device_ptr()]);
    let name = row_kernel!(OP, "swiglu", gu.dtype(), vec)?;
    if gu.is_empty() {
        return Ok(());
    }
    // SAFETY: swiglu_T(const T* gu, T* h, u64 rows, u32 f); gu holds rows * 2f elements of T, h
    // rows * f (checked above); the vector instantiation only where `vector_rows` allows it.
    unsafe {
        super::launch(
            dev,
            &SOURCE,
            name,
            launch_shape(dev.sm_count(), rows, f, gu.dtype(), vec),
            &[gu, h, &rows, &f_u32],
        )
    }
}

/// Backward of [`swiglu`] given `gu` `[rows, 2f]` and `dh` `[rows, f]`: `dgu` `[rows, 2f]`
/// (`dh · up · silu'(gate)` in the first f columns of a row, `dh · silu(gate)` in the rest) and
/// the forward's `h` `[rows, f]`, in one pass.
pub fn swiglu_backward(
    dev: &CudaDevice,
    gu: &Buffer,
    dh: &Buffer,
    f: usize,
    dgu: &mut Buffer,
    h: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "swiglu_backward";
    check_device(OP, dev, &[gu, dh, dgu, h])?;
    let (rows, f_u32) = sizes(OP, gu, f)?;
    check_dtype(OP, "dh", dh, gu.dtype())?;
    check_len(OP, "dh", dh, gu.len() / 2)?;
    check_like(OP, "dgu", dgu, gu)?;
    check_like(OP, "h", h, dh)?;
    let ptrs = [gu, dh, dgu, h].map(|b| b.device_ptr());
    let vec = vector_rows(f_u32, gu.dtype(), &ptrs);
    let name = row_kernel!(OP, "swiglu_bwd", gu.dtype(), vec)?;
    if gu.is_empty() {
        return Ok(());
    }
    // SAFETY: swiglu_bwd_T(const T* gu, const T* dh, T* dgu, T* h, u64 rows, u32 f); gu and dgu
    // hold rows * 2f elements of T, dh and h rows * f (checked above); the vector instantiation
    // only where `vector_rows` allows it.
    unsafe {
        super::launch(
            dev,
            &SOURCE,
            name,
            launch_shape(dev.sm_count(), rows, f, gu.dtype(), vec),
            &[gu, dh, dgu, h, &rows, &f_u32],
        )
    }
}

/// Rows of `gu` read as rows of 2f, and f as the kernel's u32 (2f < 2^31, so that a thread's
/// column stepping past the row cannot wrap).
fn sizes(op: &'static str, gu: &Buffer, f: usize) -> Result<(u64, u32), CudaError> {
    if f == 0 || f > i32::MAX as usize / 2 {
        return Err(CudaError::invalid(
            op,
            format!("f = {f} must be at least 1 and 2f below 2^31"),
        ));
    }
    let rows = rows_of(op, gu, 2 * f)? as u64;
    Ok((rows, to_u32(op, "f", f)?))
}

/// The launch of either kernel over `rows` rows of 2f elements of `dtype`, in 16-byte vectors
/// (`vec`) or not, on a GPU of `sm_count` SMs: a block per row at a time, walking the rows, of
/// the fewest power-of-two threads (at least a warp) that take a row's units (vectors, or
/// elements) one each, up to ROW_THREADS. Public for the kernels' emulation, which launches as
/// the wrappers do.
pub fn launch_shape(sm_count: u32, rows: u64, f: usize, dtype: DType, vec: bool) -> Launch {
    let unit = if vec { 16 / dtype.size_bytes() } else { 1 };
    let threads = (f.div_ceil(unit) as u32)
        .next_power_of_two()
        .clamp(32, ROW_THREADS);
    let blocks = rows.min(sm_count.max(1) as u64 * BLOCKS_PER_SM);
    Launch {
        grid: (blocks as u32, 1, 1),
        block: (threads, 1, 1),
        shared: 0,
    }
}
