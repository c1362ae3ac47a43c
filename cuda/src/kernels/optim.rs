//! The optimizer's multi-tensor kernels (`kernels/optim.cu`): the AdamW step over every
//! parameter in one launch, the global norm of many tensors in two, and gradient accumulation
//! over many tensors in one. Each call uploads one table describing its tensors (one host-to-
//! device copy) and launches over the chunks of all of them.

use super::{check_device, check_dtype, check_len, launch, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "optim",
    source: &[include_str!("../../kernels/optim.cu")],
};

/// Elements of a chunk (`MT_CHUNK` in optim.cu): a multiple of 4, so chunks start on float4s.
const CHUNK: u64 = 4096;
/// Threads of a block walking chunks, and of the one-block finish.
const BLOCK: u32 = 256;
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

impl AdamWStep {
    /// `(1 - beta1^step, 1 - beta2^step)`, in f64 and then rounded, as both devices use them.
    pub fn bias_corrections(&self) -> (f32, f32) {
        let exp = i32::try_from(self.step).unwrap_or(i32::MAX);
        (
            (1.0 - self.beta1.powi(exp)) as f32,
            (1.0 - self.beta2.powi(exp)) as f32,
        )
    }
}

/// One parameter's buffers for [`adamw`], all f32 of one length; `decay` says whether
/// `weight_decay` applies to it.
#[derive(Debug)]
pub struct AdamWBuffers<'a> {
    pub param: &'a mut Buffer,
    pub grad: &'a Buffer,
    pub m: &'a mut Buffer,
    pub v: &'a mut Buffer,
    pub decay: bool,
}

/// One tensor of a call as the kernels read it (optim.cu's `TensorEntry`, 56 bytes, less the
/// first chunk, which `upload` numbers).
#[derive(Clone, Copy, Default)]
struct Entry {
    p: u64,
    g: u64,
    m: u64,
    v: u64,
    n: u64,
    decay: u32,
}

/// The table of `entries` (empty tensors left out) on the device, and the number of chunks.
fn upload(dev: &CudaDevice, entries: &[Entry]) -> Result<(Buffer, u32, u64), CudaError> {
    let mut words = Vec::with_capacity(entries.len() * 14);
    let mut chunks = 0u64;
    let mut count = 0u32;
    for e in entries.iter().filter(|e| e.n > 0) {
        let first_chunk = chunks;
        chunks += e.n.div_ceil(CHUNK);
        count += 1;
        for w in [e.p, e.g, e.m, e.v, e.n, first_chunk] {
            words.extend([w as u32, (w >> 32) as u32]);
        }
        words.extend([e.decay, 0]);
    }
    Ok((dev.htod(&words)?, count, chunks))
}

/// Blocks of BLOCK threads walking `chunks` chunks: enough to fill the GPU, one chunk each at
/// most. A function of the chunk count and the device alone, so sums over them are the same on
/// every run.
fn chunk_launch(dev: &CudaDevice, chunks: u64) -> Launch {
    let cap = dev.sm_count().max(1) as u64 * 8;
    Launch {
        grid: (chunks.clamp(1, cap) as u32, 1, 1),
        block: (BLOCK, 1, 1),
        shared: 0,
    }
}

/// Checks that `b` is an f32 buffer of `n` elements on `dev`.
fn check_f32(
    op: &'static str,
    dev: &CudaDevice,
    name: &str,
    b: &Buffer,
    n: usize,
) -> Result<(), CudaError> {
    check_device(op, dev, &[b])?;
    check_dtype(op, name, b, DType::F32)?;
    check_len(op, name, b, n)
}

/// One AdamW step in place over every parameter of `params`, in one launch, `hp.step`
/// counting from 1: `g' = g * s`, `m = b1 m + (1 - b1) g'`, `v = b2 v + (1 - b2) g'^2`,
/// `p = p (1 - lr wd) - lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)`, with `wd`
/// 0 where a parameter does not decay. With `clip = Some((norm, max_norm))`, `s` is
/// `min(1, max_norm / (norm + 1e-6))` read from the f32 [1] `norm` on the device (e.g. from
/// [`global_norm`]); else 1.
pub fn adamw(
    dev: &CudaDevice,
    hp: AdamWStep,
    params: &mut [AdamWBuffers<'_>],
    clip: Option<(&Buffer, f32)>,
) -> Result<(), CudaError> {
    const OP: &str = "adamw";
    if hp.step == 0 {
        return Err(CudaError::invalid(OP, "steps count from 1"));
    }
    if let Some((norm, max_norm)) = clip {
        check_f32(OP, dev, "norm", norm, 1)?;
        if max_norm.is_nan() || max_norm <= 0.0 {
            return Err(CudaError::invalid(
                OP,
                format!("the norm to clip to must be positive, got {max_norm}"),
            ));
        }
    }
    let mut entries = Vec::with_capacity(params.len());
    for (i, b) in params.iter().enumerate() {
        let n = b.param.len();
        check_f32(OP, dev, &format!("param {i}"), b.param, n)?;
        for (name, x) in [("grad", b.grad), ("m", &*b.m), ("v", &*b.v)] {
            check_f32(OP, dev, &format!("{name} {i}"), x, n)?;
        }
        entries.push(Entry {
            p: b.param.device_ptr(),
            g: b.grad.device_ptr(),
            m: b.m.device_ptr(),
            v: b.v.device_ptr(),
            n: n as u64,
            decay: u32::from(b.decay),
        });
    }
    let (table, count, chunks) = upload(dev, &entries)?;
    if chunks == 0 {
        return Ok(());
    }
    let (bc1, bc2) = hp.bias_corrections();
    let [lr, beta1, beta2, eps, wd] =
        [hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay].map(|v| v as f32);
    let (norm, max_norm) = clip.map_or((0, 0.0f32), |(b, m)| (b.device_ptr(), m));
    // SAFETY: mt_adamw(const TensorEntry* t, u32 count, u64 chunks, float lr, float b1,
    // float b2, float eps, float wd, float bc1, float bc2, const float* norm, float max_norm);
    // the table holds `count` entries whose buffers (checked above, borrowed for this call)
    // hold n f32 each, their chunks numbered 0..chunks; norm is null or one f32.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "mt_adamw",
            chunk_launch(dev, chunks),
            &[
                &table, &count, &chunks, &lr, &beta1, &beta2, &eps, &wd, &bc1, &bc2, &norm,
                &max_norm,
            ],
        )
    }
}

/// `out[0] = sqrt(sum over every x of x^2)`, f32 with a deterministic two-stage reduction, in
/// two launches. Each `x` f32; `out` f32 [1].
pub fn global_norm(dev: &CudaDevice, xs: &[&Buffer], out: &mut Buffer) -> Result<(), CudaError> {
    const OP: &str = "global_norm";
    check_f32(OP, dev, "out", out, 1)?;
    let mut entries = Vec::with_capacity(xs.len());
    for (i, x) in xs.iter().enumerate() {
        check_f32(OP, dev, &format!("x {i}"), x, x.len())?;
        entries.push(Entry {
            g: x.device_ptr(),
            n: x.len() as u64,
            ..Entry::default()
        });
    }
    let (table, count, chunks) = upload(dev, &entries)?;
    let cfg = chunk_launch(dev, chunks);
    let blocks = if chunks > 0 { cfg.grid.0 } else { 0 };
    let partial = dev.alloc(DType::F32, blocks.max(1) as usize)?;
    if chunks > 0 {
        // SAFETY: mt_sumsq_partial(const TensorEntry* t, u32 count, u64 chunks, float*
        // partial); the entries' g buffers hold n f32 each; partial one f32 per block.
        unsafe {
            launch(
                dev,
                &SOURCE,
                "mt_sumsq_partial",
                cfg,
                &[&table, &count, &chunks, &partial],
            )?
        };
    }
    let one = Launch {
        grid: (1, 1, 1),
        block: (FINISH_BLOCK, 1, 1),
        shared: 0,
    };
    // SAFETY: norm_finish(const float* partial, u32 count, float* out); partial holds
    // `blocks`, out one.
    unsafe { launch(dev, &SOURCE, "norm_finish", one, &[&partial, &blocks, out]) }
}

/// `acc[i] += xs[i]` for every pair, in place, in one launch: f32 buffers of equal lengths.
pub fn add_into(
    dev: &CudaDevice,
    acc: &mut [&mut Buffer],
    xs: &[&Buffer],
) -> Result<(), CudaError> {
    const OP: &str = "add_into";
    if acc.len() != xs.len() {
        return Err(CudaError::invalid(
            OP,
            format!("{} accumulators for {} addends", acc.len(), xs.len()),
        ));
    }
    let mut entries = Vec::with_capacity(xs.len());
    for (i, (a, x)) in acc.iter().zip(xs).enumerate() {
        check_f32(OP, dev, &format!("acc {i}"), a, a.len())?;
        check_f32(OP, dev, &format!("x {i}"), x, a.len())?;
        entries.push(Entry {
            p: a.device_ptr(),
            g: x.device_ptr(),
            n: a.len() as u64,
            ..Entry::default()
        });
    }
    let (table, count, chunks) = upload(dev, &entries)?;
    if chunks == 0 {
        return Ok(());
    }
    // SAFETY: mt_add(const TensorEntry* t, u32 count, u64 chunks); each entry's p (written,
    // borrowed mutably for this call) and g hold n f32.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "mt_add",
            chunk_launch(dev, chunks),
            &[&table, &count, &chunks],
        )
    }
}
