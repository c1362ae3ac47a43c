//! Dtype conversion, plain or scaled by a factor on the device, and filling with a scalar
//! (`kernels/cast.cu`).

use super::{check_device, check_dtype, check_len, float_kernel, launch, Launch, ELEMENTWISE_VEC};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "cast",
    source: &[include_str!("../../kernels/cast.cu")],
};

/// `y = x` converted to `y`'s dtype: f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact,
/// equal dtypes copy. Same length.
pub fn cast(dev: &CudaDevice, x: &Buffer, y: &mut Buffer) -> Result<(), CudaError> {
    const OP: &str = "cast";
    check_device(OP, dev, &[x, y])?;
    check_len(OP, "y", y, x.len())?;
    let name = match (x.dtype(), y.dtype()) {
        (a, b) if a == b => return dev.copy(x, y),
        (DType::F32, DType::BF16) => "cast_f32_to_bf16",
        (DType::BF16, DType::F32) => "cast_bf16_to_f32",
        (a, b) => {
            return Err(CudaError::invalid(
                OP,
                format!("no conversion from {a} to {b}"),
            ))
        }
    };
    if x.is_empty() {
        return Ok(());
    }
    let n = x.len() as u64;
    // SAFETY: cast_S_to_D(const S* x, D* y, u64 n); both hold n elements of their dtype.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n.div_ceil(ELEMENTWISE_VEC)),
            &[x, y, &n],
        )
    }
}

/// `y = x · s[0]` converted to `y`'s dtype (f32 product, rounded to nearest even for bf16): a
/// scale computed on the device, read there, and a cast in one pass. `x` and `y` f32 or bf16 of
/// one length, `s` one f32.
pub fn scale_cast(
    dev: &CudaDevice,
    x: &Buffer,
    s: &Buffer,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "scale_cast";
    check_device(OP, dev, &[x, s, y])?;
    check_dtype(OP, "s", s, DType::F32)?;
    check_len(OP, "s", s, 1)?;
    check_len(OP, "y", y, x.len())?;
    let name = match (x.dtype(), y.dtype()) {
        (DType::F32, DType::F32) => "scale_cast_f32_to_f32",
        (DType::F32, DType::BF16) => "scale_cast_f32_to_bf16",
        (DType::BF16, DType::F32) => "scale_cast_bf16_to_f32",
        (DType::BF16, DType::BF16) => "scale_cast_bf16_to_bf16",
        (a, b) => {
            return Err(CudaError::invalid(
                OP,
                format!("no conversion from {a} to {b} (f32 or bf16 each)"),
            ))
        }
    };
    if x.is_empty() {
        return Ok(());
    }
    let n = x.len() as u64;
    // SAFETY: scale_cast_S_to_D(const S* x, const float* s, D* y, u64 n); x and y hold n
    // elements of their dtypes, s one f32.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n.div_ceil(ELEMENTWISE_VEC)),
            &[x, s, y, &n],
        )
    }
}

/// Sets every element of `y` (f32 or bf16) to `value`.
pub fn fill(dev: &CudaDevice, y: &mut Buffer, value: f32) -> Result<(), CudaError> {
    const OP: &str = "fill";
    check_device(OP, dev, &[y])?;
    let name = float_kernel!(OP, "fill", y.dtype())?;
    if y.is_empty() {
        return Ok(());
    }
    let n = y.len() as u64;
    // SAFETY: fill_T(T* y, u64 n, float value); y holds n elements of T.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n.div_ceil(ELEMENTWISE_VEC)),
            &[y, &n, &value],
        )
    }
}
