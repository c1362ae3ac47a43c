//! The mLSTM's reference forms, from primitive tape ops: `recurrent` is the equations of
//! `mod.rs` one step at a time (the spec); `parallel` is the same sum written as a `T × T`
//! matrix of log weights, each row stabilized by its max (which is the recurrence's m_t).
use super::MlstmState;
use crate::mixers::recurrent::RecurrentChecks;
use swax_autograd::Tape;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::{Result, Tensor, CAUSAL};

/// |x| as max(x, -x): differentiable everywhere but 0, from ops the tape has.
fn abs(tape: &Tape, x: &Tensor) -> Result<Tensor> {
    tape.maximum(x, &tape.neg(x)?)
}

/// `num / (max(|nq|, exp(-m)) + eps)`.
fn normalize(tape: &Tape, num: &Tensor, nq: &Tensor, m: &Tensor, eps: f64) -> Result<Tensor> {
    let floor = tape.exp(&tape.neg(m)?)?;
    let den = tape.add_scalar(&tape.maximum(&abs(tape, nq)?, &floor)?, eps)?;
    tape.div(num, &den)
}

/// The step-by-step recurrence. Returns h `[B, T, H, Dv]` and the final state.
#[allow(clippy::too_many_arguments)]
pub fn recurrent(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    i: &Tensor,
    f: &Tensor,
    state: Option<&MlstmState>,
    eps: f64,
) -> Result<(Tensor, MlstmState)> {
    let op = "mlstm::recurrent";
    let dims = RecurrentShape::check(op, q, k, v, &[i, f], 1)?;
    let RecurrentShape { b, h, dk, dv, .. } = dims;
    let MlstmState {
        mut c,
        mut n,
        mut m,
    } = MlstmState::or_zeros(state, op, q, &dims)?;
    let qs = tape.scale(q, 1.0 / (dk as f64).sqrt())?;
    let lf = tape.log_sigmoid(f)?;
    let mut outs = Vec::with_capacity(dims.t);
    for t in 0..dims.t {
        let at = |x: &Tensor, shape: Vec<usize>| tape.reshape(&tape.narrow(x, 1, t, 1)?, shape);
        let (q_t, k_t) = (at(&qs, vec![b, h, 1, dk])?, at(k, vec![b, h, dk, 1])?);
        let v_t = at(v, vec![b, h, 1, dv])?;
        let (i_t, lf_t) = (at(i, vec![b, h])?, at(&lf, vec![b, h])?);
        let decayed = tape.add(&lf_t, &m)?;
        let m_t = tape.maximum(&decayed, &i_t)?;
        let forget = tape.reshape(&tape.exp(&tape.sub(&decayed, &m_t)?)?, vec![b, h, 1, 1])?;
        let input = tape.reshape(&tape.exp(&tape.sub(&i_t, &m_t)?)?, vec![b, h, 1, 1])?;
        let kv = tape.mul(&k_t, &v_t)?;
        c = tape.add(&tape.mul(&forget, &c)?, &tape.mul(&input, &kv)?)?;
        let n4 = tape.reshape(&n, vec![b, h, dk, 1])?;
        let n4 = tape.add(&tape.mul(&forget, &n4)?, &tape.mul(&input, &k_t)?)?;
        let num = tape.matmul(&q_t, &c)?;
        let nq = tape.matmul(&q_t, &n4)?;
        let m4 = tape.reshape(&m_t, vec![b, h, 1, 1])?;
        let h_t = normalize(tape, &num, &nq, &m4, eps)?;
        outs.push(tape.reshape(&h_t, vec![b, 1, h, dv])?);
        n = tape.reshape(&n4, vec![b, h, dk])?;
        m = m_t;
    }
    let outs: Vec<&Tensor> = outs.iter().collect();
    Ok((tape.concat(&outs, 1)?, MlstmState { c, n, m }))
}

/// The quadratic form: `log w_ts = i_s + F_t - F_s` for s <= t (F the running sum of log
/// forget gates), plus a column `m0 + F_t` for the initial state; each row is stabilized by its
/// max. Returns h `[B, T, H, Dv]` and the final state.
#[allow(clippy::too_many_arguments)]
pub fn parallel(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    i: &Tensor,
    f: &Tensor,
    state: Option<&MlstmState>,
    eps: f64,
) -> Result<(Tensor, MlstmState)> {
    let op = "mlstm::parallel";
    let dims = RecurrentShape::check(op, q, k, v, &[i, f], 1)?;
    let RecurrentShape {
        b, t, h, dk, dv, ..
    } = dims;
    let s0 = MlstmState::or_zeros(state, op, q, &dims)?;
    // Heads first: [B, H, T, ..].
    let heads = |x: &Tensor| tape.permute(x, &[0, 2, 1, 3]);
    let gates = |x: &Tensor| tape.permute(x, &[0, 2, 1]);
    let qs = heads(&tape.scale(q, 1.0 / (dk as f64).sqrt())?)?;
    let (kh, vh) = (heads(k)?, heads(v)?);
    let fcum = tape.cumsum(&gates(&tape.log_sigmoid(f)?)?, -1, false)?;
    let ig = gates(i)?;
    let col = |x: &Tensor| tape.reshape(x, vec![b, h, t, 1]);
    let row = |x: &Tensor| tape.reshape(x, vec![b, h, 1, t]);
    let logw = tape.add(&tape.sub(&col(&fcum)?, &row(&fcum)?)?, &row(&ig)?)?;
    let logw = tape.masked_fill_band(&logw, CAUSAL, f64::NEG_INFINITY)?;
    let m0 = tape.reshape(&s0.m, vec![b, h, 1, 1])?;
    let log_init = tape.add(&col(&fcum)?, &m0)?;
    let all = tape.concat(&[&log_init, &logw], -1)?;
    let m = tape.max(&all, -1, true)?;
    let weights = tape.exp(&tape.sub(&all, &m)?)?;
    let a = tape.narrow(&weights, -1, 0, 1)?;
    let w = tape.narrow(&weights, -1, 1, t)?;
    let p = tape.mul(&w, &tape.matmul_t(&qs, &kh, false, true)?)?;
    let n0 = tape.reshape(&s0.n, vec![b, h, dk, 1])?;
    let num = tape.add(
        &tape.matmul(&p, &vh)?,
        &tape.mul(&a, &tape.matmul(&qs, &s0.c)?)?,
    )?;
    let nq = tape.add(
        &tape.sum(&p, -1, true)?,
        &tape.mul(&a, &tape.matmul(&qs, &n0)?)?,
    )?;
    let out = tape.permute(&normalize(tape, &num, &nq, &m, eps)?, &[0, 2, 1, 3])?;
    // The final state: the last row's weights.
    let last = |x: &Tensor| tape.narrow(x, 2, t - 1, 1);
    let (a_t, w_t) = (last(&a)?, last(&w)?);
    let c = tape.add(
        &tape.mul(&a_t, &s0.c)?,
        &tape.matmul_t(
            &tape.mul(&tape.transpose(&w_t, -1, -2)?, &kh)?,
            &vh,
            true,
            false,
        )?,
    )?;
    let c = tape.reshape(&c, vec![b, h, dk, dv])?;
    let n = tape.add(
        &tape.mul(&tape.reshape(&a_t, vec![b, h, 1])?, &s0.n)?,
        &tape.reshape(&tape.matmul(&w_t, &kh)?, vec![b, h, dk])?,
    )?;
    let m_t = tape.reshape(&last(&m)?, vec![b, h])?;
    Ok((out, MlstmState { c, n, m: m_t }))
}
