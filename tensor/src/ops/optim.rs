//! The optimizer's ops, each one backend call over many tensors at once, so the optimizer runs
//! the same on the CPU and on the GPU (where it never waits for the device and launches once,
//! not once per parameter): the AdamW step in place, the global norm, and accumulation in
//! place. Writing in place needs the written tensors' buffers unshared (`Tensor::storage_mut`):
//! a clone or view of one still alive is an error, never a silent change to the other.
use crate::backend::{AdamWSlot, AdamWStep, Backend};
use crate::{DType, Error, Result, Storage, Tensor};

/// One parameter for [`Tensor::adamw`]: `param`, `m` and `v` are written in place, `grad` read;
/// all f32 of one shape. `decay` says whether weight decay applies to it.
pub struct AdamWParam<'a> {
    pub param: &'a mut Tensor,
    pub grad: &'a Tensor,
    pub m: &'a mut Tensor,
    pub v: &'a mut Tensor,
    pub decay: bool,
}

fn check_f32(op: &'static str, x: &Tensor) -> Result<()> {
    match x.dtype() {
        DType::F32 => Ok(()),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

impl Tensor {
    /// One AdamW step over every parameter of `params`, in place. With `max_norm`, every
    /// gradient is first multiplied by `min(1, max_norm / (grad_norm + 1e-6))`, `grad_norm` an
    /// f32 `[1]` (from [`Tensor::global_norm`]) read where it lies.
    pub fn adamw(
        params: &mut [AdamWParam<'_>],
        grad_norm: &Tensor,
        max_norm: Option<f64>,
        hp: AdamWStep,
    ) -> Result<()> {
        const OP: &str = "adamw";
        if hp.step == 0 {
            return Err(Error::Invalid {
                op: OP,
                msg: "steps count from 1".into(),
            });
        }
        check_f32(OP, grad_norm)?;
        if grad_norm.numel() != 1 {
            return Err(Error::Invalid {
                op: OP,
                msg: format!("the gradient norm is {}, not one value", grad_norm.shape()),
            });
        }
        if let Some(max) = max_norm.filter(|m| m.is_nan() || *m <= 0.0) {
            return Err(Error::Invalid {
                op: OP,
                msg: format!("the norm to clip to must be positive, got {max}"),
            });
        }
        for p in params.iter() {
            for x in [&*p.param, p.grad, &*p.m, &*p.v] {
                check_f32(OP, x)?;
                p.param.same_shape(OP, x)?;
            }
        }
        let mut slots = params
            .iter_mut()
            .map(|p| {
                Ok(AdamWSlot {
                    param: p.param.storage_mut(OP)?,
                    grad: p.grad.storage(),
                    m: p.m.storage_mut(OP)?,
                    v: p.v.storage_mut(OP)?,
                    decay: p.decay,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let clip = max_norm.map(|max| (grad_norm.storage(), max));
        Storage::adamw(&mut slots, clip, hp)
    }

    /// `sqrt(sum of the squares of every element of every x)` as an f32 `[1]` on their device:
    /// the global gradient norm. Every x f32.
    pub fn global_norm(xs: &[&Tensor]) -> Result<Tensor> {
        for x in xs {
            check_f32("global_norm", x)?;
        }
        let storages: Vec<&Storage> = xs.iter().map(|x| x.storage()).collect();
        let norm = Storage::global_norm(&storages)?;
        Tensor::from_storage(norm, vec![1])
    }

    /// `acc[i] += xs[i]` in place for every pair (f32, equal shapes): gradient accumulation.
    pub fn add_in_place(acc: &mut [&mut Tensor], xs: &[&Tensor]) -> Result<()> {
        const OP: &str = "add_in_place";
        if acc.len() != xs.len() {
            return Err(Error::Invalid {
                op: OP,
                msg: format!("{} accumulators for {} addends", acc.len(), xs.len()),
            });
        }
        for (a, x) in acc.iter().zip(xs) {
            check_f32(OP, a)?;
            check_f32(OP, x)?;
            a.same_shape(OP, x)?;
        }
        let mut storages = acc
            .iter_mut()
            .map(|a| a.storage_mut(OP))
            .collect::<Result<Vec<_>>>()?;
        let xs: Vec<&Storage> = xs.iter().map(|x| x.storage()).collect();
        Storage::add_into(&mut storages, &xs)
    }
}
