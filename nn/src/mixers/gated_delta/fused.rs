//! The gated delta rule as ONE tape node over the fused chunkwise kernels
//! (`Tensor::gated_delta_chunkwise` and its backward), and the single step built on it.
//!
//! The node's outputs are o and the final state (joined: see `joined.rs`). It saves its inputs
//! and the state before every chunk, `(T / chunk) · Dk · Dv` values per head: the backward
//! recomputes each chunk's WY factors (cheap, parallel work) but never the sequential state pass.
use super::state_or_zeros;
use crate::mixers::joined::record_joined;
use crate::mixers::one_step::{with_time, without_time};
use swax_autograd::Tape;
use swax_tensor::backend::RecurrentDims;
use swax_tensor::{Result, Tensor};

/// The chunkwise gated delta rule, `chunk` steps per chunk (any chunk gives the same values).
/// Returns o `[B, T, H, Dv]` and the final state `[B, H, Dk, Dv]`.
#[allow(clippy::too_many_arguments)]
pub fn chunkwise(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    beta: &Tensor,
    g: &Tensor,
    state: Option<&Tensor>,
    chunk: usize,
) -> Result<(Tensor, Tensor)> {
    let op = "gated_delta::chunkwise";
    let dims = RecurrentDims::check(op, q, k, v, &[beta, g], chunk)?;
    let s0 = state_or_zeros(state, op, q, &dims)?;
    let (o, states) = q.gated_delta_chunkwise(k, v, beta, g, &s0, chunk)?;
    let fin = dims.boundary(&states, dims.chunks())?.to_dtype(q.dtype())?;
    let (sq, sk, sv, sb, sg) = (q.clone(), k.clone(), v.clone(), beta.clone(), g.clone());
    let outs = record_joined(
        tape,
        op,
        &[q, k, v, beta, g, &s0],
        &[&o, &fin],
        move |d, needs| {
            let gr = sq
                .gated_delta_chunkwise_backward(&sk, &sv, &sb, &sg, &states, &d[0], &d[1], chunk)?;
            let all = [gr.dq, gr.dk, gr.dv, gr.dbeta, gr.dg, gr.ds0];
            Ok(all
                .into_iter()
                .zip(needs)
                .map(|(g, &need)| need.then_some(g))
                .collect())
        },
    )?;
    let [o, s] = <[Tensor; 2]>::try_from(outs).expect("two outputs");
    Ok((o, s))
}

/// One time step (decoding): q, k `[B, H, Dk]`, v `[B, H, Dv]`, beta, g `[B, H]`. Returns o
/// `[B, H, Dv]` and the next state. The chunkwise kernel with T = 1.
#[allow(clippy::too_many_arguments)]
pub fn step(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    beta: &Tensor,
    g: &Tensor,
    state: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let timed = |x: &Tensor| with_time(tape, x);
    let (o, next) = chunkwise(
        tape,
        &timed(q)?,
        &timed(k)?,
        &timed(v)?,
        &timed(beta)?,
        &timed(g)?,
        Some(state),
        1,
    )?;
    Ok((without_time(tape, &o)?, next))
}
