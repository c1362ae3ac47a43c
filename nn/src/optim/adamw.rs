//! AdamW (decoupled weight decay; none on norms, biases and gate constants) with gradient
//! clipping by global norm, on whichever device holds the parameters.
//!
//! A step is three launches on the GPU, whatever the number of parameters, and never waits for
//! the device: the global norm of every gradient in one f32 (two), then one multi-tensor AdamW
//! update that writes every parameter and both moments in place, scaling each gradient by the
//! clipping factor `min(1, max_norm / (norm + 1e-6))` it reads from that norm on the device.
//! The norm tensor is handed back, so the caller reads it (a sync, or a deferred read) only
//! when it logs.
use crate::params::Params;
use swax_tensor::backend::AdamWStep;
use swax_tensor::{AdamWParam, Error, Result, Tensor};

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

    /// One step at learning rate `lr` from `grads` (one f32 gradient per parameter, in order),
    /// writing the parameters and the moments in place: an error, changing nothing, when one of
    /// their buffers is shared with another tensor (a clone of the parameters, a view of a
    /// moment).
    pub fn step(&mut self, params: &mut Params, grads: &[Tensor], lr: f64) -> Result<StepStats> {
        if grads.len() != params.len() || self.m.len() != params.len() {
            return Err(Error::Invalid {
                op: "AdamW::step",
                msg: format!(
                    "{} gradients and {} moments for {} parameters",
                    grads.len(),
                    self.m.len(),
                    params.len()
                ),
            });
        }
        let grad_norm = global_norm(grads)?;
        let hp = AdamWStep {
            lr,
            beta1: self.cfg.beta1,
            beta2: self.cfg.beta2,
            eps: self.cfg.eps,
            weight_decay: self.cfg.weight_decay,
            step: self.step + 1,
        };
        let mut slots: Vec<AdamWParam> = params
            .iter_mut()
            .zip(grads)
            .zip(self.m.iter_mut().zip(self.v.iter_mut()))
            .map(|(((value, decay), grad), (m, v))| AdamWParam {
                param: value,
                grad,
                m,
                v,
                decay,
            })
            .collect();
        Tensor::adamw(&mut slots, &grad_norm, self.cfg.max_grad_norm, hp)?;
        self.step += 1;
        Ok(StepStats { grad_norm })
    }
}

/// `sqrt(sum of every gradient's squares)`, f32 `[1]` on the gradients' device.
pub fn global_norm(grads: &[Tensor]) -> Result<Tensor> {
    Tensor::global_norm(&grads.iter().collect::<Vec<_>>())
}
