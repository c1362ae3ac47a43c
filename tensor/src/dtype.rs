//! Element types: what a tensor stores, and the Rust types that map onto them.
use half::bf16;

/// The element type of a tensor's storage.
///
/// BF16 is a storage format: every kernel widens it to f32 for arithmetic. F64 exists on the
/// CPU for gradient checks. U32 holds token ids and indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    BF16,
    U32,
}

impl DType {
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F64 => 8,
            DType::BF16 => 2,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, DType::U32)
    }
}

/// A Rust type that can be the element of a tensor.
pub trait Element: Copy + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

impl Element for u32 {
    const DTYPE: DType = DType::U32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as u32
    }
}
