//! swax-nn: the layers models are built from. `mixers/` holds the sequence mixers, each in a
//! reference form (the paper's equations from tape ops: the spec) and a fused form (one tape node
//! over a fused kernel, held to the reference by tests).
pub mod mixers;
