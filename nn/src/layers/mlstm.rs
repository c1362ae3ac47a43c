//! The mLSTM layer: q, k (head dim C / 2H) and v (C / H) from one projection through the short
//! causal convolution and SiLU (`short_conv`); the input and forget gate preactivations per head
//! from x (with biases), soft-capped at 15; the chunkwise mLSTM; a per-head LayerNorm; a sigmoid
//! output gate from x; the out projection.
//!
//! It is xLSTM-7B's layer with two changes that make it learn in-context retrieval (measured with
//! the learning benchmark, `bench`): the convolution of xLSTM's original mLSTM block, without
//! which a key cannot hold the token before it and one layer cannot copy; and that block's input
//! gate bias of 0 instead of xLSTM-7B's -10, which at initialization scales the memory's read-out
//! by exp(-10), below the head norm's epsilon, so the layer's gradient starts a thousand times
//! weaker than the paths around it.
use super::basic::{Linear, INIT_STD};
use super::gates::soft_cap;
use super::output_norm::{gated_head_layer_norm, head_layer_norm};
use super::short_conv::ShortConv;
use super::{cast, split_heads, Forms, MixerDims};
use crate::mixers::decode::{self, ConvStep, MlstmStep};
use crate::mixers::mlstm;
use crate::params::{ParamId, Params, Weights};
use swax_tensor::{DType, Error, Result, Tensor};

/// xLSTM-7B caps its gate preactivations at 15.
const GATE_CAP: f64 = 15.0;

/// The input gates' initial bias.
pub const INPUT_GATE_BIAS: f64 = 0.0;

#[derive(Clone, Debug)]
pub struct Mlstm {
    qkv: Linear,
    conv: ShortConv,
    /// `[C, 2H]`: input then forget gate preactivations.
    gates: Linear,
    gate_bias: ParamId,
    ogate: Linear,
    norm: ParamId,
    out: Linear,
    h: usize,
    dk: usize,
    dv: usize,
    chunk: usize,
    eps: f64,
    forms: Forms,
}

impl Mlstm {
    pub fn new(p: &mut Params, name: &str, dims: MixerDims) -> Result<Mlstm> {
        let (c, h) = (dims.d_model, dims.heads);
        let dv = dims.head_dim();
        if !dv.is_multiple_of(2) || h * dv != c {
            return Err(Error::Invalid {
                op: "Mlstm::new",
                msg: format!("heads {h} must divide d_model {c} into an even head dim"),
            });
        }
        let dk = dv / 2;
        // Input gate bias 0 (see above); forget gate biases spread over 3..6, as in both xLSTM
        // layers, so heads start with memories of different lengths.
        let bias: Vec<f64> = (0..2 * h)
            .map(|j| match j < h {
                true => INPUT_GATE_BIAS,
                false => 3.0 + 3.0 * (j - h) as f64 / (h.max(2) - 1) as f64,
            })
            .collect();
        let bias = Tensor::from_f64s(&bias, vec![2 * h], DType::F32, p.device())?;
        let width = h * (2 * dk + dv);
        Ok(Mlstm {
            qkv: Linear::new(p, &format!("{name}.qkv"), c, width, INIT_STD)?,
            conv: ShortConv::new(p, &format!("{name}.conv"), width, dims.forms)?,
            gates: Linear::new(p, &format!("{name}.gates"), c, 2 * h, INIT_STD)?,
            gate_bias: p.push(format!("{name}.gates.bias"), bias, false)?,
            ogate: Linear::new(p, &format!("{name}.ogate"), c, h * dv, INIT_STD)?,
            norm: p.add(
                format!("{name}.norm.weight"),
                vec![h, dv],
                crate::params::Init::Const(1.0),
            )?,
            out: Linear::new(p, &format!("{name}.out"), h * dv, c, dims.out_std)?,
            h,
            dk,
            dv,
            chunk: dims.chunk,
            eps: dims.eps,
            forms: dims.forms,
        })
    }

    /// x `[B, T, C]`: a whole sequence is one piece, from a zero state.
    pub fn forward(&self, w: &Weights, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_piece(w, x, None, None)?.0)
    }

    /// One piece x `[B, Tp, C]` of a longer sequence: `conv_tail` is the pre-convolution qkv of
    /// the tokens just before it, `state` the mLSTM's state after them (`None` for both: the
    /// sequence starts here). Returns the output, the next piece's `conv_tail` and the state.
    pub fn forward_piece(
        &self,
        w: &Weights,
        x: &Tensor,
        conv_tail: Option<&Tensor>,
        state: Option<&mlstm::MlstmState>,
    ) -> Result<(Tensor, Tensor, mlstm::MlstmState)> {
        let tape = w.tape();
        let (h, dk, dv) = (self.h, self.dk, self.dv);
        let (qkv, tail) = self.conv.forward(w, &self.qkv.forward(w, x)?, conv_tail)?;
        let [q, k, v] = split_heads(tape, &qkv, [(h, dk), (h, dk), (h, dv)])?;
        let [i, f]: [Tensor; 2] = tape
            .split(&self.gate_preactivations(w, x)?, -1, &[h, h])?
            .try_into()
            .expect("two parts");
        let kernel = mlstm::has_kernel(q.device(), q.dtype(), dk, dv);
        let (hs, state) = if self.forms.fused(kernel) {
            mlstm::chunkwise(tape, &q, &k, &v, &i, &f, state, self.chunk, mlstm::EPS)?
        } else {
            // The reference in f32 (`in_f32`'s policy), its state carried in f32.
            let up = |x: &Tensor| cast(w, x, DType::F32);
            let (q32, k32, v32) = (up(&q)?, up(&k)?, up(&v)?);
            let (hs, s) = mlstm::parallel(
                tape,
                &q32,
                &k32,
                &v32,
                &up(&i)?,
                &up(&f)?,
                state,
                mlstm::EPS,
            )?;
            (cast(w, &hs, q.dtype())?, s)
        };
        let y = self.finish(w, x, &hs)?;
        Ok((y, tail, state))
    }

    /// The gated head norm and the out projection of the mixer's output hs `[B, T, H, Dv]`.
    fn finish(&self, w: &Weights, x: &Tensor, hs: &Tensor) -> Result<Tensor> {
        let tape = w.tape();
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (h, dv) = (self.h, self.dv);
        let o = tape.reshape(&self.ogate.forward(w, x)?, vec![b, t, h, dv])?;
        let gated = match self.forms {
            Forms::Fused => gated_head_layer_norm(tape, hs, &o, w.get(self.norm), self.eps)?,
            // The same norm and gate from primitive ops: the fused node is checked with the rest.
            Forms::Reference => {
                let normed = head_layer_norm(tape, hs, w.get(self.norm), None, self.eps)?;
                tape.mul(&normed, &tape.sigmoid(&o)?)?
            }
        };
        self.out
            .forward(w, &tape.reshape(&gated, vec![b, t, h * dv])?)
    }

    /// The input then forget gate preactivations `[.., 2H]` of x, biased and soft-capped.
    fn gate_preactivations(&self, w: &Weights, x: &Tensor) -> Result<Tensor> {
        let tape = w.tape();
        let gates = tape.add(&self.gates.forward(w, x)?, w.get(self.gate_bias))?;
        soft_cap(tape, &gates, GATE_CAP)
    }

    /// Whether `step` runs for activations x: the fused forms and the decoding kernel there.
    pub fn steps(&self, x: &Tensor) -> bool {
        self.forms.steps(x, self.dk.max(self.dv))
    }

    /// One decoding step x `[B, 1, C]` by the single-step kernel (`mixers::decode`), from the
    /// convolution's tail and the state a piece or a step left (`None`: the sequence starts
    /// here). Returns the output, the next tail and the next state (f32 for bf16 data).
    pub fn step(
        &self,
        w: &Weights,
        x: &Tensor,
        conv_tail: Option<&Tensor>,
        state: Option<&mlstm::MlstmState>,
    ) -> Result<(Tensor, Tensor, mlstm::MlstmState)> {
        let b = x.dims()[0];
        let (h, dk, dv) = (self.h, self.dk, self.dv);
        let qkv = self.qkv.forward(w, x)?;
        let width = qkv.dims()[2];
        let gates = self.gate_preactivations(w, x)?.reshape(vec![b, 2 * h])?;
        let sd = decode::state_dtype(x.dtype());
        let state = match state {
            Some(s) => s.try_map(|t| t.to_dtype(sd))?,
            None => mlstm::MlstmState::zeros(b, h, dk, dv, sd, x.device())?,
        };
        let y = decode::mlstm_step(
            &MlstmStep {
                conv: ConvStep {
                    x: &qkv.reshape(vec![b, width])?,
                    weight: w.get(self.conv.weight),
                    tail: &self.conv.full_tail(conv_tail, x, width)?,
                },
                i: &gates.narrow(1, 0, h)?,
                f: &gates.narrow(1, h, h)?,
                state: state.try_map(Ok)?,
            },
            mlstm::EPS,
        )?;
        let hs = y.out.reshape(vec![b, 1, h, dv])?;
        Ok((self.finish(w, x, &hs)?, y.tail, y.state))
    }
}
