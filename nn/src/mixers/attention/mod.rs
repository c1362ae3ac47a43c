//! Causal sliding-window attention (SWA), full causal attention being the window >= T case.
//!
//! Window convention, used everywhere: with window W, query t sees keys `t - W < s <= t` (W keys,
//! itself included; FlashAttention's `window_size = (W - 1, 0)`). q is `[B, T, H, D]`, k and v
//! `[B, T, Hkv, D]` with H a multiple of Hkv (grouped-query attention: q head h reads kv head
//! `h / (H / Hkv)`). Scores are scaled by `scale`, `1/sqrt(D)` when None:
//!
//! ```text
//! o_t   = sum_{t - W < s <= t} softmax_s(scale · q_t · k_s) v_s          [B, T, H, D]
//! lse_t = log sum_{t - W < s <= t} exp(scale · q_t · k_s)                [B, H, T]
//! ```
//!
//! The backward recomputes the probabilities from lse (nothing of size T × W is kept); with
//! grouped queries dk and dv sum over the q heads that share a kv head.
//!
//! The folder holds every form of it: `reference.rs` (`swa`, a band-masked softmax from tape
//! ops, the spec), `kernel.rs` (the fused kernel as two ops, forward and backward, over named
//! operands, run by the device that holds them), its CPU version `cpu.rs` (flash style, on the
//! strided tiles of `tile.rs`, which RAttention's linear branch shares) and CUDA version
//! `cuda.rs` + `attention.cu` (with Hopper's warp-specialised forward and backward,
//! `hopper_fwd.cu` and `hopper_bwd.cu`), and `node.rs` (`swa`, one tape node over the kernel). The
//! reference and the node take the same arguments and return o `[B, T, H, D]`.
//!
//! The sizes of a call are swax-cuda's `AttnShape`, read off and checked against the tensors by
//! `shape`; the CUDA wrapper checks them once more against its kernels (`AttnShape::check`: which
//! head dims exist), which is also what `has_kernel` asks.
pub(crate) mod cpu;
pub(crate) mod cuda;
mod kernel;
pub mod node;
pub mod reference;
pub(crate) mod tile;

pub use cuda::{sizes as launch_sizes, Sizes as LaunchSizes};
pub use kernel::{backward, forward, has_kernel, SwaBackward, SwaGrads, SwaIn, SwaOut};

#[cfg(test)]
pub(crate) use cuda::SOURCE;

use crate::mixers::recurrent::like_q;
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::{Error, Result, Tensor};

/// The default score scale, `1/sqrt(D)`.
pub fn default_scale(d: usize) -> f64 {
    1.0 / (d as f64).sqrt()
}

/// The sizes of q `[B, T, H, D]` and k, v `[B, T, Hkv, D]`: one float dtype and device, H a
/// multiple of Hkv, and a window of at least one key (every query sees itself).
pub fn shape(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    window: usize,
) -> Result<AttnShape> {
    if !q.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: q.dtype(),
        });
    }
    like_q(op, q, k)?;
    like_q(op, q, v)?;
    let mismatch = |lhs: &Tensor, rhs: &Tensor| Error::ShapeMismatch {
        op,
        lhs: lhs.shape().clone(),
        rhs: rhs.shape().clone(),
    };
    if v.shape() != k.shape() {
        return Err(mismatch(k, v));
    }
    let (&[b, t, h, d], &[kb, kt, hkv, kd]) = (q.dims(), k.dims()) else {
        return Err(mismatch(q, k));
    };
    if (kb, kt, kd) != (b, t, d) {
        return Err(mismatch(q, k));
    }
    let s = AttnShape { b, t, h, hkv, d };
    s.check_groups(op)?;
    if window == 0 {
        return Err(Error::Invalid {
            op,
            msg: "window 0: a query must see at least itself".into(),
        });
    }
    Ok(s)
}
