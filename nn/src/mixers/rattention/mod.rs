//! RAttention (Wang et al., 2025): sliding-window attention plus a residual linear attention
//! over every key older than the window, sharing q, k, v, each branch RMS-normalised, summed:
//!
//! `o_t = RMS_swa(o_swa_t) + RMS_rla(o_rla_t)`, `o_rla_t = phi(q_t) · S_{t-W}`,
//! `S_u = sum_{s <= u} phi(k_s)^T v_s`, `phi(x) = [softmax(x), softmax(-x)]` over the head dim
//! (feature dim 2D). With window W the SWA branch sees keys `t - W < s <= t` and the linear
//! branch exactly the older ones, `s <= t - W`: every past key is seen once.
//!
//! Choices this crate makes:
//! - Both forms take the *un-roped* q `[B, T, H, D]` and k `[B, T, Hkv, D]` and apply RoPE
//!   themselves (`Config::rope`) to the SWA branch only; phi reads q and k before RoPE.
//! - Each RMSNorm scale is `[D]`, shared across heads (a per-head norm over the head dim with
//!   one learned scale, as the model's other norms), one for each branch.
//! - The norms run in the inputs' dtype (f32 in training, f64 in tests).
//! - Grouped-query attention as in `attention`: q head h reads kv head `h / (H / Hkv)`.
//!
//! The folder holds every form of it: `reference.rs` (the spec from tape ops, the linear branch
//! unrolled as a masked quadratic form), `kernel.rs` (the linear branch's fused chunkwise kernel
//! as two ops over named operands, run by the device that holds them), its CPU version `cpu.rs`
//! and CUDA version `cuda.rs` + `rla.cu`, `node.rs` (`rattention`, one tape node over both
//! branches' kernels) and `carry.rs` (the linear state carried between the pieces of a long
//! sequence); a decoding step's linear branch is `decode::rla_step`. The linear branch's kernel, chunk by chunk (any chunk gives the same values):
//!
//! ```text
//! k'_t = k_{t-W}, v'_t = v_{t-W} (nothing before W): causal linear attention of q against k'
//! o_c  = tril(phi(Q_c) phi(K'_c)^T) V'_c + phi(Q_c) S_c      (chunk c's rows)
//! S_{c+1} = S_c + phi(K'_c)^T V'_c                           [2D, D] per kv head
//! ```
//!
//! Its backward recomputes the chunk states from k and v (on CUDA it reads the features the
//! forward made); with grouped queries dk and dv sum over the q heads sharing a kv head.
pub mod carry;
mod cpu;
mod cuda;
mod kernel;
pub mod node;
pub mod reference;

pub use cuda::{sizes as launch_sizes, Sizes as LaunchSizes};
pub use kernel::{
    backward, forward, forward_keeping_features, has_kernel, Features, RlaBackward, RlaGrads, RlaIn,
};

#[cfg(test)]
pub(crate) use cuda::SOURCE;

/// Rotary embedding of the SWA branch: positions start at `offset`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub offset: usize,
    pub theta: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Keys per query in the SWA branch, itself included (>= 1).
    pub window: usize,
    /// SWA score scale; `1/sqrt(D)` when None.
    pub scale: Option<f64>,
    /// RoPE on the SWA branch's q and k; None for none.
    pub rope: Option<Rope>,
    /// The RMSNorms' epsilon.
    pub eps: f64,
    /// Time steps per chunk of the fused linear branch (the reference ignores it).
    pub chunk: usize,
}

impl Config {
    /// RoPE from position 0 with theta 10000, eps 1e-6, chunks of 64.
    pub fn new(window: usize) -> Config {
        Config {
            window,
            scale: None,
            rope: Some(Rope {
                offset: 0,
                theta: 10_000.0,
            }),
            eps: 1e-6,
            chunk: 64,
        }
    }
}
