//! AdamW (decoupled weight decay; none on norms, biases and gate constants) with gradient
//! clipping by global norm, on whichever device holds the parameters.
//!
//! The step never waits for the device: the global norm is summed into a one-element tensor,
//! the clipping factor `min(1, max_norm / (norm + 1e-6))` computed from it on the device, and the
//! fused AdamW op multiplies each gradient by that factor as it reads it. The norm tensor is
//! handed back, so the caller reads it (a sync) only when it logs.
use crate::params::Params;
use swax_tensor::backend::AdamWStep;
use swax_tensor::{DType, Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Clip the global gradient norm to this; None for no clipping.
    pub max_grad_norm: Option<f64>,
}

/// The moments of every parameter, in the order of `Params`.
#[derive(Clone, Debug)]
pub struct AdamW {
    pub cfg: AdamWConfig,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    /// Steps taken so far (the next is `step + 1`, for bias correction).
    pub step: u64,
}

/// What one step measured, still on the device.
#[derive(Debug)]
pub struct StepStats {
    /// The global gradient norm before clipping, f32 `[1]`.
    pub grad_norm: Tensor,
}

impl AdamW {
    pub fn new(params: &Params, cfg: AdamWConfig) -> Result<AdamW> {
        let zeros =
            || -> Result<Vec<Tensor>> { params.iter().map(|p| p.value.zeros_like()).collect() };
        Ok(AdamW {
            cfg,
            m: zeros()?,
            v: zeros()?,
            step: 0,
        })
    }

    /// One step at learning rate `lr` from `grads` (one f32 gradient per parameter, in order).
    pub fn step(&mut self, params: &mut Params, grads: &[Tensor], lr: f64) -> Result<StepStats> {
        if grads.len() != params.len() {
            return Err(Error::Invalid {
                op: "AdamW::step",
                msg: format!("{} gradients for {} parameters", grads.len(), params.len()),
            });
        }
        let grad_norm = global_norm(grads)?;
        let scale = match self.cfg.max_grad_norm {
            Some(max) => clip_factor(&grad_norm, max)?,
            None => grad_norm.ones_like()?,
        };
        self.step += 1;
        let updates: Vec<(Tensor, Tensor, Tensor)> = params
            .iter()
            .zip(grads)
            .zip(self.m.iter().zip(&self.v))
            .map(|((p, g), (m, v))| {
                let hp = AdamWStep {
                    lr,
                    beta1: self.cfg.beta1,
                    beta2: self.cfg.beta2,
                    eps: self.cfg.eps,
                    weight_decay: if p.decay { self.cfg.weight_decay } else { 0.0 },
                    step: self.step,
                };
                p.value.adamw(g, m, v, &scale, hp)
            })
            .collect::<Result<_>>()?;
        for (i, (p, m, v)) in updates.into_iter().enumerate() {
            params.set(i, p);
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(StepStats { grad_norm })
    }
}

/// `sqrt(sum of every gradient's squares)`, f32 `[1]` on the gradients' device.
pub fn global_norm(grads: &[Tensor]) -> Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for g in grads {
        let s = g.sum_squares()?;
        total = Some(match total {
            Some(t) => t.add(&s)?,
            None => s,
        });
    }
    match total {
        Some(t) => t.sqrt(),
        None => Err(Error::Invalid {
            op: "global_norm",
            msg: "no gradients".into(),
        }),
    }
}

/// `min(1, max_norm / (norm + 1e-6))`, on the device.
pub fn clip_factor(norm: &Tensor, max_norm: f64) -> Result<Tensor> {
    let max = Tensor::full(max_norm, vec![1], DType::F32, norm.device())?;
    max.div(&norm.add_scalar(1e-6)?)?.clamp(0.0, 1.0)
}
