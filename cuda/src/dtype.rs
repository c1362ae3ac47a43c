//! Element types, one vocabulary for tensors and device buffers, and the host types that a
//! device buffer can be copied to and from.

use half::bf16;

/// The element type of a tensor's storage or a [`crate::Buffer`]. BF16 is a storage format:
/// every kernel widens it to f32 for arithmetic. F64 exists on the CPU, for gradient checks;
/// device buffers refuse it. U32 holds token ids, targets and indices; U8 holds masks and raw
/// bytes on the device (tensors do not hold it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    BF16,
    U32,
    U8,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 => 8,
            DType::F32 | DType::U32 => 4,
            DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::BF16)
    }

    /// The dtype in which sums of this float dtype's values are kept: f64 for f64, f32 for f32
    /// and bf16 (a storage format whose arithmetic is f32).
    pub fn accumulator(self) -> DType {
        match self {
            DType::F64 => DType::F64,
            _ => DType::F32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
            DType::U8 => "u8",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A host type that can be copied bit for bit to and from a device buffer.
///
/// # Safety
/// The type must be plain old data of exactly `DTYPE.size_bytes()` bytes, valid for every bit
/// pattern, because `CudaDevice::dtoh` fills it straight from device memory.
pub unsafe trait DeviceScalar: Copy + Default + Send + Sync + 'static {
    const DTYPE: DType;
}

// SAFETY: all four are plain old data of the stated size, valid for every bit pattern.
unsafe impl DeviceScalar for f32 {
    const DTYPE: DType = DType::F32;
}
// SAFETY: as above; bf16 is a transparent u16.
unsafe impl DeviceScalar for bf16 {
    const DTYPE: DType = DType::BF16;
}
// SAFETY: as above.
unsafe impl DeviceScalar for u32 {
    const DTYPE: DType = DType::U32;
}
// SAFETY: as above.
unsafe impl DeviceScalar for u8 {
    const DTYPE: DType = DType::U8;
}
