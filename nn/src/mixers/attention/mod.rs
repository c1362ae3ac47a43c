//! Causal sliding-window attention (SWA), full causal attention being the window >= T case.
//!
//! Window convention, used everywhere: with window W, query t sees keys `t - W < s <= t` (W keys,
//! itself included; FlashAttention's `window_size = (W - 1, 0)`). q is `[B, T, H, D]`, k and v
//! `[B, T, Hkv, D]` with H a multiple of Hkv (grouped-query attention: q head h reads kv head
//! `h / (H / Hkv)`). Scores are scaled by `scale`, `1/sqrt(D)` when None.
//!
//! `reference::swa` is the spec (a band-masked softmax from tape ops); `node::swa` is one tape
//! node over the tiled kernels `Tensor::swa` / `Tensor::swa_backward`. Both take the same
//! arguments and return o `[B, T, H, D]`.
pub mod node;
pub mod reference;

/// The default score scale, `1/sqrt(D)`.
pub fn default_scale(d: usize) -> f64 {
    1.0 / (d as f64).sqrt()
}
