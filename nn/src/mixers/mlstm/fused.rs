//! The mLSTM as ONE tape node over the fused chunkwise kernels (`Tensor::mlstm_chunkwise` and
//! its backward), and the single step built on it.
//!
//! The node's outputs are h and the final C, n, m (joined: see `joined.rs`). It saves its
//! inputs, h and the chunk-boundary states `(C, n, m)` before every chunk: the backward then
//! never repeats the sequential state pass, at the cost of `(T / chunk) · Dk · (Dv + 1)` values
//! per head (a third of q, k, v at chunk 64, D 64).
use super::MlstmState;
use crate::mixers::joined::record_joined;
use crate::mixers::one_step::{with_time, without_time};
use swax_autograd::Tape;
use swax_tensor::backend::RecurrentDims;
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
    let dims = RecurrentDims::check(op, q, k, v, &[i, f], chunk)?;
    let s0 = MlstmState::or_zeros(state, op, q, &dims)?;
    let (h, saved) = q.mlstm_chunkwise(k, v, i, f, &s0.c, &s0.n, &s0.m, chunk, eps)?;
    let last = |x: &Tensor| dims.boundary(x, dims.chunks())?.to_dtype(q.dtype());
    let fin = MlstmState {
        c: last(&saved.c)?,
        n: last(&saved.n)?,
        m: last(&saved.m)?,
    };
    let inputs = [q, k, v, i, f, &s0.c, &s0.n, &s0.m];
    let (sq, sk, sv, si, sf, sh) = (
        q.clone(),
        k.clone(),
        v.clone(),
        i.clone(),
        f.clone(),
        h.clone(),
    );
    let outs = record_joined(
        tape,
        op,
        &inputs,
        &[&h, &fin.c, &fin.n, &fin.m],
        move |d, needs| {
            let g = sq.mlstm_chunkwise_backward(
                &sk,
                &sv,
                &si,
                &sf,
                &saved,
                &sh,
                &d[0],
                [&d[1], &d[2], &d[3]],
                chunk,
                eps,
            )?;
            let all = [g.dq, g.dk, g.dv, g.di, g.df, g.dc0, g.dn0, g.dm0];
            Ok(all
                .into_iter()
                .zip(needs)
                .map(|(g, &need)| need.then_some(g))
                .collect())
        },
    )?;
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
