//! Layers: the plain ones (`basic`), the four sequence-mixer layers around the mixers of
//! `crate::mixers` with the gates and output norms of the recurrent ones (`gates`, `output_norm`),
//! [`Mixer`], the one of them a block holds, and the output projection fused with the loss
//! (`linear_cross_entropy`), which never holds all the logits.
//!
//! A mixer layer calls the fused mixer (one tape node) when the device has that kernel (the
//! mixer's own `has_kernel`, which asks its CUDA wrapper's check) and the reference form
//! otherwise. The reference runs in f32 whatever the activations' dtype: it is the slow, exact
//! fallback, and its exponentials and running sums need f32's range. [`Forms::Reference`]
//! (`model.mixers = "reference"`) runs the reference forms on every device: the spec a fused
//! model is checked against, in its gradients and in what it learns.
pub mod attention;
pub mod basic;
pub mod gated_delta;
pub mod gates;
pub mod linear_cross_entropy;
pub mod mlstm;
pub mod output_norm;
pub mod pieces;
pub mod rattention;
pub mod short_conv;

use crate::params::{Params, Weights};
use swax_autograd::Tape;
use swax_tensor::{DType, Result, Tensor};

/// The sizes every mixer layer is built from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MixerDims {
    /// C, the residual stream's width.
    pub d_model: usize,
    /// H: query heads (and the recurrent mixers' heads); head dim C / H.
    pub heads: usize,
    /// Hkv: key/value heads of the attention layers (H a multiple of it).
    pub kv_heads: usize,
    pub rope_theta: f64,
    /// Time steps per chunk of the chunkwise kernels.
    pub chunk: usize,
    /// Initial std of the output projections (scaled down with depth).
    pub out_std: f64,
    pub eps: f64,
    /// Which form of each mixer (and of the short convolution) the layers run.
    pub forms: Forms,
}

/// The form the mixer layers run: the fused kernels where the device has them, or the
/// reference forms (from primitive tape ops, in f32) everywhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Forms {
    #[default]
    Fused,
    Reference,
}

impl Forms {
    /// Whether a layer runs its fused kernel, given whether the device has one for its sizes.
    pub fn fused(self, has_kernel: bool) -> bool {
        self == Forms::Fused && has_kernel
    }

    /// Whether a layer of heads of `head_dim` decodes activations like x by its single-step
    /// kernels: the fused forms and such a kernel on x's device for x's dtype.
    pub fn steps(self, x: &Tensor, head_dim: usize) -> bool {
        self.fused(crate::mixers::decode::has_kernel(
            x.device(),
            x.dtype(),
            head_dim,
        ))
    }
}

impl MixerDims {
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }
}

/// Runs the reference `f` on f32 copies of `xs` and casts its result back to their dtype.
pub(crate) fn in_f32<const N: usize>(
    w: &Weights,
    xs: [&Tensor; N],
    f: impl FnOnce([Tensor; N]) -> Result<Tensor>,
) -> Result<Tensor> {
    let dtype = xs[0].dtype();
    let up = xs.map(|x| cast(w, x, DType::F32));
    let up: [Tensor; N] = up
        .into_iter()
        .collect::<Result<Vec<_>>>()?
        .try_into()
        .expect("N tensors");
    cast(w, &f(up)?, dtype)
}

/// A fused projection `[B, T, Σ heads·d]` cut into `[B, T, heads, d]` per `(heads, d)` of
/// `parts` (q, k, v), by one split whose backward writes the parts' gradients into one tensor.
fn split_heads<const N: usize>(
    tape: &Tape,
    fused: &Tensor,
    parts: [(usize, usize); N],
) -> Result<[Tensor; N]> {
    let (b, t) = (fused.dims()[0], fused.dims()[1]);
    let widths = parts.map(|(heads, d)| heads * d);
    let cut = tape.split(fused, -1, &widths)?;
    let mut out = Vec::with_capacity(N);
    for (x, (heads, d)) in cut.iter().zip(parts) {
        out.push(tape.reshape(x, vec![b, t, heads, d])?);
    }
    Ok(out.try_into().expect("N parts"))
}

fn cast(w: &Weights, x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        Ok(x.clone())
    } else {
        w.tape().to_dtype(x, dtype)
    }
}

/// A block's sequence mixer.
#[derive(Clone, Debug)]
pub enum Mixer {
    /// Sliding-window attention: the trainer's window of the batch.
    Swa(attention::Attention),
    /// Full causal attention.
    Full(attention::Attention),
    Mlstm(mlstm::Mlstm),
    GatedDelta(gated_delta::GatedDelta),
    RAttention(rattention::RAttention),
}

impl Mixer {
    /// The mixer of pattern letter `kind` (S, F, M, G, R), its parameters named under `name`.
    pub fn new(p: &mut Params, name: &str, kind: char, dims: MixerDims) -> Result<Mixer> {
        Ok(match kind {
            'S' => Mixer::Swa(attention::Attention::new(p, name, dims)?),
            'F' => Mixer::Full(attention::Attention::new(p, name, dims)?),
            'M' => Mixer::Mlstm(mlstm::Mlstm::new(p, name, dims)?),
            'G' => Mixer::GatedDelta(gated_delta::GatedDelta::new(p, name, dims)?),
            'R' => Mixer::RAttention(rattention::RAttention::new(p, name, dims)?),
            other => {
                return Err(swax_tensor::Error::Invalid {
                    op: "Mixer::new",
                    msg: format!("unknown mixer {other:?}: expected one of S, F, M, G, R"),
                })
            }
        })
    }

    /// `[B, T, C] -> [B, T, C]`; `window` is the attention window of this batch (S and R).
    pub fn forward(&self, w: &Weights, x: &Tensor, window: usize) -> Result<Tensor> {
        let t = x.dims()[1];
        match self {
            Mixer::Swa(m) => m.forward(w, x, window.min(t)),
            Mixer::Full(m) => m.forward(w, x, t),
            Mixer::Mlstm(m) => m.forward(w, x),
            Mixer::GatedDelta(m) => m.forward(w, x),
            Mixer::RAttention(m) => m.forward(w, x, window.min(t)),
        }
    }
}
