//! The gated delta rule as ONE tape node over the fused chunkwise kernel (`kernel.rs`), and the
//! single step built on it.
//!
//! The node's outputs are o and the final state. It saves its inputs
//! and the state before every chunk, `(T / chunk) · Dk · Dv` values per head: the backward
//! recomputes each chunk's WY factors (cheap, parallel work) but never the sequential state pass.
use super::kernel::{self, GatedDeltaBackward, GatedDeltaIn};
use super::state_or_zeros;
use crate::mixers::one_step::{with_time, without_time};
use crate::mixers::recurrent::{boundary, RecurrentChecks};
use swax_autograd::Tape;
use swax_cuda::kernels::chunk::RecurrentShape;
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
    let dims = RecurrentShape::check(op, q, k, v, &[beta, g], chunk)?;
    let s0 = state_or_zeros(state, op, q, &dims)?;
    let x = GatedDeltaIn {
        q,
        k,
        v,
        beta,
        g,
        state: &s0,
    };
    let out = kernel::forward(&x, chunk)?;
    let fin = boundary(&out.boundary, dims.chunks())?.to_dtype(q.dtype())?;
    let saved: GatedDeltaIn = x.try_map(|t| Ok((*t).clone()))?;
    let boundary = out.boundary;
    let outs = tape.record_many(
        op,
        &[q, k, v, beta, g, &s0],
        vec![out.o, fin],
        move |d, needs| {
            let gr = kernel::backward(
                &GatedDeltaBackward {
                    input: saved.try_map(Ok)?,
                    boundary: &boundary,
                    d_out: &d[0],
                    d_final: &d[1],
                },
                chunk,
            )?;
            let all = [gr.q, gr.k, gr.v, gr.beta, gr.g, gr.state];
            Ok(all
                .into_iter()
                .zip(needs)
                .map(|(g, &need)| need.then_some(g))
                .collect())
        },
    );
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
