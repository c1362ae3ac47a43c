//! The pre-norm residual block: `x + mixer(norm(x))`, then `x + mlp(norm(x))`, over a whole
//! sequence or over one piece of a longer one; and the same block recomputed in the backward
//! (activation checkpointing), for models whose activations do not fit.
use crate::layers::basic::{RmsNorm, SwiGlu};
use crate::layers::pieces::MixerState;
use crate::layers::{Mixer, MixerDims};
use crate::params::{Params, Weights};
use swax_tensor::{Result, Tensor};

#[derive(Clone, Debug)]
pub struct Block {
    pub mixer_norm: RmsNorm,
    pub mixer: Mixer,
    pub mlp_norm: RmsNorm,
    pub mlp: SwiGlu,
}

impl Block {
    /// A block whose mixer is pattern letter `kind`, with a SwiGLU of `hidden` units.
    pub fn new(
        p: &mut Params,
        name: &str,
        kind: char,
        dims: MixerDims,
        hidden: usize,
    ) -> Result<Block> {
        let c = dims.d_model;
        Ok(Block {
            mixer_norm: RmsNorm::new(p, &format!("{name}.mixer_norm"), c, dims.eps)?,
            mixer: Mixer::new(p, &format!("{name}.mixer"), kind, dims)?,
            mlp_norm: RmsNorm::new(p, &format!("{name}.mlp_norm"), c, dims.eps)?,
            mlp: SwiGlu::new(p, &format!("{name}.mlp"), c, hidden, dims.out_std)?,
        })
    }

    pub fn forward(&self, w: &Weights, x: &Tensor, window: usize) -> Result<Tensor> {
        let (skip, normed) = self.mixer_norm.forward_residual(w, x)?;
        let x = w
            .tape()
            .add(&skip, &self.mixer.forward(w, &normed, window)?)?;
        self.mlp.forward(w, &self.mlp_norm, &x)
    }

    /// `forward` as one node that keeps only `x` (and the weights, kept anyway): the block runs
    /// unrecorded, and again in the backward on a fresh tape that its gradient goes through.
    /// The gradients are those of `forward`, at the cost of a second forward of the block.
    pub fn forward_recomputed(&self, w: &Weights, x: &Tensor, window: usize) -> Result<Tensor> {
        let (block, dtype) = (self.clone(), w.dtype);
        let inputs: Vec<&Tensor> = std::iter::once(x).chain(w.values()).collect();
        w.tape().recompute("block", &inputs, move |tape, xs| {
            let w = Weights::bound(tape, xs[1..].to_vec(), dtype);
            block.forward(&w, &xs[0], window)
        })
    }

    /// `forward` over one piece of a longer sequence; see [`Mixer::forward_piece`].
    pub fn forward_piece(
        &self,
        w: &Weights,
        x: &Tensor,
        window: usize,
        pos: usize,
        state: &mut MixerState,
    ) -> Result<Tensor> {
        let (skip, normed) = self.mixer_norm.forward_residual(w, x)?;
        let mixed = self.mixer.forward_piece(w, &normed, window, pos, state)?;
        let x = w.tape().add(&skip, &mixed)?;
        self.mlp.forward(w, &self.mlp_norm, &x)
    }
}
