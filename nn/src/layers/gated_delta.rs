//! The Gated DeltaNet layer: q, k, v from one projection through a causal depthwise short
//! convolution (kernel 4) and SiLU; beta = sigmoid(x W_b); the log-decay
//! `-exp(A) softplus(x W_a + dt_bias)`; the chunkwise gated delta rule (q, k L2-normalized
//! inside it); an RMSNorm gated by swish(x W_g); the out projection.
use super::basic::{Linear, INIT_STD};
use super::gates::log_decay;
use super::output_norm::gated_rms_norm;
use super::short_conv::ShortConv;
use super::{cast, split_heads, Forms, MixerDims};
use crate::mixers::decode::{self, ConvStep, GatedDeltaStep};
use crate::mixers::gated_delta;
use crate::params::{Init, ParamId, Params, Weights};
use swax_tensor::{DType, Result, Tensor};

#[derive(Clone, Debug)]
pub struct GatedDelta {
    qkv: Linear,
    conv: ShortConv,
    beta: Linear,
    decay: Linear,
    a_log: ParamId,
    dt_bias: ParamId,
    gate: Linear,
    norm: ParamId,
    out: Linear,
    h: usize,
    d: usize,
    chunk: usize,
    eps: f64,
    forms: Forms,
}

impl GatedDelta {
    pub fn new(p: &mut Params, name: &str, dims: MixerDims) -> Result<GatedDelta> {
        let (c, h, d) = (dims.d_model, dims.heads, dims.head_dim());
        let width = 3 * h * d;
        let conv = ShortConv::new(p, &format!("{name}.conv"), width, dims.forms)?;
        // Gated DeltaNet's init: A uniform over [1, 16] (here evenly over the heads) and
        // dt = softplus(dt_bias) log-spaced over [1e-3, 1e-1].
        let per_head = |f: &dyn Fn(f64) -> f64| -> Result<Tensor> {
            let v: Vec<f64> = (0..h)
                .map(|j| f(j as f64 / (h.max(2) - 1) as f64))
                .collect();
            Tensor::from_f64s(&v, vec![h], DType::F32, p.device())
        };
        let a_log = per_head(&|u| (1.0 + 15.0 * u).ln())?;
        let dt_bias = per_head(&|u| {
            let dt: f64 = (1e-3f64.ln() + u * (1e-1f64.ln() - 1e-3f64.ln())).exp();
            dt + (-(-dt).exp_m1()).ln() // softplus^-1(dt) = dt + log(1 - exp(-dt))
        })?;
        Ok(GatedDelta {
            qkv: Linear::new(p, &format!("{name}.qkv"), c, width, INIT_STD)?,
            conv,
            beta: Linear::new(p, &format!("{name}.beta"), c, h, INIT_STD)?,
            decay: Linear::new(p, &format!("{name}.decay"), c, h, INIT_STD)?,
            a_log: p.push(format!("{name}.a_log"), a_log, false)?,
            dt_bias: p.push(format!("{name}.dt_bias"), dt_bias, false)?,
            gate: Linear::new(p, &format!("{name}.gate"), c, h * d, INIT_STD)?,
            norm: p.add(format!("{name}.norm.weight"), vec![d], Init::Const(1.0))?,
            out: Linear::new(p, &format!("{name}.out"), h * d, c, dims.out_std)?,
            h,
            d,
            chunk: dims.chunk,
            eps: dims.eps,
            forms: dims.forms,
        })
    }

    /// x `[B, T, C]`: a whole sequence is one piece, from a zero state.
    pub fn forward(&self, w: &Weights, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_piece(w, x, None, None)?.0)
    }
}

impl GatedDelta {
    /// One piece x `[B, Tp, C]` of a longer sequence: `conv_tail` is the pre-convolution qkv of
    /// the tokens just before x (the last K - 1 count), `state` the delta rule's state after them
    /// (`None` for both: the sequence starts here). Returns the output, the next piece's
    /// `conv_tail` and the state after x.
    pub fn forward_piece(
        &self,
        w: &Weights,
        x: &Tensor,
        conv_tail: Option<&Tensor>,
        state: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let tape = w.tape();
        let (h, d) = (self.h, self.d);
        let (qkv, tail) = self.conv.forward(w, &self.qkv.forward(w, x)?, conv_tail)?;
        let [q, k, v] = split_heads(tape, &qkv, [(h, d); 3])?;
        let (beta, g) = self.gates(w, x)?;
        let kernel = gated_delta::has_kernel(q.device(), q.dtype(), d, d);
        let (o, state) = if self.forms.fused(kernel) {
            gated_delta::chunkwise(tape, &q, &k, &v, &beta, &g, state, self.chunk)?
        } else {
            // The reference in f32 (`in_f32`'s policy), its state carried in f32.
            let up = |x: &Tensor| cast(w, x, DType::F32);
            let (q32, k32, v32) = (up(&q)?, up(&k)?, up(&v)?);
            let (o, s) =
                gated_delta::recurrent(tape, &q32, &k32, &v32, &up(&beta)?, &up(&g)?, state)?;
            (cast(w, &o, q.dtype())?, s)
        };
        Ok((self.finish(w, x, &o)?, tail, state))
    }

    /// The write strength beta = sigmoid(W x) and the log decay g of each head, from x.
    fn gates(&self, w: &Weights, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let tape = w.tape();
        let beta = tape.sigmoid(&self.beta.forward(w, x)?)?;
        let g = log_decay(
            tape,
            &self.decay.forward(w, x)?,
            w.get(self.a_log),
            w.get(self.dt_bias),
        )?;
        Ok((beta, g))
    }

    /// The gated RMSNorm and the out projection of the mixer's output o `[B, T, H, D]`.
    fn finish(&self, w: &Weights, x: &Tensor, o: &Tensor) -> Result<Tensor> {
        let tape = w.tape();
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (h, d) = (self.h, self.d);
        let gate = tape.reshape(&self.gate.forward(w, x)?, vec![b, t, h, d])?;
        let y = gated_rms_norm(tape, o, &gate, w.get(self.norm), self.eps)?;
        self.out.forward(w, &tape.reshape(&y, vec![b, t, h * d])?)
    }

    /// Whether `step` runs for activations x: the fused forms and the decoding kernel there.
    pub fn steps(&self, x: &Tensor) -> bool {
        self.forms.steps(x, self.d)
    }

    /// One decoding step x `[B, 1, C]` by the single-step kernel (`mixers::decode`), from the
    /// convolution's tail and the state a piece or a step left (`None`: the sequence starts
    /// here). Returns the output, the next tail and the next state (f32 for bf16 data).
    pub fn step(
        &self,
        w: &Weights,
        x: &Tensor,
        conv_tail: Option<&Tensor>,
        state: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let b = x.dims()[0];
        let (h, d) = (self.h, self.d);
        let qkv = self.qkv.forward(w, x)?;
        let width = qkv.dims()[2];
        let (beta, g) = self.gates(w, x)?;
        let sd = decode::state_dtype(x.dtype());
        let state = match state {
            Some(s) => s.to_dtype(sd)?,
            None => Tensor::zeros(vec![b, h, d, d], sd, x.device())?,
        };
        let y = decode::gated_delta_step(&GatedDeltaStep {
            conv: ConvStep {
                x: &qkv.reshape(vec![b, width])?,
                weight: w.get(self.conv.weight),
                tail: &self.conv.full_tail(conv_tail, x, width)?,
            },
            beta: &beta.reshape(vec![b, h])?,
            g: &g.to_dtype(x.dtype())?.reshape(vec![b, h])?,
            state: &state,
        })?;
        let o = y.out.reshape(vec![b, 1, h, d])?;
        Ok((self.finish(w, x, &o)?, y.tail, y.state))
    }
}
