//! CUDA device, caching memory pool, cuBLAS and NVRTC-compiled kernels.
//!
//! The bottom layer of swax: it knows nothing of tensors or shapes beyond what a kernel needs.
//! A [`CudaDevice`] owns one context, one stream and one caching [`pool`]; a [`Buffer`] is a typed
//! allocation from that pool; [`gemm`] goes through cuBLAS; [`kernels`] holds a Rust wrapper per
//! kernel family, whose CUDA C++ lives in `cuda/kernels/*.cu` and is compiled by NVRTC at first
//! use. [`Readback`] reads small buffers to the host later, without waiting for the stream to
//! drain; [`counters`] counts launches, cuBLAS calls and host waits, and [`timeline`] times each
//! of them on the device; [`tma`] makes the tensor maps of Hopper's TMA copies. CUDA libraries
//! are loaded at run time, so this crate builds and its CPU tests run on machines without CUDA;
//! without a GPU, [`CudaDevice::new`] returns an error.

mod blas;
mod buffer;
pub mod counters;
mod device;
mod dtype;
mod error;
mod guard;
pub mod kernels;
pub mod nccl;
mod nvrtc;
pub mod pool;
mod readback;
pub mod timeline;
pub mod timing;
pub mod tma;

pub use blas::{gemm, GemmArgs, MatmulLayout};
pub use buffer::Buffer;
pub use device::CudaDevice;
pub use dtype::{DType, DeviceScalar};
pub use error::CudaError;
pub use nvrtc::KernelSource;
pub use pool::PoolStats;
pub use readback::Readback;
