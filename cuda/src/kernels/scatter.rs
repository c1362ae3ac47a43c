//! Scatter along the middle axis of an `[outer, n, inner]` view (`kernels/scatter.cu`): the
//! backward of an arg-reduction such as max.

use super::reduce::AxisDims;
use super::{check_device, check_dtype, check_len, float_kernel, launch, to_u32, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "scatter",
    source: &[include_str!("../../kernels/scatter.cu")],
};

/// `y[o, idx[o, i], i] = x[o, i]` for the `[outer, inner]` values `x` and u32 positions `idx`;
/// the rest of `y` (`[outer, n, inner]`, same dtype as `x`) is left as it was. Positions at or
/// past `n` are skipped.
pub fn scatter_axis(
    dev: &CudaDevice,
    x: &Buffer,
    idx: &Buffer,
    axis: AxisDims,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "scatter_axis";
    check_device(OP, dev, &[x, idx, y])?;
    check_dtype(OP, "idx", idx, DType::U32)?;
    check_dtype(OP, "y", y, x.dtype())?;
    check_len(OP, "x", x, axis.outer * axis.inner)?;
    check_len(OP, "idx", idx, axis.outer * axis.inner)?;
    check_len(OP, "y", y, axis.outer * axis.n * axis.inner)?;
    let name = float_kernel!(OP, "scatter_axis", x.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    let (outer, n, inner) = (
        axis.outer as u64,
        to_u32(OP, "n", axis.n)?,
        axis.inner as u64,
    );
    // SAFETY: scatter_axis_T(const T* x, const u32* idx, T* y, u64 outer, u32 n, u64 inner);
    // x and idx hold outer * inner, y outer * n * inner, all checked above; positions >= n are
    // skipped by the kernel.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, outer * inner),
            &[x, idx, y, &outer, &n, &inner],
        )
    }
}
