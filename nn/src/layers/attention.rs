//! The attention layer (sliding-window or full): q, k, v from one projection, RoPE on q and k,
//! grouped-query heads, the SWA mixer, the output projection.
use super::basic::{Linear, INIT_STD};
use super::{fused, in_f32, MixerDims};
use crate::mixers::attention::{fused as fused_swa, reference};
use crate::params::{Params, Weights};
use swax_tensor::backend::FusedKernel;
use swax_tensor::{Error, Result, Tensor};

#[derive(Clone, Debug)]
pub struct Attention {
    qkv: Linear,
    out: Linear,
    h: usize,
    hkv: usize,
    d: usize,
    rope_theta: f64,
}

impl Attention {
    pub fn new(p: &mut Params, name: &str, dims: MixerDims) -> Result<Attention> {
        let (h, hkv, d) = (dims.heads, dims.kv_heads, dims.head_dim());
        if hkv == 0 || h % hkv != 0 || h * d != dims.d_model {
            return Err(Error::Invalid {
                op: "Attention::new",
                msg: format!(
                    "heads {h} must be a multiple of kv_heads {hkv} and divide d_model {}",
                    dims.d_model
                ),
            });
        }
        let c = dims.d_model;
        Ok(Attention {
            qkv: Linear::new(p, &format!("{name}.qkv"), c, (h + 2 * hkv) * d, INIT_STD)?,
            out: Linear::new(p, &format!("{name}.out"), h * d, c, dims.out_std)?,
            h,
            hkv,
            d,
            rope_theta: dims.rope_theta,
        })
    }

    /// x `[B, T, C]`; each query sees `window` keys (itself included).
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
        let q = tape.rope(&part(0, h)?, 0, self.rope_theta)?;
        let k = tape.rope(&part(h, hkv)?, 0, self.rope_theta)?;
        let v = part(h + hkv, hkv)?;
        let o = if fused(&q, &[FusedKernel::Swa]) {
            fused_swa::swa(tape, &q, &k, &v, window, None)?
        } else {
            in_f32(w, [&q, &k, &v], |[q, k, v]| {
                reference::swa(tape, &q, &k, &v, window, None)
            })?
        };
        self.out.forward(w, &tape.reshape(&o, vec![b, t, h * d])?)
    }
}
