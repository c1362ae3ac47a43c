//! Rotary position embedding on [B, T, H, D], forward and backward (`kernels/rope.cu`).

use super::{check_device, check_like, launch, ptr_or_null, row_kernel, to_u32, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "rope",
    source: &[include_str!("../../kernels/rope.cu")],
};

/// Shape and positions of a rotary embedding: `x` is [b, t, h, d] (d even), token `t` of every
/// sequence sits at position `t + offset`, frequencies `theta^(-2i/d)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeDims {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub d: usize,
    /// Absolute position of the first time step (for decoding or chunked evaluation).
    pub offset: usize,
    pub theta: f64,
}

/// `y = rotate(x)`: pair (i, i + d/2) at position p turned by `p * theta^(-2i/d)`
/// ("rotate_half", as in Llama / GPT-NeoX). `x`, `y` f32 or bf16, same length.
pub fn rope(dev: &CudaDevice, r: RopeDims, x: &Buffer, y: &mut Buffer) -> Result<(), CudaError> {
    run("rope", dev, r, x, None, y, 1.0)
}

/// Backward of [`rope`]: the inverse rotation of `dy` into `dx`. With `dres` (like `dy`: the
/// gradient reaching x by another path), dx is that plus the rotation's, in the same pass.
pub fn rope_backward(
    dev: &CudaDevice,
    r: RopeDims,
    dy: &Buffer,
    dres: Option<&Buffer>,
    dx: &mut Buffer,
) -> Result<(), CudaError> {
    run("rope_backward", dev, r, dy, dres, dx, -1.0)
}

fn run(
    op: &'static str,
    dev: &CudaDevice,
    r: RopeDims,
    x: &Buffer,
    add: Option<&Buffer>,
    y: &mut Buffer,
    sign: f32,
) -> Result<(), CudaError> {
    check_device(op, dev, &[x, y])?;
    check_like(op, "output", y, x)?;
    if let Some(a) = add {
        check_device(op, dev, &[a])?;
        check_like(op, "dres", a, x)?;
    }
    let len = [r.b, r.t, r.h, r.d]
        .iter()
        .try_fold(1usize, |acc, &v| acc.checked_mul(v));
    if !r.d.is_multiple_of(2) || len != Some(x.len()) {
        return Err(CudaError::invalid(
            op,
            format!("{r:?} needs an even d and b*t*h*d = {} elements", x.len()),
        ));
    }
    // A dtype without a kernel is an error even for an empty tensor.
    row_kernel!(op, "rope", x.dtype(), true)?;
    if x.is_empty() {
        return Ok(());
    }
    let (t_len, heads, half) = (
        to_u32(op, "t", r.t)?,
        to_u32(op, "h", r.h)?,
        to_u32(op, "d / 2", r.d / 2)?,
    );
    let pos_offset = i64::try_from(r.offset)
        .map_err(|_| CudaError::invalid(op, format!("offset {} exceeds i64", r.offset)))?;
    let entries = r.t * (r.d / 2);
    let cos = dev.alloc(DType::F32, entries)?;
    let sin = dev.alloc(DType::F32, entries)?;
    // SAFETY: rope_table(float* cos_t, float* sin_t, u32 t_len, u32 half, i64 pos_offset,
    // double theta); both tables hold t_len * half.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "rope_table",
            Launch::elementwise(dev, entries as u64),
            &[&cos, &sin, &t_len, &half, &pos_offset, &r.theta],
        )?;
    }
    // Groups of one 16-byte vector of pairs where d/2 is a whole number of them and the buffers
    // are 16-byte aligned (pool blocks are), else single pairs.
    let per_vec = 16 / x.dtype().size_bytes();
    let add_ptr = ptr_or_null(add);
    let vec = (r.d / 2).is_multiple_of(per_vec)
        && [x, &*y, &cos, &sin]
            .iter()
            .all(|b| b.device_ptr().is_multiple_of(16))
        && add_ptr.is_multiple_of(16);
    let name = row_kernel!(op, "rope", x.dtype(), vec)?;
    let groups = (x.len() / 2 / if vec { per_vec } else { 1 }) as u64;
    // SAFETY: rope_T[_scalar](const T* x, const T* add, T* y, const float* cos_t, const float*
    // sin_t, u64 groups, u32 t_len, u32 heads, u32 half, float sign); x, add (or null) and y hold
    // b*t*h*d elements,
    // 2 * groups * V for the kernel's group of V pairs (V divides half in the vector kernel, whose
    // x, y and tables (fresh pool blocks) are 16-byte aligned), the tables t_len * half.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, groups),
            &[
                x, &add_ptr, y, &cos, &sin, &groups, &t_len, &heads, &half, &sign,
            ],
        )
    }
}
