//! General strided copy (`kernels/copy.cu`): the primitive behind transpose, permute, narrow,
//! concat, zero-pad / shift and broadcast_to.

use super::layout::{Operand, TwoStrided};
use super::{bits_kernel, check_device, check_dtype, launch, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, Device};

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
    dev: &Device,
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
    let n = p.len();
    if n == 0 {
        return Ok(());
    }
    let name = bits_kernel!(OP, "copy", src.dtype())?;
    // SAFETY: copy_bN(const E* src, E* dst, TwoStrided p) with E of the dtype's size;
    // `TwoStrided::new` checked both operands stay in bounds.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n),
            &[src, dst, &p],
        )
    }
}
