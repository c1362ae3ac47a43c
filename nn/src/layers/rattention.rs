//! The RAttention layer: q, k, v from one projection (grouped-query heads), the RAttention
//! mixer (sliding-window attention with RoPE plus the residual linear attention over older
//! keys, each branch RMS-normalized, summed), the out projection.
use super::basic::{Linear, INIT_STD};
use super::{fused, in_f32, MixerDims};
use crate::mixers::rattention::{fused as fused_ra, reference, Config, Rope};
use crate::params::{Init, ParamId, Params, Weights};
use swax_tensor::backend::FusedKernel;
use swax_tensor::{Error, Result, Tensor};

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
        })
    }

    pub fn forward(&self, w: &Weights, x: &Tensor, window: usize) -> Result<Tensor> {
        let tape = w.tape;
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (h, hkv, d) = (self.h, self.hkv, self.d);
        let qkv = self.qkv.forward(w, x)?;
        let part = |start: usize, heads: usize| {
            tape.reshape(
                &tape.narrow(&qkv, -1, start * d, heads * d)?,
                vec![b, t, heads, d],
            )
        };
        let (q, k, v) = (part(0, h)?, part(h, hkv)?, part(h + hkv, hkv)?);
        let cfg = Config {
            window,
            scale: None,
            rope: Some(Rope {
                offset: 0,
                theta: self.rope_theta,
            }),
            eps: self.eps,
            chunk: self.chunk,
        };
        let (ns, nr) = (w.get(self.norm_swa), w.get(self.norm_rla));
        let o = if fused(&q, &[FusedKernel::Swa, FusedKernel::Rla]) {
            fused_ra::rattention(tape, &q, &k, &v, ns, nr, &cfg)?
        } else {
            in_f32(w, [&q, &k, &v, ns, nr], |[q, k, v, ns, nr]| {
                reference::rattention(tape, &q, &k, &v, &ns, &nr, &cfg)
            })?
        };
        self.out.forward(w, &tape.reshape(&o, vec![b, t, h * d])?)
    }
}
