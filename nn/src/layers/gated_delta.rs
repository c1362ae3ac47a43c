//! The Gated DeltaNet layer: q, k, v from one projection through a causal depthwise short
//! convolution (kernel 4) and SiLU; beta = sigmoid(x W_b); the log-decay
//! `-exp(A) softplus(x W_a + dt_bias)`; the chunkwise gated delta rule (q, k L2-normalized
//! inside it); an RMSNorm gated by swish(x W_g); the out projection.
use super::basic::{Linear, INIT_STD};
use super::{cast, fused, MixerDims};
use crate::mixers::gated_delta;
use crate::params::{Init, ParamId, Params, Weights};
use swax_autograd::Tape;
use swax_tensor::backend::FusedKernel;
use swax_tensor::{DType, Result, Tensor};

/// Taps of the short convolution.
const CONV: usize = 4;

#[derive(Clone, Debug)]
pub struct GatedDelta {
    qkv: Linear,
    conv: ParamId,
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
}

impl GatedDelta {
    pub fn new(p: &mut Params, name: &str, dims: MixerDims) -> Result<GatedDelta> {
        let (c, h, d) = (dims.d_model, dims.heads, dims.head_dim());
        let width = 3 * h * d;
        let conv = p.add(
            format!("{name}.conv.weight"),
            vec![width, CONV],
            Init::Normal(1.0 / (3.0 * CONV as f64).sqrt()),
        )?;
        p.set_decay(conv, false);
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
        })
    }

    /// x `[B, T, C]`: a whole sequence is one piece, from a zero state.
    pub fn forward(&self, w: &Weights, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_chunk(w, x, None, None)?.0)
    }
}

/// `silu(short_conv(x, w))` over x `[B, T, C]`: the fused kernel where the device has it, else
/// the same sum written as K shifted copies of x (`sum_j w[:, j] x[t - K + 1 + j]`).
fn short_conv_silu(tape: &Tape, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if fused(x, &[FusedKernel::ShortConv]) {
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

impl GatedDelta {
    /// One piece x `[B, Tc, C]` of a longer sequence: `conv_tail` is the pre-convolution qkv of
    /// the tokens just before x (the last K - 1 count), `state` the delta rule's state after them
    /// (`None` for both: the sequence starts here). Returns the output, the next piece's
    /// `conv_tail` and the state after x.
    pub fn forward_chunk(
        &self,
        w: &Weights,
        x: &Tensor,
        conv_tail: Option<&Tensor>,
        state: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let tape = w.tape;
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (h, d) = (self.h, self.d);
        let raw = self.qkv.forward(w, x)?;
        let joined = match conv_tail {
            Some(tail) => tape.concat(&[tail, &raw], 1)?,
            None => raw,
        };
        let lead = joined.dims()[1] - t;
        let qkv = short_conv_silu(tape, &joined, w.get(self.conv))?;
        let qkv = match lead {
            0 => qkv,
            _ => tape.narrow(&qkv, 1, lead, t)?,
        };
        let part =
            |i: usize| tape.reshape(&tape.narrow(&qkv, -1, i * h * d, h * d)?, vec![b, t, h, d]);
        let (q, k, v) = (part(0)?, part(1)?, part(2)?);
        let beta = tape.sigmoid(&self.beta.forward(w, x)?)?;
        let g = tape.log_decay(
            &self.decay.forward(w, x)?,
            w.get(self.a_log),
            w.get(self.dt_bias),
        )?;
        let (o, state) = if fused(&q, &[FusedKernel::GatedDelta]) {
            gated_delta::chunkwise(tape, &q, &k, &v, &beta, &g, state, self.chunk)?
        } else {
            // The reference in f32 (`in_f32`'s policy), its state carried in f32.
            let up = |x: &Tensor| cast(w, x, DType::F32);
            let (q32, k32, v32) = (up(&q)?, up(&k)?, up(&v)?);
            let (o, s) =
                gated_delta::recurrent(tape, &q32, &k32, &v32, &up(&beta)?, &up(&g)?, state)?;
            (cast(w, &o, q.dtype())?, s)
        };
        let gate = tape.reshape(&self.gate.forward(w, x)?, vec![b, t, h, d])?;
        let y = tape.gated_rms_norm(&o, &gate, w.get(self.norm), self.eps)?;
        let y = self.out.forward(w, &tape.reshape(&y, vec![b, t, h * d])?)?;
        let keep = joined.dims()[1].min(CONV - 1);
        let tail = tape.narrow(&joined, 1, joined.dims()[1] - keep, keep)?;
        Ok((y, tail, state))
    }
}
