//! swax-tensor: `Tensor` (row-major, contiguous, immutable), its shapes, dtypes and devices, and
//! every op the models need, with a kernel per device behind one seam (`backend::Backend`).
//!
//! Reading order: `tensor.rs` (the type), `ops/` (what each op checks and computes),
//! `backend.rs` (the seam), `cpu/` (the CPU kernels).
pub mod backend;
pub mod cpu;
pub mod cuda;
mod device;
mod dtype;
mod error;
mod ops;
pub mod rng;
mod shape;
mod storage;
mod tensor;

pub use backend::{BinaryOp, ReduceOp, Softmax, UnaryOp};
pub use device::Device;
pub use dtype::Element;
pub use error::{Error, Result};
pub use ops::{CrossEntropyStats, NormStats, CAUSAL};
pub use ops::{GatedDeltaGrads, MlstmChunkStates, MlstmGrads};
pub use shape::Shape;
pub use storage::Storage;
pub use swax_cuda::DType;
pub use tensor::{Tensor, TensorId};
