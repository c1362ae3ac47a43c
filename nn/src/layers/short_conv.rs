//! The short causal depthwise convolution (K taps) and SiLU that the recurrent layers put on
//! their q, k, v projections. It gives a linear recurrence what attention gets from position:
//! a key that holds the tokens just before its own, so one layer can match "the token after the
//! last time I saw this one" (the shift of H3 and Zoology's BaseConv). Both the gated delta rule
//! (as Gated DeltaNet) and the mLSTM (as xLSTM's mLSTM block) use it.
//!
//! Evaluated in pieces, a piece needs the K - 1 pre-convolution inputs before it: `forward`
//! takes them (`tail`) and returns the next piece's.
use super::Forms;
use crate::params::{Init, ParamId, Params, Weights};
use swax_autograd::Tape;
use swax_tensor::{Result, Tensor};

/// Taps of the convolution.
pub const TAPS: usize = 4;

#[derive(Clone, Copy, Debug)]
pub struct ShortConv {
    pub weight: ParamId,
    forms: Forms,
}

impl ShortConv {
    /// A convolution over `channels`, its taps drawn as PyTorch's Conv1d draws them (std
    /// 1/sqrt(3K), the uniform bound 1/sqrt(K)'s), and kept out of weight decay; run as the
    /// fused kernel or, with [`Forms::Reference`], as shifted copies of its input.
    pub fn new(p: &mut Params, name: &str, channels: usize, forms: Forms) -> Result<ShortConv> {
        let weight = p.add(
            format!("{name}.weight"),
            vec![channels, TAPS],
            Init::Normal(1.0 / (3.0 * TAPS as f64).sqrt()),
        )?;
        p.set_decay(weight, false);
        Ok(ShortConv { weight, forms })
    }

    /// `silu(conv(x))` over the piece x `[B, Tp, C]`, after `tail` (the inputs of the tokens
    /// just before it; `None` at the start of a sequence). Returns the output and the next
    /// piece's tail.
    pub fn forward(
        &self,
        w: &Weights,
        x: &Tensor,
        tail: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let tape = w.tape();
        let t = x.dims()[1];
        let joined = match tail {
            Some(tail) => tape.concat(&[tail, x], 1)?,
            None => x.clone(),
        };
        let (n, lead) = (joined.dims()[1], joined.dims()[1] - t);
        let y = silu_conv(tape, &joined, w.get(self.weight), self.forms)?;
        let y = match lead {
            0 => y,
            _ => tape.narrow(&y, 1, lead, t)?,
        };
        let keep = n.min(TAPS - 1);
        Ok((y, tape.narrow(&joined, 1, n - keep, keep)?))
    }
}

impl ShortConv {
    /// The K - 1 inputs `[B, K - 1, width]` before a decoding step, from the `tail` a piece or a
    /// step left (shorter after a short prompt, none at the start): zeros where the sequence
    /// had no token, as the causal convolution reads them. x is the step's input, for its
    /// batch, dtype and device.
    pub fn full_tail(&self, tail: Option<&Tensor>, x: &Tensor, width: usize) -> Result<Tensor> {
        match tail {
            Some(t) => t.pad(1, (TAPS - 1).saturating_sub(t.dims()[1]), 0),
            None => Tensor::zeros(vec![x.dims()[0], TAPS - 1, width], x.dtype(), x.device()),
        }
    }
}

/// `silu(short_conv(x, w))` over x `[B, T, C]`: the fused kernel (every device has it), or
/// in the reference form the same sum written as K shifted copies of x
/// (`sum_j w[:, j] x[t - K + 1 + j]`).
fn silu_conv(tape: &Tape, x: &Tensor, w: &Tensor, forms: Forms) -> Result<Tensor> {
    if forms == Forms::Fused {
        return tape.short_conv_silu(x, w, None);
    }
    let (c, k) = (w.dims()[0], w.dims()[1]);
    let mut y: Option<Tensor> = None;
    for j in 0..k {
        let tap = tape.reshape(&tape.narrow(w, 1, j, 1)?, vec![c])?;
        let term = tape.mul(&tape.shift(x, 1, (k - 1 - j) as isize)?, &tap)?;
        y = Some(match y {
            Some(acc) => tape.add(&acc, &term)?,
            None => term,
        });
    }
    tape.silu(&y.expect("the kernel has taps"))
}
