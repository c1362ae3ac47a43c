//! The gated delta rule (Gated DeltaNet). With q and k L2-normalized inside the mixer
//! (`x / sqrt(|x|^2 + 1e-6)`, differentiably), q then scaled by `1/sqrt(Dk)`, `a_t = exp(g_t)`:
//!
//! ```text
//! S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T      [Dk, Dv]
//! o_t = S_t^T q_t
//! ```
//!
//! The state is stored `[B, H, Dk, Dv]`: the paper's `S` (`[Dv, Dk]`, `o = S q`) transposed, the
//! same layout as the mLSTM's C. Inputs q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, beta in (0, 1)
//! and the log-decay g <= 0 `[B, T, H]` (both computed layer-side); output `[B, T, H, Dv]`.
//! Every form starts from a state (zeros when none is given) and returns the final one.
//!
//! The folder holds every form of it: `reference.rs` (`recurrent`, from tape ops step by step:
//! the spec), `kernel.rs` (the fused chunkwise kernel, WY form, as one op with named operands,
//! run by the device that holds them), its CPU version `cpu.rs`, its CUDA versions `cuda.rs` +
//! `gated_delta.cu` (any dtype, chunk and head size) and `cuda_parallel.rs` +
//! `gated_delta_parallel.cu` (bf16 at chunk 64, chunk-parallel), sharing `gated_delta.cuh`, and
//! `node.rs` (`chunkwise`, one tape node over the kernel, and `step`, one time step for
//! decoding). The CUDA kernels also run on the CPU under an emulation of CUDA
//! (tests/tests/emulated_kernels.rs).
//!
//! The chunkwise kernel runs time in chunks of `chunk` steps (any chunk gives the same values)
//! and returns, besides o, the state before each chunk and after the last (`[B, H, N + 1, Dk,
//! Dv]`, N chunks: entry 0 the initial state, entry N the final one; f32 for bf16 operands),
//! which the backward reads instead of re-running the sequential state pass. Its gradients of
//! q and k are with respect to the raw, unnormalized q and k.
mod cpu;
mod cuda;
mod cuda_parallel;
mod kernel;
mod node;
mod reference;

// The CUDA wrappers' launch sizes, which the kernels' CPU emulation launches with
// (tests/tests/emulated_kernels.rs).
pub use cuda::one_tile_sizes;
pub use cuda_parallel::{sizes as parallel_sizes, Sizes as ParallelSizes};
pub use kernel::{
    backward, forward, has_kernel, GatedDeltaBackward, GatedDeltaGrads, GatedDeltaIn, GatedDeltaOut,
};
pub use node::{chunkwise, step};
pub use reference::recurrent;

#[cfg(test)]
pub(crate) use {cuda::SOURCE, cuda_parallel::SOURCE as PARALLEL_SOURCE};

use crate::mixers::recurrent::RecurrentChecks;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::{Result, Tensor};

/// The given state, checked against the inputs' sizes, or zeros.
fn state_or_zeros(
    state: Option<&Tensor>,
    op: &'static str,
    q: &Tensor,
    dims: &RecurrentShape,
) -> Result<Tensor> {
    match state {
        Some(s) => {
            dims.check_state(op, q, s, &[dims.dk, dims.dv])?;
            Ok(s.clone())
        }
        None => Tensor::zeros(
            vec![dims.b, dims.h, dims.dk, dims.dv],
            q.dtype(),
            q.device(),
        ),
    }
}
