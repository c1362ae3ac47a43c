//! The RAttention layer: q, k, v from one projection (grouped-query heads), the RAttention
//! mixer (sliding-window attention with RoPE plus the residual linear attention over older
//! keys, each branch RMS-normalized, summed), the out projection; the same over one piece of
//! a longer sequence, for evaluation in pieces; and one decoding step.
use super::attention::{join_tail, tail_keys, tail_len};
use super::basic::{Linear, INIT_STD};
use super::pieces::{KvCache, MixerState};
use super::{in_f32, split_heads, Forms, MixerDims};
use crate::mixers::attention::{self as swa, node as swa_node, reference as swa_reference};
use crate::mixers::decode::{self, AttendIn, RlaStepIn};
use crate::mixers::rattention::{
    self as ra, carry, node as rattention_node, reference, Config, Rope,
};
use crate::params::{Init, ParamId, Params, Weights};
use swax_autograd::Tape;
use swax_tensor::{DType, Error, Result, Tensor};

#[derive(Clone, Debug)]
pub struct RAttention {
    qkv: Linear,
    norm_swa: ParamId,
    norm_rla: ParamId,
    out: Linear,
    h: usize,
    hkv: usize,
    d: usize,
    rope_theta: f64,
    chunk: usize,
    eps: f64,
    forms: Forms,
}

impl RAttention {
    pub fn new(p: &mut Params, name: &str, dims: MixerDims) -> Result<RAttention> {
        let (c, h, hkv, d) = (dims.d_model, dims.heads, dims.kv_heads, dims.head_dim());
        if hkv == 0 || h % hkv != 0 || h * d != c {
            return Err(Error::Invalid {
                op: "RAttention::new",
                msg: format!(
                    "heads {h} must be a multiple of kv_heads {hkv} and divide d_model {c}"
                ),
            });
        }
        Ok(RAttention {
            qkv: Linear::new(p, &format!("{name}.qkv"), c, (h + 2 * hkv) * d, INIT_STD)?,
            norm_swa: p.add(format!("{name}.norm_swa.weight"), vec![d], Init::Const(1.0))?,
            norm_rla: p.add(format!("{name}.norm_rla.weight"), vec![d], Init::Const(1.0))?,
            out: Linear::new(p, &format!("{name}.out"), h * d, c, dims.out_std)?,
            h,
            hkv,
            d,
            rope_theta: dims.rope_theta,
            chunk: dims.chunk,
            eps: dims.eps,
            forms: dims.forms,
        })
    }

    /// q `[B, T, H, D]`, k and v `[B, T, Hkv, D]` from a qkv projection `[B, T, (H + 2 Hkv) D]`.
    fn heads(&self, tape: &Tape, qkv: &Tensor) -> Result<[Tensor; 3]> {
        let (h, hkv, d) = (self.h, self.hkv, self.d);
        split_heads(tape, qkv, [(h, d), (hkv, d), (hkv, d)])
    }

    /// The mixer's settings for a span whose first token is at `offset`.
    fn config(&self, window: usize, offset: usize) -> Config {
        Config {
            window,
            scale: None,
            rope: Some(Rope {
                offset,
                theta: self.rope_theta,
            }),
            eps: self.eps,
            chunk: self.chunk,
        }
    }

    pub fn forward(&self, w: &Weights, x: &Tensor, window: usize) -> Result<Tensor> {
        let tape = w.tape();
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let [q, k, v] = self.heads(tape, &self.qkv.forward(w, x)?)?;
        let cfg = self.config(window, 0);
        let (ns, nr) = (w.get(self.norm_swa), w.get(self.norm_rla));
        let o = if self
            .forms
            .fused(ra::has_kernel(q.device(), q.dtype(), self.d))
        {
            rattention_node::rattention(tape, &q, &k, &v, ns, nr, &cfg)?
        } else {
            in_f32(w, [&q, &k, &v, ns, nr], |[q, k, v, ns, nr]| {
                reference::rattention(tape, &q, &k, &v, &ns, &nr, &cfg)
            })?
        };
        self.out
            .forward(w, &tape.reshape(&o, vec![b, t, self.h * self.d])?)
    }

    /// `forward` over one piece x `[B, Tp, C]` of a longer sequence whose first token is at `pos`
    /// (evaluation: no gradient flows through it). As in `Attention::forward_piece` the piece
    /// runs joined to the qkv of the window's tokens before it, which serves the SWA branch and
    /// the linear branch's keys inside that span; the keys before it reach the linear branch
    /// through the carried state (`carry`). Both branches are computed whole and normed here,
    /// the state read in between. Updates `state`'s tail and linear state.
    pub fn forward_piece(
        &self,
        w: &Weights,
        x: &Tensor,
        window: usize,
        pos: usize,
        state: &mut MixerState,
    ) -> Result<Tensor> {
        let tape = w.tape();
        let (b, tp) = (x.dims()[0], x.dims()[1]);
        let (qkv, start) = join_tail(tape, &self.qkv.forward(w, x)?, state.kv_tail.as_ref(), pos)?;
        let t = qkv.dims()[1];
        let [q, k, v] = self.heads(tape, &qkv)?;
        // A window past the span sees all of it: the same as the span's length.
        let cfg = self.config(window.min(t), start);
        let (ns, nr) = (w.get(self.norm_swa), w.get(self.norm_rla));
        let dims = swa::shape("RAttention::forward_piece", &q, &k, &v, cfg.window)?;
        let rope = |x: &Tensor| tape.rope(x, start, self.rope_theta);
        let fused = self
            .forms
            .fused(ra::has_kernel(q.device(), q.dtype(), self.d));
        let o_swa = if fused {
            swa_node::swa(tape, &rope(&q)?, &rope(&k)?, &v, cfg.window, None)?
        } else {
            in_f32(w, [&rope(&q)?, &rope(&k)?, &v], |[q, k, v]| {
                swa_reference::swa(tape, &q, &k, &v, cfg.window, None)
            })?
        };
        let o_rla = if fused {
            ra::forward(
                &swa::SwaIn {
                    q: &q,
                    k: &k,
                    v: &v,
                },
                cfg.window,
                cfg.chunk,
            )?
        } else {
            in_f32(w, [&q, &k, &v], |[q, k, v]| {
                reference::linear(tape, &q, &k, &v, dims, cfg.window)
            })?
        };
        let piece = |x: &Tensor| tape.narrow(x, 1, t - tp, tp);
        let (o_swa, mut o_rla) = (piece(&o_swa)?, piece(&o_rla)?);
        if let Some(s) = &state.linear {
            let dtype = o_rla.dtype();
            let sum = tape.add(
                &tape.to_dtype(&o_rla, DType::F32)?,
                &carry::read(tape, &piece(&q)?, s)?,
            )?;
            o_rla = tape.to_dtype(&sum, dtype)?;
        }
        let o = tape.add(
            &tape.rms_norm(&o_swa, ns, cfg.eps)?,
            &tape.rms_norm(&o_rla, nr, cfg.eps)?,
        )?;
        let keep = tail_len(t, window);
        if keep < t {
            let old = |x: &Tensor| tape.narrow(x, 1, 0, t - keep);
            state.linear = Some(carry::add(
                tape,
                state.linear.as_ref(),
                &old(&k)?,
                &old(&v)?,
            )?);
        }
        state.kv_tail = Some(tape.narrow(&qkv, 1, t - keep, keep)?);
        self.out
            .forward(w, &tape.reshape(&o, vec![b, tp, self.h * self.d])?)
    }

    /// Whether `step` runs for activations of this dtype on this device: the fused forms and
    /// the decoding kernels there.
    pub fn steps(&self, x: &Tensor) -> bool {
        self.forms.steps(x, self.d)
    }

    /// One decoding step x `[B, 1, C]` at position `pos`. The SWA branch is `Attention::step`'s:
    /// the key (RoPE applied once) enters a ring of `window` slots, made on the first step from
    /// the qkv tail a piece left, which also keeps the key before RoPE. The linear branch first
    /// adds the key leaving the window (the one the step's key overwrites) to the state, then
    /// reads the state with the query (`decode::rla_step`).
    pub fn step(
        &self,
        w: &Weights,
        x: &Tensor,
        window: usize,
        pos: usize,
        state: &mut MixerState,
    ) -> Result<Tensor> {
        let tape = w.tape();
        let b = x.dims()[0];
        let (h, hkv, d, theta) = (self.h, self.hkv, self.d, self.rope_theta);
        let [q, k, v] = self.heads(tape, &self.qkv.forward(w, x)?)?;
        let mut kv = match state.kv.take() {
            Some(c) => c,
            None => {
                let tail = state.kv_tail.take();
                let [k, v, raw] = tail_keys(tape, tail, x, [h, hkv, d], theta, pos)?;
                KvCache::new(k, v, Some(raw), window)?
            }
        };
        // The pieces carry the state in f32: the step keeps it in `state_dtype`.
        let sd = decode::state_dtype(x.dtype());
        let s = match state.linear.take() {
            Some(s) => s.to_dtype(sd)?,
            None => Tensor::zeros(vec![b, hkv, 2 * d, d], sd, x.device())?,
        };
        let raw = kv.raw.as_ref().ok_or_else(|| Error::Invalid {
            op: "RAttention::step",
            msg: "a cache without the keys before RoPE (made by another layer)".into(),
        })?;
        let (o_rla, s) = decode::rla_step(
            &RlaStepIn {
                q: &q.reshape(vec![b, h, d])?,
                k: raw,
                v: &kv.v,
                state: &s,
            },
            kv.next_slot(),
        )?;
        state.linear = Some(s);
        kv.push(&tape.rope(&k, pos, theta)?, &v, Some(&k))?;
        let o_swa = decode::attend(
            &AttendIn {
                q: &tape.rope(&q, pos, theta)?.reshape(vec![b, h, d])?,
                k: &kv.k,
                v: &kv.v,
            },
            kv.n,
            None,
        )?;
        state.kv = Some(kv);
        let (ns, nr) = (w.get(self.norm_swa), w.get(self.norm_rla));
        let o = tape.add(
            &tape.rms_norm(&o_swa, ns, self.eps)?,
            &tape.rms_norm(&o_rla, nr, self.eps)?,
        )?;
        self.out.forward(w, &o.reshape(vec![b, 1, h * d])?)
    }
}
