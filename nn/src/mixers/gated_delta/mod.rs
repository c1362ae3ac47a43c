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
//! Forms: `recurrent` (step by step, the spec), `chunkwise` (one tape node over the fused WY
//! kernels) and `step` (one time step, for decoding).
mod fused;
mod reference;

pub use fused::{chunkwise, step};
pub use reference::recurrent;

use swax_tensor::backend::RecurrentDims;
use swax_tensor::{Result, Tensor};

/// The given state, checked against the inputs' sizes, or zeros.
fn state_or_zeros(
    state: Option<&Tensor>,
    op: &'static str,
    q: &Tensor,
    dims: &RecurrentDims,
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
