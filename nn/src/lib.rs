//! swax-nn: the layers models are built from. `mixers/` holds the sequence mixers, each in a
//! reference form (the paper's equations from tape ops: the spec) and a fused form (one tape node
//! over a fused kernel, held to the reference by tests); `layers/` the modules around them (Linear,
//! Embedding, RMSNorm, SwiGLU, the four mixer layers, the output projection fused with the loss,
//! and `layers::pieces`: a long sequence run in pieces, each mixer carrying its window tail or
//! state); `block` the pre-norm residual block;
//! `params` the named parameters and the precision policy of a forward pass; `optim` AdamW,
//! clipping and learning-rate schedules; `checkpoint` safetensors files; `sampling` the next
//! token drawn where the logits are.
pub mod block;
pub mod checkpoint;
pub mod layers;
pub mod mixers;
pub mod optim;
pub mod params;
pub mod sampling;

pub use block::Block;
pub use params::{Init, Param, ParamId, Params, Weights};
