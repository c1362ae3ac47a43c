//! Element types a device buffer can hold, and the host types that map onto them.

use half::bf16;

/// Storage type of a [`crate::Buffer`]. Float kernels take `F32` or `BF16` (arithmetic is always
/// f32); `U32` holds token ids, targets and argmax results; `U8` holds masks and raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    BF16,
    U32,
    U8,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
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
/// pattern, because `Device::dtoh` fills it straight from device memory.
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
