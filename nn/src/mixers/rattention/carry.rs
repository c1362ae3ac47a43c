//! RAttention's linear-branch state, carried from one piece of a long sequence to the next when
//! evaluating in pieces (`layers::pieces`): `S = sum_s phi(k_s)^T v_s` over the keys that have
//! left the window tail, f32 `[B, Hkv, 2D, D]`. A piece runs joined to its tail, so the linear
//! branch sees the tail's old-enough keys by itself; the keys before the tail reach it only
//! through S, which every query of the piece reads (they are all older than its window).
use super::reference::feature;
use swax_autograd::Tape;
use swax_tensor::{DType, Result, Tensor};

/// `phi(q_t) · S` for every q head against its kv head's state: q `[B, T, H, D]`, s
/// `[B, Hkv, 2D, D]`; f32 `[B, T, H, D]`.
pub fn read(tape: &Tape, q: &Tensor, s: &Tensor) -> Result<Tensor> {
    let (b, t, h, d) = (q.dims()[0], q.dims()[1], q.dims()[2], q.dims()[3]);
    let hkv = s.dims()[1];
    let fq = tape.to_dtype(&feature(tape, q)?, DType::F32)?;
    // q head h reads kv head h / (H / Hkv): heads first, a kv head's group is consecutive rows.
    let fq = tape.reshape(
        &tape.permute(&fq, &[0, 2, 1, 3])?,
        [b, hkv, h / hkv * t, 2 * d],
    )?;
    let o = tape.reshape(&tape.matmul(&fq, s)?, [b, h, t, d])?;
    tape.permute(&o, &[0, 2, 1, 3])
}

/// `s + sum_s phi(k_s)^T v_s` per kv head for k, v `[B, n, Hkv, D]` (s None: from zero).
pub fn add(tape: &Tape, s: Option<&Tensor>, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let heads_first = |x: &Tensor| tape.permute(&tape.to_dtype(x, DType::F32)?, &[0, 2, 1, 3]);
    let kv = tape.matmul_t(
        &heads_first(&feature(tape, k)?)?,
        &heads_first(v)?,
        true,
        false,
    )?;
    match s {
        Some(s) => tape.add(s, &kv),
        None => Ok(kv),
    }
}
