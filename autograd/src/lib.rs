//! swax-autograd: the tape (`tape.rs`) and a hand-written backward beside every differentiable
//! op (`ops/`), plus the finite-difference gradient checker every op is tested with
//! (`gradcheck.rs`), and recomputation (`recompute.rs`): a piece of the forward recorded as one
//! node that keeps its inputs and reruns the piece in the backward.
//!
//! Model code calls ops through the tape — `tape.matmul(&x, &w)?` — which computes the forward
//! with `swax_tensor` and records the backward when an input is tracked.
pub mod gradcheck;
mod ops;
mod recompute;
mod tape;

pub use tape::{BackwardFn, Gradients, Tape};
