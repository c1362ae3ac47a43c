//! swax-tensor: `Tensor` (row-major, contiguous, immutable), its shapes, dtypes and devices, and
//! every op the models need, with a kernel per device behind one seam (`backend::Backend`), and
//! the seam for ops whose kernels live elsewhere (`device_op::DeviceOp`: the fused mixers and
//! xLSTM's gated head norm).
//!
//! Reading order: `tensor.rs` (the type), `ops/` (what each op checks and computes),
//! `backend.rs` (the seam), `cpu/` (the CPU kernels), `device_op.rs`.
pub mod backend;
pub mod calls;
pub mod cpu;
pub mod cuda;
mod device;
pub mod device_op;
mod dtype;
mod error;
mod ops;
mod readback;
pub mod rng;
mod shape;
mod storage;
mod tensor;

pub use backend::{BinaryOp, ReduceOp, Softmax, UnaryOp};
pub use device::Device;
pub use device_op::{DeviceOp, Operands};
pub use dtype::Element;
pub use error::{Error, Result};
pub use ops::{AdamWParam, CrossEntropyStats, NormStats, CAUSAL};
pub use readback::Readback;
pub use shape::Shape;
pub use storage::Storage;
pub use swax_cuda::{counters, DType};
pub use tensor::{Tensor, TensorId};
