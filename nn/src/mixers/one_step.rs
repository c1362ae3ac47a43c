//! A single time step (decoding) run as a chunk of length one: step inputs `[B, H, ..]` gain a
//! time axis of length 1 for the chunkwise kernel, and its output loses it again.
use swax_autograd::Tape;
use swax_tensor::{Result, Tensor};

/// `[B, H, ..]` as `[B, 1, H, ..]` (`[B]` as `[B, 1]`).
pub(crate) fn with_time(tape: &Tape, x: &Tensor) -> Result<Tensor> {
    let mut d = x.dims().to_vec();
    d.insert(1.min(d.len()), 1);
    tape.reshape(x, d)
}

/// `[B, 1, H, ..]` as `[B, H, ..]`.
pub(crate) fn without_time(tape: &Tape, x: &Tensor) -> Result<Tensor> {
    let mut d = x.dims().to_vec();
    d.remove(1);
    tape.reshape(x, d)
}
