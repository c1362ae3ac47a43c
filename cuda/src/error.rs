//! The crate's error type: every failure is a value that names what went wrong.

use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum CudaError {
    /// The CUDA driver library could not be loaded or initialised (no driver, no GPU).
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    #[error("no CUDA device with ordinal {ordinal}: {count} device(s) found")]
    BadOrdinal { ordinal: usize, count: usize },
    #[error("CUDA library {lib} is not available: {reason}")]
    LibraryMissing { lib: &'static str, reason: String },
    #[error("CUDA driver call {call} failed: {message}")]
    Driver { call: &'static str, message: String },
    #[error(
        "CUDA out of memory on device {ordinal}: requested {requested} bytes, {in_use} bytes in \
         use, {cached} bytes cached by the pool (after releasing the cache and retrying); device \
         has {device_free} bytes free of {device_total}"
    )]
    OutOfMemory {
        ordinal: usize,
        requested: usize,
        in_use: usize,
        cached: usize,
        device_free: usize,
        device_total: usize,
    },
    #[error("NVRTC failed to compile kernel module {module} for {arch}:\n{log}")]
    Compile {
        module: &'static str,
        arch: String,
        log: String,
    },
    #[error("cuBLAS {call} failed: {message}")]
    Blas { call: &'static str, message: String },
    /// A wrapper was called with sizes, dtypes or buffers that do not fit together.
    #[error("{op}: {message}")]
    InvalidArgument { op: &'static str, message: String },
    /// A collective across ranks failed, timed out, or NCCL could not be loaded.
    #[error("NCCL {call}: {message}")]
    Nccl { call: &'static str, message: String },
    /// A kernel flagged bad input on the device (read with `CudaDevice::take_kernel_errors`).
    #[error("a kernel reported bad input: {0}")]
    KernelFlags(String),
}

impl CudaError {
    pub(crate) fn driver(call: &'static str, err: cudarc::driver::DriverError) -> Self {
        CudaError::Driver {
            call,
            message: format!("{err:?}"),
        }
    }

    pub fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        CudaError::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}
