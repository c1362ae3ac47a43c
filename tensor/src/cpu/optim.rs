//! The optimizer's kernels: the AdamW step and the sum of squares behind global-norm clipping.
//! The same arithmetic as `cuda/kernels/optim.cu` (f32, bias corrections computed in f64), so a
//! CPU and a GPU step differ only by rounding order. Both are deterministic: elementwise work is
//! split freely, and the sum adds fixed-size chunks in a fixed order.
use super::{Real, PAR_MIN};
use crate::backend::AdamWStep;
use rayon::prelude::*;

/// Returns the new (p, m, v); the gradient is read as `grad * grad_scale`.
pub fn adamw(
    p: &[f32],
    grad: &[f32],
    m: &[f32],
    v: &[f32],
    grad_scale: f32,
    hp: AdamWStep,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let exp = i32::try_from(hp.step).unwrap_or(i32::MAX);
    let bc1 = (1.0 - hp.beta1.powi(exp)) as f32;
    let bc2 = (1.0 - hp.beta2.powi(exp)) as f32;
    let (lr, b1, b2) = (hp.lr as f32, hp.beta1 as f32, hp.beta2 as f32);
    let (eps, wd) = (hp.eps as f32, hp.weight_decay as f32);
    let (mut p2, mut m2, mut v2) = (p.to_vec(), m.to_vec(), v.to_vec());
    let step = |(((p, m), v), &g): (((&mut f32, &mut f32), &mut f32), &f32)| {
        let g = g * grad_scale;
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        *p = *p * (1.0 - lr * wd) - lr * (*m / bc1) / ((*v / bc2).sqrt() + eps);
    };
    if p.len() < PAR_MIN {
        p2.iter_mut()
            .zip(m2.iter_mut())
            .zip(v2.iter_mut())
            .zip(grad)
            .for_each(step);
    } else {
        p2.par_iter_mut()
            .zip(m2.par_iter_mut())
            .zip(v2.par_iter_mut())
            .zip(grad.par_iter())
            .for_each(step);
    }
    (p2, m2, v2)
}

/// `sum(x^2)` in f64: chunk partial sums, added in chunk order.
pub fn sum_squares<T: Real>(x: &[T]) -> f64 {
    let partials: Vec<f64> = x
        .par_chunks(PAR_MIN)
        .map(|c| {
            c.iter()
                .map(|&v| {
                    let v = v.to_f64().unwrap_or(f64::NAN);
                    v * v
                })
                .sum()
        })
        .collect();
    partials.iter().sum()
}
