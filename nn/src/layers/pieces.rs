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
use swax_tensor::{Result, Tensor};

/// What one mixer carries from a piece to the next (`None`s before the first piece).
#[derive(Clone, Debug, Default)]
pub struct MixerState {
    /// Attention and RAttention: the qkv projection of the tokens still within the window.
    pub kv_tail: Option<Tensor>,
    /// RAttention: `sum phi(k)^T v` over the keys before the tail (`mixers::rattention::carry`).
    pub linear: Option<Tensor>,
    /// mLSTM and gated delta rule: the pre-convolution qkv of the last K - 1 tokens.
    pub conv_tail: Option<Tensor>,
    pub mlstm: Option<MlstmState>,
    /// Gated delta rule: its state.
    pub delta: Option<Tensor>,
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
