//! The AdamW step and global-norm gradient clipping, all on the device (`kernels/optim.cu`).

use super::{
    check_device, check_dtype, check_len, check_like, float_kernel, launch, ptr_or_null, Launch,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, DType, Device};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "optim",
    source: &[include_str!("../../kernels/optim.cu")],
};

/// Threads of the one-block kernels.
const FINISH_BLOCK: u32 = 1024;

/// The hyperparameters of one AdamW step (decoupled weight decay, Loshchilov & Hutter):
/// `p <- p (1 - lr wd) - lr m^ / (sqrt(v^) + eps)` with bias-corrected moments; `step` counts
/// from 1. f64 for the CPU's f64 arithmetic; the kernel takes them as f32.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub step: u64,
}

/// One AdamW step in place, `hp.step` counting from 1 (for bias correction):
/// `g' = g * scale`, `m = b1 m + (1 - b1) g'`, `v = b2 v + (1 - b2) g'^2`,
/// `p = p (1 - lr wd) - lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)`.
/// All f32 of one length; `grad_scale` (f32 [1] on the device, e.g. from [`clip_scale`])
/// multiplies the gradient, 1 when `None`.
pub fn adamw_step(
    dev: &Device,
    hp: AdamWStep,
    params: &mut Buffer,
    grads: &Buffer,
    m: &mut Buffer,
    v: &mut Buffer,
    grad_scale: Option<&Buffer>,
) -> Result<(), CudaError> {
    const OP: &str = "adamw_step";
    check_device(OP, dev, &[params, grads, m, v])?;
    check_dtype(OP, "params", params, DType::F32)?;
    for (name, b) in [("grads", grads), ("m", &*m), ("v", &*v)] {
        check_like(OP, name, b, params)?;
    }
    if let Some(s) = grad_scale {
        check_device(OP, dev, &[s])?;
        check_dtype(OP, "grad_scale", s, DType::F32)?;
        check_len(OP, "grad_scale", s, 1)?;
    }
    if hp.step == 0 {
        return Err(CudaError::invalid(OP, "steps count from 1"));
    }
    if params.is_empty() {
        return Ok(());
    }
    let exp = i32::try_from(hp.step).unwrap_or(i32::MAX);
    let bc1 = (1.0 - hp.beta1.powi(exp)) as f32;
    let bc2 = (1.0 - hp.beta2.powi(exp)) as f32;
    let [lr, beta1, beta2, eps, wd] =
        [hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay].map(|v| v as f32);
    let n = params.len() as u64;
    let scale = ptr_or_null(grad_scale);
    // SAFETY: adamw(float* p, const float* g, float* m, float* v, u64 n, float lr, float b1,
    // float b2, float eps, float wd, float bc1, float bc2, const float* gscale); the four
    // buffers hold n f32, gscale (or null) one.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "adamw",
            Launch::elementwise(dev, n.div_ceil(4)),
            &[
                params, grads, m, v, &n, &lr, &beta1, &beta2, &eps, &wd, &bc1, &bc2, &scale,
            ],
        )
    }
}

/// `out[0] = sum(x^2)` (or `out[0] += sum(x^2)` with `accumulate`, to sum over many
/// gradients), in f32 with a deterministic two-stage reduction. `x` f32 or bf16; `out` f32 [1].
pub fn sum_squares(
    dev: &Device,
    x: &Buffer,
    out: &mut Buffer,
    accumulate: bool,
) -> Result<(), CudaError> {
    const OP: &str = "sum_squares";
    check_device(OP, dev, &[x, out])?;
    check_dtype(OP, "out", out, DType::F32)?;
    check_len(OP, "out", out, 1)?;
    let name = float_kernel!(OP, "sumsq_partial", x.dtype())?;
    let n = x.len() as u64;
    let cfg = Launch::elementwise(dev, n);
    let blocks = cfg.grid.0;
    let partial = dev.alloc(DType::F32, blocks as usize)?;
    if n > 0 {
        // SAFETY: sumsq_partial_T(const T* x, u64 n, float* partial); x holds n, partial one
        // per block of the grid.
        unsafe { launch(dev, &SOURCE, name, cfg, &[x, &n, &partial])? };
    }
    let count = if n > 0 { blocks } else { 0 };
    let acc = i32::from(accumulate);
    let one = Launch {
        grid: (1, 1, 1),
        block: (FINISH_BLOCK, 1, 1),
        shared: 0,
    };
    // SAFETY: sumsq_finish(const float* partial, u32 count, float* out, int accumulate);
    // partial holds count, out one.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "sumsq_finish",
            one,
            &[&partial, &count, out, &acc],
        )
    }
}

/// `scale[0] = min(1, max_norm / (sqrt(sumsq[0]) + 1e-6))`: the factor that clips gradients
/// to a global norm of `max_norm`, for [`adamw_step`]'s `grad_scale`. Both f32 [1].
pub fn clip_scale(
    dev: &Device,
    sumsq: &Buffer,
    max_norm: f32,
    scale: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "clip_scale";
    check_device(OP, dev, &[sumsq, scale])?;
    for (name, b) in [("sumsq", sumsq), ("scale", &*scale)] {
        check_dtype(OP, name, b, DType::F32)?;
        check_len(OP, name, b, 1)?;
    }
    let one = Launch {
        grid: (1, 1, 1),
        block: (1, 1, 1),
        shared: 0,
    };
    // SAFETY: clip_scale(const float* sumsq, float max_norm, float* scale); one f32 each.
    unsafe { launch(dev, &SOURCE, "clip_scale", one, &[sumsq, &max_norm, scale]) }
}
