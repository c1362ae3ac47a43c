//! A long sequence run in pieces (evaluation, generation), nothing recorded: each mixer carries
//! what the next piece needs, so memory grows with the piece and the window, not with the
//! sequence (except full attention, whose window is the whole past). Sliding-window attention
//! carries the qkv projection of the last W - 1 tokens, RAttention those and its linear branch's
//! state over the keys before them, the mLSTM and the gated delta rule their recurrent state and
//! the inputs of their short convolution. The pieces give the same outputs as one pass over the
//! whole sequence.
use super::attention::{tail_len, Attention};
use super::Mixer;
use crate::mixers::mlstm::MlstmState;
use crate::params::Weights;
use swax_tensor::{Error, Result, Tensor};

/// How a piece of one token is read once a piece came before it (decoding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Decode {
    /// The single-step kernels (`mixers::decode`) where the layer has them: attention keeps a
    /// cache of keys (RoPE applied) and values and attends one query to it, the recurrent layers
    /// step their state.
    #[default]
    Steps,
    /// The token as a piece of length one: attention recomputes every query of its window, the
    /// recurrent layers run their chunkwise kernels on one step (the reference for `Steps`).
    Recompute,
}

/// Attention's keys (RoPE applied) and values `[B, S, Hkv, D]` for decoding: a ring of S = W
/// slots for a sliding window (a key enters where the one leaving the window was: softmax does
/// not care about the order), or all the keys so far for full attention. RAttention's ring also
/// keeps each key before RoPE, which its linear branch reads as the key leaves the window.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub k: Tensor,
    pub v: Tensor,
    /// Slots that hold a key.
    pub n: usize,
    /// The slot the next key enters.
    next: usize,
    /// The ring's slots; `usize::MAX`: it grows (its first `n` slots hold the keys).
    window: usize,
    /// RAttention: the keys before RoPE `[B, S, Hkv, D]`, slot for slot with `k`.
    pub raw: Option<Tensor>,
}

impl KvCache {
    /// The cache holding keys k and values v `[B, n, Hkv, D]` (the last of at most `window`),
    /// and the keys before RoPE where the layer reads them (RAttention).
    pub fn new(k: Tensor, v: Tensor, raw: Option<Tensor>, window: usize) -> Result<KvCache> {
        let n = k.dims()[1];
        if n >= window.max(1) {
            return Err(Error::Invalid {
                op: "KvCache::new",
                msg: format!("{n} keys leave no slot of a window of {window} for the next"),
            });
        }
        // The ring's free slots hold zeros (`rla_step` reads a zero value as adding nothing).
        let slots = |x: Tensor| match window {
            usize::MAX => x.into_unique(),
            w => x.pad(1, 0, w - n)?.into_unique(),
        };
        Ok(KvCache {
            k: slots(k)?,
            v: slots(v)?,
            n,
            next: n,
            window,
            raw: raw.map(slots).transpose()?,
        })
    }

    /// The slot the next key enters: in a full ring, the oldest key's, which leaves the window.
    pub fn next_slot(&self) -> usize {
        self.next
    }

    /// Takes the step's key and value `[B, 1, Hkv, D]` (and its key before RoPE where the cache
    /// keeps those): over the oldest in a full ring.
    pub fn push(&mut self, k: &Tensor, v: &Tensor, raw: Option<&Tensor>) -> Result<()> {
        if let (Some(ring), Some(raw)) = (self.raw.as_mut(), raw) {
            ring.write_at(1, self.next, raw)?;
        }
        if self.window == usize::MAX {
            // Full attention's cache grows by doubling its slots when they are all taken, so a
            // step copies the cache only at every doubling, not at every token.
            let slots = self.k.dims()[1];
            if self.n == slots {
                let more = slots.max(16);
                self.k = self.k.pad(1, 0, more)?.into_unique()?;
                self.v = self.v.pad(1, 0, more)?.into_unique()?;
            }
            self.k.write_at(1, self.n, k)?;
            self.v.write_at(1, self.n, v)?;
            self.n += 1;
            return Ok(());
        }
        self.k.write_at(1, self.next, k)?;
        self.v.write_at(1, self.next, v)?;
        self.next = (self.next + 1) % self.window;
        self.n = (self.n + 1).min(self.window);
        Ok(())
    }
}

/// What one mixer carries from a piece to the next (`None`s before the first piece).
#[derive(Clone, Debug, Default)]
pub struct MixerState {
    /// Attention and RAttention: the qkv projection of the tokens still within the window.
    pub kv_tail: Option<Tensor>,
    /// RAttention: `sum phi(k)^T v` over the keys before the tail (`mixers::rattention::carry`),
    /// or after a decoding step over the keys before the window (f32, f64 for f64 data).
    pub linear: Option<Tensor>,
    /// mLSTM and gated delta rule: the pre-convolution qkv of the last K - 1 tokens.
    pub conv_tail: Option<Tensor>,
    pub mlstm: Option<MlstmState>,
    /// Gated delta rule: its state.
    pub delta: Option<Tensor>,
    /// Attention and RAttention after their first decoding step: the cache that replaces
    /// `kv_tail`.
    pub kv: Option<KvCache>,
    /// How a one-token piece after the first piece is read.
    pub decode: Decode,
}

impl Mixer {
    /// `forward` over the piece x `[B, Tp, C]` whose first token sits at `pos`, carrying
    /// `state` from the previous piece to the next.
    pub fn forward_piece(
        &self,
        w: &Weights,
        x: &Tensor,
        window: usize,
        pos: usize,
        state: &mut MixerState,
    ) -> Result<Tensor> {
        let tape = w.tape();
        let step = x.dims()[1] == 1 && pos > 0 && state.decode == Decode::Steps;
        if step {
            match self {
                Mixer::Swa(m) if m.steps(x) => {
                    return m.step(w, x, window, pos, &mut state.kv, &mut state.kv_tail)
                }
                Mixer::Full(m) if m.steps(x) => {
                    return m.step(w, x, usize::MAX, pos, &mut state.kv, &mut state.kv_tail)
                }
                Mixer::Mlstm(m) if m.steps(x) => {
                    let (y, tail, s) =
                        m.step(w, x, state.conv_tail.as_ref(), state.mlstm.as_ref())?;
                    (state.conv_tail, state.mlstm) = (Some(tail), Some(s));
                    return Ok(y);
                }
                Mixer::GatedDelta(m) if m.steps(x) => {
                    let (y, tail, s) =
                        m.step(w, x, state.conv_tail.as_ref(), state.delta.as_ref())?;
                    (state.conv_tail, state.delta) = (Some(tail), Some(s));
                    return Ok(y);
                }
                Mixer::RAttention(m) if m.steps(x) => return m.step(w, x, window, pos, state),
                _ => {}
            }
        }
        if state.kv.is_some() {
            return Err(Error::Invalid {
                op: "Mixer::forward_piece",
                msg: "a piece of several tokens after decoding steps: attention holds a cache \
                      of keys, not the tail a piece joins (read the sequence in pieces, or \
                      with Decode::Recompute)"
                    .into(),
            });
        }
        // A state a step left in f32 (`decode::state_dtype`), as the chunkwise kernels take it
        // (only the fused forms step; the reference forms carry theirs in f32).
        let dtype = x.dtype();
        let cast = |t: &Tensor| t.to_dtype(dtype);
        match self {
            Mixer::GatedDelta(m) if m.steps(x) => {
                if let Some(s) = state.delta.as_mut() {
                    *s = cast(s)?;
                }
            }
            Mixer::Mlstm(m) if m.steps(x) => {
                if let Some(s) = state.mlstm.as_mut() {
                    *s = s.try_map(cast)?;
                }
            }
            _ => {}
        }
        let attend = |m: &Attention, window: usize, state: &mut MixerState| {
            let (y, joined) = m.forward_piece(w, x, window, pos, state.kv_tail.as_ref())?;
            let t = joined.dims()[1];
            let keep = tail_len(t, window);
            state.kv_tail = Some(tape.narrow(&joined, 1, t - keep, keep)?);
            Ok(y)
        };
        match self {
            Mixer::Swa(m) => attend(m, window, state),
            Mixer::Full(m) => attend(m, usize::MAX, state),
            Mixer::Mlstm(m) => {
                let (y, tail, s) =
                    m.forward_piece(w, x, state.conv_tail.as_ref(), state.mlstm.as_ref())?;
                (state.conv_tail, state.mlstm) = (Some(tail), Some(s));
                Ok(y)
            }
            Mixer::GatedDelta(m) => {
                let (y, tail, s) =
                    m.forward_piece(w, x, state.conv_tail.as_ref(), state.delta.as_ref())?;
                (state.conv_tail, state.delta) = (Some(tail), Some(s));
                Ok(y)
            }
            Mixer::RAttention(m) => m.forward_piece(w, x, window, pos, state),
        }
    }
}
