//! The mLSTM as ONE tape node over the fused chunkwise kernel (`kernel.rs`), and the single step
//! built on it.
//!
//! The node's outputs are h and the final C, n, m. It saves its
//! inputs, h and the chunk-boundary states `(C, n, m)` before every chunk: the backward then
//! never repeats the sequential state pass, at the cost of `(T / chunk) · Dk · (Dv + 1)` values
//! per head (a third of q, k, v at chunk 64, D 64).
use super::kernel::{self, MlstmBackward, MlstmIn};
use super::MlstmState;
use crate::mixers::one_step::{with_time, without_time};
use crate::mixers::recurrent::{boundary, RecurrentChecks};
use swax_autograd::Tape;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::{Result, Tensor};

/// The chunkwise mLSTM, `chunk` steps per chunk (any chunk gives the same values). Returns h
/// `[B, T, H, Dv]` and the final state.
#[allow(clippy::too_many_arguments)]
pub fn chunkwise(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    i: &Tensor,
    f: &Tensor,
    state: Option<&MlstmState>,
    chunk: usize,
    eps: f64,
) -> Result<(Tensor, MlstmState)> {
    let op = "mlstm::chunkwise";
    let dims = RecurrentShape::check(op, q, k, v, &[i, f], chunk)?;
    let s0 = MlstmState::or_zeros(state, op, q, &dims)?;
    let x = MlstmIn {
        q,
        k,
        v,
        i,
        f,
        state: MlstmState {
            c: &s0.c,
            n: &s0.n,
            m: &s0.m,
        },
    };
    let out = kernel::forward(&x, chunk, eps)?;
    let last = |x: &Tensor| boundary(x, dims.chunks())?.to_dtype(q.dtype());
    let fin = MlstmState {
        c: last(&out.boundary.c)?,
        n: last(&out.boundary.n)?,
        m: last(&out.boundary.m)?,
    };
    let inputs = [q, k, v, i, f, &s0.c, &s0.n, &s0.m];
    let saved: MlstmIn = x.try_map(|t| Ok((*t).clone()))?;
    let h = out.h.clone();
    let outs = tape.record_many(
        op,
        &inputs,
        vec![h, fin.c, fin.n, fin.m],
        move |d, needs| {
            let d_final = MlstmState {
                c: &d[1],
                n: &d[2],
                m: &d[3],
            };
            let g = kernel::backward(
                &MlstmBackward {
                    input: saved.try_map(Ok)?,
                    out: out.try_map(Ok)?,
                    dh: &d[0],
                    d_final,
                },
                chunk,
                eps,
            )?;
            let s = g.state;
            let all = [g.q, g.k, g.v, g.i, g.f, s.c, s.n, s.m];
            Ok(all
                .into_iter()
                .zip(needs)
                .map(|(g, &need)| need.then_some(g))
                .collect())
        },
    );
    let [h, c, n, m] = <[Tensor; 4]>::try_from(outs).expect("four outputs");
    Ok((h, MlstmState { c, n, m }))
}

/// One time step (decoding): q, k `[B, H, Dk]`, v `[B, H, Dv]`, i, f `[B, H]`. Returns h
/// `[B, H, Dv]` and the next state. The chunkwise kernel with T = 1, so the two agree exactly.
#[allow(clippy::too_many_arguments)]
pub fn step(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    i: &Tensor,
    f: &Tensor,
    state: &MlstmState,
    eps: f64,
) -> Result<(Tensor, MlstmState)> {
    let timed = |x: &Tensor| with_time(tape, x);
    let (h, next) = chunkwise(
        tape,
        &timed(q)?,
        &timed(k)?,
        &timed(v)?,
        &timed(i)?,
        &timed(f)?,
        Some(state),
        1,
        eps,
    )?;
    Ok((without_time(tape, &h)?, next))
}
