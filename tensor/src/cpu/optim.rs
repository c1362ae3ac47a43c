//! The optimizer's kernels, the reference of `cuda/kernels/optim.cu`: the AdamW step over many
//! parameters in place, the global norm of many tensors, and gradient accumulation in place.
//! The same arithmetic as the CUDA kernels (f32, bias corrections computed in f64), so a CPU and
//! a GPU step differ only by rounding order. All deterministic: elementwise work is split
//! freely, and the norm adds fixed-size chunks in a fixed order.
use super::PAR_MIN;
use crate::backend::AdamWStep;
use rayon::prelude::*;

/// One parameter's values for [`adamw`]: p, m and v are updated in place.
pub struct Slot<'a> {
    pub p: &'a mut [f32],
    pub g: &'a [f32],
    pub m: &'a mut [f32],
    pub v: &'a mut [f32],
    pub decay: bool,
}

/// `min(1, max_norm / (norm + 1e-6))` in f32: the factor that clips gradients to a global norm
/// of `max_norm`.
#[allow(clippy::manual_clamp)]
pub fn clip_factor(norm: f32, max_norm: f32) -> f32 {
    // max then min, not clamp: a NaN norm gives 0 as the tensor ops' clamp and the CUDA
    // kernel's fmaxf/fminf do.
    (max_norm / (norm + 1e-6)).max(0.0).min(1.0)
}

/// One AdamW step over every slot; each gradient is read as `g * grad_scale`.
pub fn adamw(slots: &mut [Slot<'_>], grad_scale: f32, hp: AdamWStep) {
    let (bc1, bc2) = hp.bias_corrections();
    let (lr, b1, b2) = (hp.lr as f32, hp.beta1 as f32, hp.beta2 as f32);
    let eps = hp.eps as f32;
    for s in slots {
        let wd = if s.decay { hp.weight_decay as f32 } else { 0.0 };
        let step = |(((p, m), v), &g): (((&mut f32, &mut f32), &mut f32), &f32)| {
            let g = g * grad_scale;
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *p = *p * (1.0 - lr * wd) - lr * (*m / bc1) / ((*v / bc2).sqrt() + eps);
        };
        if s.p.len() < PAR_MIN {
            s.p.iter_mut()
                .zip(s.m.iter_mut())
                .zip(s.v.iter_mut())
                .zip(s.g)
                .for_each(step);
        } else {
            s.p.par_iter_mut()
                .zip(s.m.par_iter_mut())
                .zip(s.v.par_iter_mut())
                .zip(s.g.par_iter())
                .for_each(step);
        }
    }
}

/// `sqrt(sum of every x's squares)`: f64 partial sums of fixed chunks, added in order, the
/// square root taken in f64.
pub fn global_norm(xs: &[&[f32]]) -> f64 {
    let sum: f64 = xs
        .iter()
        .flat_map(|x| {
            x.par_chunks(PAR_MIN)
                .map(|c| c.iter().map(|&v| v as f64 * v as f64).sum::<f64>())
                .collect::<Vec<f64>>()
        })
        .sum();
    sum.sqrt()
}

/// `acc += x`.
pub fn add_into(acc: &mut [f32], x: &[f32]) {
    if acc.len() < PAR_MIN {
        acc.iter_mut().zip(x).for_each(|(a, &x)| *a += x);
    } else {
        acc.par_iter_mut()
            .zip(x.par_iter())
            .for_each(|(a, &x)| *a += x);
    }
}
