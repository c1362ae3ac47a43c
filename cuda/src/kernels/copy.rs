//! General strided copy (`kernels/copy.cu`): the primitive behind transpose, permute, narrow,
//! concat, zero-pad / shift and broadcast_to.

use super::layout::{Operand, TwoStrided};
use super::{bits_kernel, check_device, check_dtype, launch, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "copy",
    source: &[include_str!("../../kernels/copy.cu")],
};

/// For every coordinate `c` of `dims` (rank <= 6):
/// `dst[dst_offset + sum_d c[d] * dst_strides[d]] = src[src_offset + sum_d c[d] * src_strides[d]]`.
///
/// Strides and offsets are in elements. A source stride of 0 broadcasts; destination strides
/// must not write any element twice. Both buffers have the same dtype (any); elements of `dst`
/// outside the pattern are left as they are (fill first for padding).
pub fn strided_copy(
    dev: &CudaDevice,
    dims: &[usize],
    src: &Buffer,
    src_strides: &[usize],
    src_offset: usize,
    dst: &mut Buffer,
    dst_strides: &[usize],
    dst_offset: usize,
) -> Result<(), CudaError> {
    const OP: &str = "strided_copy";
    check_device(OP, dev, &[src, dst])?;
    check_dtype(OP, "dst", dst, src.dtype())?;
    let p = TwoStrided::new(
        OP,
        dims,
        Operand::of("src", src, src_strides, src_offset),
        Operand::of("dst", dst, dst_strides, dst_offset),
    )?;
    if !p.second_is_injective() {
        return Err(CudaError::invalid(
            OP,
            format!("destination strides {dst_strides:?} over dims {dims:?} write elements twice"),
        ));
    }
    if p.len() == 0 {
        return Ok(());
    }
    // Copy the widest element the layout allows: 16 bytes, else 8, else 4, else the dtype's own.
    let size = src.dtype().size_bytes() as u64;
    let (p, name) = [(16, "copy_b128"), (8, "copy_b64"), (4, "copy_b32")]
        .into_iter()
        .filter(|&(bytes, _)| {
            bytes > size
                && src.device_ptr().is_multiple_of(bytes)
                && dst.device_ptr().is_multiple_of(bytes)
        })
        .find_map(|(bytes, name)| Some((p.widened(bytes / size)?, name)))
        .map_or_else(|| Ok((p, bits_kernel!(OP, "copy", src.dtype())?)), Ok)?;
    // SAFETY: copy_bN(const E* src, E* dst, TwoStrided p) with E of the width chosen above;
    // `TwoStrided::new` checked both operands stay in bounds, `widened` only regroups whole
    // elements of that range, and both pointers are aligned to the width.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, p.len()),
            &[src, dst, &p],
        )
    }
}
