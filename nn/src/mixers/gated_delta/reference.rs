//! The gated delta rule's reference form: the recurrence of `mod.rs` one step at a time, from
//! primitive tape ops (the spec).
use super::state_or_zeros;
use crate::mixers::recurrent::RecurrentChecks;
use swax_autograd::Tape;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::{Result, Tensor};

/// `x / sqrt(|x|^2 + 1e-6)` over the last axis.
fn l2_normalize(tape: &Tape, x: &Tensor) -> Result<Tensor> {
    let sq = tape.sum(&tape.square(x)?, -1, true)?;
    tape.mul(x, &tape.rsqrt(&tape.add_scalar(&sq, 1e-6)?)?)
}

/// The step-by-step recurrence from `state` (`[B, H, Dk, Dv]`, zeros when None). Returns o
/// `[B, T, H, Dv]` and the final state.
#[allow(clippy::too_many_arguments)]
pub fn recurrent(
    tape: &Tape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    beta: &Tensor,
    g: &Tensor,
    state: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let op = "gated_delta::recurrent";
    let dims = RecurrentShape::check(op, q, k, v, &[beta, g], 1)?;
    let RecurrentShape { b, h, dk, dv, .. } = dims;
    let mut s = state_or_zeros(state, op, q, &dims)?;
    let qn = tape.scale(&l2_normalize(tape, q)?, 1.0 / (dk as f64).sqrt())?;
    let kn = l2_normalize(tape, k)?;
    let decay = tape.exp(g)?;
    let mut outs = Vec::with_capacity(dims.t);
    for t in 0..dims.t {
        let at = |x: &Tensor, shape: Vec<usize>| tape.reshape(&tape.narrow(x, 1, t, 1)?, shape);
        let q_t = at(&qn, vec![b, h, 1, dk])?;
        let (k_row, k_col) = (at(&kn, vec![b, h, 1, dk])?, at(&kn, vec![b, h, dk, 1])?);
        let v_t = at(v, vec![b, h, 1, dv])?;
        let (a_t, b_t) = (at(&decay, vec![b, h, 1, 1])?, at(beta, vec![b, h, 1, 1])?);
        // a (I - b k k^T) S + b k v^T = S' + k (b (v - k^T S'))^T with S' = a S.
        let decayed = tape.mul(&a_t, &s)?;
        let delta = tape.mul(&b_t, &tape.sub(&v_t, &tape.matmul(&k_row, &decayed)?)?)?;
        s = tape.add(&decayed, &tape.mul(&k_col, &delta)?)?;
        let o_t = tape.matmul(&q_t, &s)?;
        outs.push(tape.reshape(&o_t, vec![b, 1, h, dv])?);
    }
    let outs: Vec<&Tensor> = outs.iter().collect();
    Ok((tape.concat(&outs, 1)?, s))
}
