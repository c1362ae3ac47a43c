//! mLSTM, the xLSTM-7B form: per-head scalar gates, an exponential input gate, a log-sigmoid
//! forget gate and the stabilizer m_t. With `lf_t = log_sigmoid(f_t)` and q scaled by
//! `1/sqrt(Dk)` (as xLSTM does):
//!
//! ```text
//! m_t = max(lf_t + m_{t-1}, i_t)
//! C_t = exp(lf_t + m_{t-1} - m_t) C_{t-1} + exp(i_t - m_t) k_t v_t^T      [Dk, Dv]
//! n_t = exp(lf_t + m_{t-1} - m_t) n_{t-1} + exp(i_t - m_t) k_t            [Dk]
//! h_t = q_t^T C_t / (max(|q_t^T n_t|, exp(-m_t)) + eps)
//! ```
//!
//! Inputs q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, gate preactivations i, f `[B, T, H]` (soft-cap
//! them layer-side); output `[B, T, H, Dv]`. Every form starts from a state `(C, n, m)` (zeros
//! when none is given) and returns the final one, so a long sequence can run in pieces.
//!
//! The folder holds every form of it: `reference.rs` (from tape ops: `recurrent`, step by step,
//! the spec, and `parallel`, quadratic, checked against it), `kernel.rs` (the fused chunkwise
//! kernel as one op with named operands, run by the device that holds them), its CPU version
//! `cpu.rs` and CUDA version `cuda.rs` + `mlstm.cu`, and `node.rs` (`chunkwise`, one tape node
//! over the kernel, and `step`, one time step for decoding).
//!
//! The chunkwise kernel runs time in chunks of `chunk` steps (any chunk gives the same values):
//! within a chunk the recurrence is an `L x L` matrix of decayed, stabilized weights, across
//! chunks the state `(C, n, m)` is carried. It returns, besides h, the state before each chunk
//! and after the last (`[B, H, N + 1, ..]`, N chunks: entry 0 the initial state, entry N the
//! final one; f32 for bf16 operands), which the backward reads instead of re-running the
//! sequential state pass, and per step the denominator's parts `q_t^T n_t` and `m_t` (`den`),
//! which spare the CUDA backward each chunk's scores. The backward's gradients are exact: the
//! stabilizer's own path (it only moves eps's weight) included.
mod cpu;
mod cuda;
mod kernel;
mod node;
mod reference;

pub use cuda::{sizes as launch_sizes, Sizes as LaunchSizes};
pub use kernel::{backward, forward, has_kernel, MlstmBackward, MlstmGrads, MlstmIn, MlstmOut};
pub use node::{chunkwise, step};
pub use reference::{parallel, recurrent};

#[cfg(test)]
pub(crate) use cuda::SOURCE;

use crate::mixers::recurrent::RecurrentChecks;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::{DType, Device, Result, Tensor};

/// xLSTM's eps in the denominator.
pub const EPS: f64 = 1e-6;

/// The recurrent state of every head: C `[B, H, Dk, Dv]`, n `[B, H, Dk]`, m `[B, H]`. C and n are
/// stored divided by `exp(m)`, which keeps them finite whatever the gates. Also its gradient,
/// and (`[B, H, N + 1, ..]`) the kernel's chunk-boundary states; held as tensors, or as one
/// device's buffers inside a kernel.
#[derive(Clone, Debug)]
pub struct MlstmState<T = Tensor> {
    pub c: T,
    pub n: T,
    pub m: T,
}

swax_tensor::operands!(MlstmState { c, n, m });

impl MlstmState {
    pub fn zeros(
        b: usize,
        h: usize,
        dk: usize,
        dv: usize,
        dtype: DType,
        device: Device,
    ) -> Result<MlstmState> {
        Ok(MlstmState {
            c: Tensor::zeros(vec![b, h, dk, dv], dtype, device)?,
            n: Tensor::zeros(vec![b, h, dk], dtype, device)?,
            m: Tensor::zeros(vec![b, h], dtype, device)?,
        })
    }

    /// The given state, checked against the inputs' sizes, or zeros.
    fn or_zeros(
        state: Option<&MlstmState>,
        op: &'static str,
        q: &Tensor,
        dims: &RecurrentShape,
    ) -> Result<MlstmState> {
        let Some(s) = state else {
            return MlstmState::zeros(dims.b, dims.h, dims.dk, dims.dv, q.dtype(), q.device());
        };
        dims.check_state(op, q, &s.c, &[dims.dk, dims.dv])?;
        dims.check_state(op, q, &s.n, &[dims.dk])?;
        dims.check_state(op, q, &s.m, &[])?;
        Ok(s.clone())
    }
}
