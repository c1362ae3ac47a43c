//! A hybrid language model from a layer pattern: token embedding, blocks whose mixers follow the
//! pattern repeated to the depth ("SM" alternates sliding-window attention and mLSTM), a final
//! RMSNorm and an untied output projection.
use crate::config::{Mixers, ModelConfig};
use swax_data::IGNORE;
use swax_nn::layers::basic::{Embedding, Linear, RmsNorm, INIT_STD};
use swax_nn::layers::linear_cross_entropy::linear_cross_entropy;
use swax_nn::layers::pieces::{Decode, MixerState};
use swax_nn::layers::{Forms, MixerDims};
use swax_nn::{Block, Params, Weights};
use swax_tensor::{DType, Device, Error, Result, Tensor};

#[derive(Clone, Debug)]
pub struct Model {
    pub params: Params,
    pub kinds: Vec<char>,
    embed: Embedding,
    blocks: Vec<Block>,
    /// Per block: whether its forward is recomputed in the backward (`model.recompute`).
    recompute: Vec<bool>,
    norm: RmsNorm,
    head: Linear,
    /// Rows of logits the loss computes at a time.
    loss_rows: usize,
}

/// The mixer letter of each layer: `pattern` repeated (and cut) to `n_layers`.
pub fn layer_kinds(pattern: &str, n_layers: usize) -> Vec<char> {
    pattern.chars().cycle().take(n_layers).collect()
}

impl Model {
    /// A freshly initialized model on `device`, its weights a function of `seed`.
    pub fn new(cfg: &ModelConfig, seed: u64, device: Device) -> Result<Model> {
        let mut p = Params::new(seed, device);
        let dims = MixerDims {
            d_model: cfg.d_model,
            heads: cfg.n_heads,
            kv_heads: cfg.n_kv_heads,
            rope_theta: cfg.rope_theta,
            chunk: cfg.chunk,
            // GPT-2's depth scaling of the projections into the residual stream.
            out_std: INIT_STD / (2.0 * cfg.n_layers as f64).sqrt(),
            eps: cfg.norm_eps,
            forms: match cfg.mixers {
                Mixers::Fused => Forms::Fused,
                Mixers::Reference => Forms::Reference,
            },
        };
        let kinds = layer_kinds(&cfg.pattern, cfg.n_layers);
        let recompute = cfg.recompute_layers().map_err(|e| Error::Invalid {
            op: "Model::new",
            msg: e.to_string(),
        })?;
        let embed = Embedding::new(&mut p, "embed", cfg.vocab_size, cfg.d_model)?;
        let blocks = kinds
            .iter()
            .enumerate()
            .map(|(i, &kind)| Block::new(&mut p, &format!("blocks.{i}"), kind, dims, cfg.d_ff))
            .collect::<Result<_>>()?;
        let norm = RmsNorm::new(&mut p, "norm", cfg.d_model, cfg.norm_eps)?;
        let head = Linear::new(&mut p, "head", cfg.d_model, cfg.vocab_size, INIT_STD)?;
        Ok(Model {
            params: p,
            kinds,
            embed,
            blocks,
            recompute,
            norm,
            head,
            loss_rows: cfg.loss_rows,
        })
    }

    /// Logits `[B, T, V]` for U32 ids `[B, T]`, the attention layers using `window`.
    pub fn logits(&self, w: &Weights, ids: &Tensor, window: usize) -> Result<Tensor> {
        self.project(w, &self.hidden(w, ids, window)?)
    }

    /// The final normalized hidden states `[B, T, D]`, before the output projection.
    fn hidden(&self, w: &Weights, ids: &Tensor, window: usize) -> Result<Tensor> {
        let mut x = self.embed.forward(w, ids)?;
        for (block, &again) in self.blocks.iter().zip(&self.recompute) {
            x = match again {
                true => block.forward_recomputed(w, &x, window)?,
                false => block.forward(w, &x, window)?,
            };
        }
        self.norm.forward(w, &x)
    }

    /// The mean next-token cross-entropy (an f32 scalar) of `inputs` against `targets`, over the
    /// targets that are not [`IGNORE`]. The output projection and the loss run together,
    /// `loss_rows` rows at a time ([`linear_cross_entropy`]): the `[B, T, V]` logits are never
    /// held.
    pub fn loss(
        &self,
        w: &Weights,
        inputs: &Tensor,
        targets: &Tensor,
        window: usize,
    ) -> Result<Tensor> {
        let x = self.hidden(w, inputs, window)?;
        let rows = x.numel() / self.head.d_in;
        let tape = w.tape();
        let x = tape.reshape(&x, vec![rows, self.head.d_in])?;
        let targets = tape.reshape(targets, vec![rows])?;
        let loss = linear_cross_entropy(
            tape,
            &x,
            w.get(self.head.w),
            &targets,
            Some(IGNORE),
            self.loss_rows,
        )?;
        match loss.dtype() {
            DType::F32 => Ok(loss),
            _ => tape.to_dtype(&loss, DType::F32),
        }
    }
}

/// Where a model is in a sequence read in pieces (evaluation, generation): the position reached
/// and each layer's [`MixerState`] (see `swax_nn::layers::pieces`).
#[derive(Clone, Debug, Default)]
pub struct SequenceState {
    pub pos: usize,
    pub layers: Vec<MixerState>,
    /// How each layer reads a one-token piece after the first piece.
    pub decode: Decode,
}

impl Model {
    /// Logits `[B, Tp, V]` for the next piece `[B, Tp]` of a sequence, continuing from `state`
    /// (start from `SequenceState::default()`). Pieces in order give the logits of one pass over
    /// the whole sequence, while memory holds only a piece, the windows and the states.
    pub fn forward_piece(
        &self,
        w: &Weights,
        ids: &Tensor,
        window: usize,
        state: &mut SequenceState,
    ) -> Result<Tensor> {
        let x = self.hidden_piece(w, ids, window, state)?;
        self.project(w, &x)
    }

    /// The final normalized hidden states `[B, Tp, D]` of [`Model::forward_piece`], before the
    /// output projection: generation projects only the last position, which at a vocabulary of
    /// 50k is a third of a small model's work per token that the other positions would waste.
    pub fn hidden_piece(
        &self,
        w: &Weights,
        ids: &Tensor,
        window: usize,
        state: &mut SequenceState,
    ) -> Result<Tensor> {
        let decode = state.decode;
        state.layers.resize_with(self.blocks.len(), || MixerState {
            decode,
            ..MixerState::default()
        });
        let mut x = self.embed.forward(w, ids)?;
        for (block, layer) in self.blocks.iter().zip(&mut state.layers) {
            x = block.forward_piece(w, &x, window, state.pos, layer)?;
        }
        state.pos += ids.dims()[1];
        self.norm.forward(w, &x)
    }

    /// Logits `[B, Tp, V]` of hidden states from [`Model::hidden_piece`].
    pub fn project(&self, w: &Weights, hidden: &Tensor) -> Result<Tensor> {
        self.head.forward(w, hidden)
    }
}
