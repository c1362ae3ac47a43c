//! The attention layer (sliding-window or full): q, k, v from one projection, RoPE on q and k,
//! grouped-query heads, the SWA mixer, the output projection. Run in pieces (`pieces.rs`), it
//! carries the qkv projection of the window's last tokens: `join_tail` and `tail_len`, which
//! RAttention's layer shares, as it shares `tail_keys` to start a decoding cache from them.
use super::basic::{Linear, INIT_STD};
use super::pieces::KvCache;
use super::{in_f32, split_heads, Forms, MixerDims};
use crate::mixers::attention::{has_kernel, node as swa_node, reference};
use crate::mixers::decode::{self, AttendIn};
use crate::params::{Params, Weights};
use swax_autograd::Tape;
use swax_tensor::{Error, Result, Tensor};

#[derive(Clone, Debug)]
pub struct Attention {
    qkv: Linear,
    out: Linear,
    h: usize,
    hkv: usize,
    d: usize,
    rope_theta: f64,
    forms: Forms,
}

impl Attention {
    pub fn new(p: &mut Params, name: &str, dims: MixerDims) -> Result<Attention> {
        let (h, hkv, d) = (dims.heads, dims.kv_heads, dims.head_dim());
        if hkv == 0 || h % hkv != 0 || h * d != dims.d_model {
            return Err(Error::Invalid {
                op: "Attention::new",
                msg: format!(
                    "heads {h} must be a multiple of kv_heads {hkv} and divide d_model {}",
                    dims.d_model
                ),
            });
        }
        let c = dims.d_model;
        Ok(Attention {
            qkv: Linear::new(p, &format!("{name}.qkv"), c, (h + 2 * hkv) * d, INIT_STD)?,
            out: Linear::new(p, &format!("{name}.out"), h * d, c, dims.out_std)?,
            h,
            hkv,
            d,
            rope_theta: dims.rope_theta,
            forms: dims.forms,
        })
    }

    /// x `[B, T, C]`; each query sees `window` keys (itself included). A whole sequence is
    /// one piece with nothing before it.
    pub fn forward(&self, w: &Weights, x: &Tensor, window: usize) -> Result<Tensor> {
        Ok(self.forward_piece(w, x, window, 0, None)?.0)
    }

    /// One piece x `[B, Tp, C]` of a longer sequence whose first token is at `pos`: `tail` is
    /// the qkv projection of the tokens just before it (those within the window). The piece runs
    /// joined to its tail, whose queries are computed and dropped. Returns the output for x and
    /// the joined qkv, to cut the next tail from.
    pub fn forward_piece(
        &self,
        w: &Weights,
        x: &Tensor,
        window: usize,
        pos: usize,
        tail: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let tape = w.tape();
        let (b, tp) = (x.dims()[0], x.dims()[1]);
        let (h, hkv, d) = (self.h, self.hkv, self.d);
        let (qkv, start) = join_tail(tape, &self.qkv.forward(w, x)?, tail, pos)?;
        let t = qkv.dims()[1];
        let [q, k, v] = split_heads(tape, &qkv, [(h, d), (hkv, d), (hkv, d)])?;
        let q = tape.rope(&q, start, self.rope_theta)?;
        let k = tape.rope(&k, start, self.rope_theta)?;
        let window = window.min(t);
        let o = if self.forms.fused(has_kernel(q.device(), q.dtype(), d)) {
            swa_node::swa(tape, &q, &k, &v, window, None)?
        } else {
            in_f32(w, [&q, &k, &v], |[q, k, v]| {
                reference::swa(tape, &q, &k, &v, window, None)
            })?
        };
        let o = tape.reshape(&tape.narrow(&o, 1, t - tp, tp)?, vec![b, tp, h * d])?;
        Ok((self.out.forward(w, &o)?, qkv))
    }
}

impl Attention {
    /// Whether `step` runs for activations of this dtype on this device: the fused forms and
    /// the decoding kernel there.
    pub fn steps(&self, x: &Tensor) -> bool {
        self.forms.steps(x, self.d)
    }

    /// One decoding step x `[B, 1, C]` at position `pos`: its key (RoPE applied once, here)
    /// enters `cache`, made on the first step from the qkv `tail` a piece left, and its query
    /// attends to the cached keys alone. `window` bounds the cache (a ring of that many slots);
    /// `usize::MAX` grows it (full attention).
    pub fn step(
        &self,
        w: &Weights,
        x: &Tensor,
        window: usize,
        pos: usize,
        cache: &mut Option<KvCache>,
        tail: &mut Option<Tensor>,
    ) -> Result<Tensor> {
        let tape = w.tape();
        let b = x.dims()[0];
        let (h, hkv, d) = (self.h, self.hkv, self.d);
        let qkv = self.qkv.forward(w, x)?;
        // q and k rotated at the step's position: the key once, as it enters the cache.
        let [q, k, v] = decode::split_rope(&qkv, [h, hkv, d], pos, self.rope_theta)?;
        let mut kv = match cache.take() {
            Some(c) => c,
            None => {
                let heads = [h, hkv, d];
                let [k, v, _] = tail_keys(tape, tail.take(), x, heads, self.rope_theta, pos)?;
                KvCache::new(k, v, None, window)?
            }
        };
        kv.push(&k, &v, None)?;
        let o = decode::attend(
            &AttendIn {
                q: &q,
                k: &kv.k,
                v: &kv.v,
            },
            kv.n,
            None,
        )?;
        *cache = Some(kv);
        self.out.forward(w, &o.reshape(vec![b, 1, h * d])?)
    }
}

/// The keys with RoPE applied, the values and the keys before RoPE `[B, n, Hkv, D]` of a
/// piece's qkv `tail` of heads `[H, Hkv, D]`, which ends just before `pos` (none: nothing
/// before, n = 0): what a decoding cache starts from.
pub(crate) fn tail_keys(
    tape: &Tape,
    tail: Option<Tensor>,
    x: &Tensor,
    [h, hkv, d]: [usize; 3],
    theta: f64,
    pos: usize,
) -> Result<[Tensor; 3]> {
    match tail {
        Some(t) => {
            let [_, k, v] = split_heads(tape, &t, [(h, d), (hkv, d), (hkv, d)])?;
            let start = pos.checked_sub(k.dims()[1]).ok_or_else(|| Error::Invalid {
                op: "decoding step",
                msg: format!("a tail of {} tokens before position {pos}", k.dims()[1]),
            })?;
            Ok([tape.rope(&k, start, theta)?, v, k])
        }
        None => {
            let empty = Tensor::zeros(vec![x.dims()[0], 0, hkv, d], x.dtype(), x.device())?;
            Ok([empty.clone(), empty.clone(), empty])
        }
    }
}

/// A piece's qkv projection `[B, Tp, ..]` joined after the tail carried to it, and the position
/// of the joined span's first token (the piece's first is at `pos`).
pub(crate) fn join_tail(
    tape: &Tape,
    qkv: &Tensor,
    tail: Option<&Tensor>,
    pos: usize,
) -> Result<(Tensor, usize)> {
    let joined = match tail {
        Some(tail) => tape.concat(&[tail, qkv], 1)?,
        None => qkv.clone(),
    };
    let before = joined.dims()[1] - qkv.dims()[1];
    let start = pos.checked_sub(before).ok_or_else(|| Error::Invalid {
        op: "forward_piece",
        msg: format!("a tail of {before} tokens before position {pos}"),
    })?;
    Ok((joined, start))
}

/// How many of a joined span's last `t` tokens the next piece needs: a query sees itself and the
/// window - 1 keys before it.
pub(crate) fn tail_len(t: usize, window: usize) -> usize {
    t.min(window.saturating_sub(1))
}
