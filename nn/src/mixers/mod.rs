//! Sequence mixers. Inputs are `[B, T, H, D]` unless a mixer documents otherwise.
pub mod attention;
pub mod gated_delta;
mod joined;
pub mod mlstm;
mod one_step;
pub mod rattention;
