//! Errors as values: every failing op says which op failed and on what shapes, dtypes or devices.
use crate::{DType, Device, Shape};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: shapes {lhs} and {rhs} do not fit")]
    ShapeMismatch {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
    },
    #[error("{op}: dtypes {lhs:?} and {rhs:?} differ")]
    DTypeMismatch {
        op: &'static str,
        lhs: DType,
        rhs: DType,
    },
    #[error("{op}: tensors on {lhs} and {rhs}")]
    DeviceMismatch {
        op: &'static str,
        lhs: Device,
        rhs: Device,
    },
    #[error("{op}: dtype {dtype:?} is not supported here")]
    UnsupportedDType { op: &'static str, dtype: DType },
    #[error("{op}: axis {axis} is out of range for shape {shape}")]
    AxisOutOfRange {
        op: &'static str,
        axis: isize,
        shape: Shape,
    },
    #[error("{op}: index {index} is out of range for size {size}")]
    IndexOutOfRange {
        op: &'static str,
        index: usize,
        size: usize,
    },
    #[error("{op}: {len} values do not fill shape {shape}")]
    LengthMismatch {
        op: &'static str,
        len: usize,
        shape: Shape,
    },
    #[error("{op}: {msg}")]
    Invalid { op: &'static str, msg: String },
    /// A CUDA failure (no device, out of memory, a kernel error), as swax-cuda reported it.
    #[error("cuda: {0}")]
    Cuda(String),
}

pub type Result<T> = std::result::Result<T, Error>;
