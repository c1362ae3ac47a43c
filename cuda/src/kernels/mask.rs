//! The causal / sliding-window mask on attention scores, and `where` (`kernels/mask.cu`).

use super::{
    bits_kernel, check_device, check_len, check_like, float_kernel, launch, rows_of, to_u32, Launch,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "mask",
    source: &[include_str!("../../kernels/mask.cu")],
};

/// Threads per block along a row of keys.
const ROW_BLOCK: u32 = 128;

/// The band rule over the last two dimensions [.., tq, tk] of `x`: query row `t` is at
/// absolute position `p = t + q_offset` and keeps keys `s` with `p - window < s <= p` (`window`
/// keys, itself included); every other score becomes `fill` (usually -inf). A window at least
/// `q_offset + tq` is the plain causal mask. `x` and `y` the same dtype (f32 or bf16) and
/// length, a multiple of tq * tk.
pub fn band_mask(
    dev: &CudaDevice,
    x: &Buffer,
    tq: usize,
    tk: usize,
    q_offset: i64,
    window: usize,
    fill: f32,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "band_mask";
    check_device(OP, dev, &[x, y])?;
    check_like(OP, "y", y, x)?;
    let rows = rows_of(OP, x, tk)?;
    let tq_u = to_u32(OP, "tq", tq)?;
    if tq == 0 || rows % tq_u != 0 {
        return Err(CudaError::invalid(
            OP,
            format!("{} elements are not [.., {tq}, {tk}]", x.len()),
        ));
    }
    let tk = to_u32(OP, "tk", tk)?;
    let name = float_kernel!(OP, "band_mask", x.dtype())?;
    if rows == 0 {
        return Ok(());
    }
    let rows = rows as u64;
    let window = i64::try_from(window).unwrap_or(i64::MAX);
    let cfg = Launch {
        grid: (rows.min(dev.sm_count().max(1) as u64 * 32) as u32, 1, 1),
        block: (ROW_BLOCK, 1, 1),
        shared: 0,
    };
    // SAFETY: band_mask_T(const T* x, T* y, u64 rows, u32 tq, u32 tk, i64 q_offset,
    // i64 window, float fill); both hold rows * tk elements.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[x, y, &rows, &tq_u, &tk, &q_offset, &window, &fill],
        )
    }
}

/// `y = cond != 0 ? a : b` elementwise; `cond` u8 or u32, `a`, `b`, `y` one dtype (any), all
/// the same length (broadcast with `copy::strided_copy` first).
pub fn where_select(
    dev: &CudaDevice,
    cond: &Buffer,
    a: &Buffer,
    b: &Buffer,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "where_select";
    check_device(OP, dev, &[cond, a, b, y])?;
    check_like(OP, "b", b, a)?;
    check_like(OP, "y", y, a)?;
    check_len(OP, "cond", cond, a.len())?;
    let name = match cond.dtype() {
        DType::U8 => bits_kernel!(OP, "where_u8", a.dtype())?,
        DType::U32 => bits_kernel!(OP, "where_u32", a.dtype())?,
        other => {
            return Err(CudaError::invalid(
                OP,
                format!("cond must be u8 or u32, got {other}"),
            ))
        }
    };
    if a.is_empty() {
        return Ok(());
    }
    let n = a.len() as u64;
    // SAFETY: where_C_bN(const C* cond, const E* a, const E* b, E* y, u64 n); all hold n.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n),
            &[cond, a, b, y, &n],
        )
    }
}
