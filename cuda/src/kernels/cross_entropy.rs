//! Cross-entropy of logits against u32 targets with ignore_index: the mean over counted rows,
//! forward and backward, and the summed loss with its gradient in one pass
//! (`kernels/cross_entropy.cu`).

use super::{
    check_device, check_dtype, check_len, check_like, float_kernel, launch, ptr_or_null,
    row_kernel, rows_of, to_u32, vector_rows, Launch, ROW_BLOCK,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "cross_entropy",
    source: &[include_str!("../../kernels/cross_entropy.cu")],
};

/// Threads of the single block that averages the losses.
const MEAN_BLOCK: u32 = 1024;
/// Threads of `cross_entropy_summed`'s blocks, one row each (common.cuh's ROW_BLOCK).
pub const SUMMED_THREADS: u32 = ROW_BLOCK;
/// Bytes of the kernels' per-chunk log-sum-exp state (`Lse`: f32 max, f32 sum).
const LSE_BYTES: usize = 8;

/// What the forward writes and the backward reads back.
#[derive(Debug)]
pub struct CrossEntropySaved {
    /// f32 [rows]: lse - logits[target], 0 on ignored rows.
    pub loss: Buffer,
    /// f32 [rows]: logsumexp of each row of logits.
    pub lse: Buffer,
    /// f32 [2]: the mean loss over non-ignored rows (0 if none), and their count.
    pub stats: Buffer,
}

/// Mean cross-entropy of `logits` ([rows, vocab], f32 or bf16) against `targets` (u32
/// [rows]); rows whose target is `ignore_index` count for nothing. Returns the per-row losses,
/// row logsumexps and [mean, count] on the device; read `stats` for the loss value. A target
/// not below vocab that is not `ignore_index` gets a NaN loss and raises a flag reported by
/// `CudaDevice::take_kernel_errors`.
pub fn cross_entropy(
    dev: &CudaDevice,
    logits: &Buffer,
    vocab: usize,
    targets: &Buffer,
    ignore_index: u32,
) -> Result<CrossEntropySaved, CudaError> {
    const OP: &str = "cross_entropy";
    check_device(OP, dev, &[logits, targets])?;
    check_dtype(OP, "targets", targets, DType::U32)?;
    let rows = rows_of(OP, logits, vocab)?;
    check_len(OP, "targets", targets, rows as usize)?;
    let vocab = to_u32(OP, "vocab", vocab)?;
    let vec = vector_rows(vocab, logits.dtype(), &[logits.device_ptr()]);
    let name = row_kernel!(OP, "ce_fwd", logits.dtype(), vec)?;
    let finish = float_kernel!(OP, "ce_finish", logits.dtype())?;
    let saved = CrossEntropySaved {
        loss: dev.alloc(DType::F32, rows as usize)?,
        lse: dev.alloc(DType::F32, rows as usize)?,
        stats: dev.alloc(DType::F32, 2)?,
    };
    let err = dev.error_word()?;
    if rows > 0 {
        let (cfg, chunk) = Launch::row_chunks(rows, vocab, logits.dtype());
        let chunks = cfg.grid.1;
        let part = dev.alloc(DType::U8, LSE_BYTES * rows as usize * chunks as usize)?;
        // SAFETY: ce_fwd_T(const T* logits, Lse* part, u32 rows, u32 vocab, u32 chunk), grid
        // (row blocks, chunks); logits hold rows * vocab, part rows * chunks states; the
        // vectorised instantiation only where vector_rows holds (chunk is a multiple of 8).
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                cfg,
                &[logits, &part, &rows, &vocab, &chunk],
            )?;
        }
        // SAFETY: ce_finish_T(const T* logits, const u32* targets, const Lse* part, u32 chunks,
        // float* loss, float* lse_out, u32 rows, u32 vocab, u32 ignore, u32* err); logits hold
        // rows * vocab, part rows * chunks states, the others rows; targets >= vocab are never
        // dereferenced; err is the device's error word. `part` is dropped after queuing: later
        // users of its memory are queued behind this kernel on the same stream.
        unsafe {
            launch(
                dev,
                &SOURCE,
                finish,
                Launch::elementwise(dev, rows as u64),
                &[
                    logits,
                    targets,
                    &part,
                    &chunks,
                    &saved.loss,
                    &saved.lse,
                    &rows,
                    &vocab,
                    &ignore_index,
                    &err,
                ],
            )?;
        }
    }
    counted_sum(
        dev,
        "ce_mean",
        &saved.loss,
        targets,
        &saved.stats,
        rows,
        ignore_index,
    )?;
    Ok(saved)
}

/// Backward of [`cross_entropy`], given the `lse` and `stats` it saved: `dlogits = (softmax(logits) - onehot(target)) * dloss /
/// count` per row, zero on ignored rows, where `dloss` (f32 [1], on the device) is the
/// gradient of the mean loss. `dlogits` is like `logits`.
pub fn cross_entropy_backward(
    dev: &CudaDevice,
    logits: &Buffer,
    vocab: usize,
    targets: &Buffer,
    ignore_index: u32,
    lse: &Buffer,
    stats: &Buffer,
    dloss: &Buffer,
    dlogits: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "cross_entropy_backward";
    check_device(OP, dev, &[logits, targets, lse, stats, dloss, dlogits])?;
    check_like(OP, "dlogits", dlogits, logits)?;
    check_dtype(OP, "targets", targets, DType::U32)?;
    check_dtype(OP, "dloss", dloss, DType::F32)?;
    check_len(OP, "dloss", dloss, 1)?;
    let rows = rows_of(OP, logits, vocab)?;
    check_len(OP, "targets", targets, rows as usize)?;
    check_len(OP, "lse", lse, rows as usize)?;
    check_len(OP, "stats", stats, 2)?;
    let vocab = to_u32(OP, "vocab", vocab)?;
    let vec = vector_rows(
        vocab,
        logits.dtype(),
        &[logits.device_ptr(), dlogits.device_ptr()],
    );
    let name = row_kernel!(OP, "ce_bwd", logits.dtype(), vec)?;
    if rows == 0 {
        return Ok(());
    }
    let (cfg, chunk) = Launch::row_chunks(rows, vocab, logits.dtype());
    // SAFETY: ce_bwd_T(const T* logits, const u32* targets, const float* lse,
    // const float* stats, const float* dloss, T* dlogits, u32 rows, u32 vocab, u32 ignore,
    // u32 chunk), grid (row blocks, chunks); logits and dlogits hold rows * vocab, targets and
    // lse rows, stats 2, dloss 1; the vectorised instantiation only where vector_rows holds
    // (chunk is a multiple of 8).
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                logits,
                targets,
                lse,
                stats,
                dloss,
                dlogits,
                &rows,
                &vocab,
                &ignore_index,
                &chunk,
            ],
        )
    }
}

/// The summed cross-entropy of `logits` ([rows, vocab], f32 or bf16) against `targets` (u32
/// [rows]) and its gradient, reading the logits from memory once: `totals` (f32 [2], on the
/// device) gets the rows' summed loss and the number of rows counted added to it, and `dlogits`
/// (like `logits`), where given, is set to softmax - onehot(target) on counted rows and zero on
/// rows whose target is `ignore_index`. A target not below vocab that is not `ignore_index`
/// makes the sum NaN and raises the flag `CudaDevice::take_kernel_errors` reports.
pub fn cross_entropy_summed(
    dev: &CudaDevice,
    logits: &Buffer,
    vocab: usize,
    targets: &Buffer,
    ignore_index: u32,
    totals: &mut Buffer,
    dlogits: Option<&mut Buffer>,
) -> Result<(), CudaError> {
    const OP: &str = "cross_entropy_summed";
    check_device(OP, dev, &[logits, targets, totals])?;
    check_dtype(OP, "targets", targets, DType::U32)?;
    check_dtype(OP, "totals", totals, DType::F32)?;
    check_len(OP, "totals", totals, 2)?;
    let rows = rows_of(OP, logits, vocab)?;
    check_len(OP, "targets", targets, rows as usize)?;
    if let Some(d) = &dlogits {
        check_device(OP, dev, &[d])?;
        check_like(OP, "dlogits", d, logits)?;
    }
    let dlogits = dlogits.map(|d| &*d);
    let vocab = to_u32(OP, "vocab", vocab)?;
    let vec = vector_rows(
        vocab,
        logits.dtype(),
        &[logits.device_ptr(), ptr_or_null(dlogits)],
    );
    let name = row_kernel!(OP, "ce_summed", logits.dtype(), vec)?;
    if rows == 0 {
        return Ok(());
    }
    let loss = dev.alloc(DType::F32, rows as usize)?;
    let err = dev.error_word()?;
    let cfg = Launch {
        grid: (rows, 1, 1),
        block: (SUMMED_THREADS, 1, 1),
        shared: 0,
    };
    // SAFETY: ce_summed_T(const T* logits, const u32* targets, T* dlogits, float* loss,
    // u32 vocab, u32 ignore, u32* err), a block of ROW_BLOCK threads per row (its
    // instantiations' launch bounds); logits and
    // dlogits (or null, never written then) hold rows * vocab, targets and loss rows; targets
    // >= vocab are never dereferenced; err is the device's error word; the vectorised
    // instantiation only where vector_rows holds (tiles start at multiples of 8 columns).
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                logits,
                targets,
                &ptr_or_null(dlogits),
                &loss,
                &vocab,
                &ignore_index,
                &err,
            ],
        )?;
    }
    // `loss` is dropped after queuing: later users of its memory are queued behind the kernel
    // on the same stream.
    counted_sum(
        dev,
        "ce_sum_into",
        &loss,
        targets,
        totals,
        rows,
        ignore_index,
    )
}

/// Queues `kernel`, ce_mean or ce_sum_into: one block sums the losses of the rows counted
/// (targets not `ignore_index`) and counts them, into `out` (f32 [2]).
fn counted_sum(
    dev: &CudaDevice,
    kernel: &'static str,
    loss: &Buffer,
    targets: &Buffer,
    out: &Buffer,
    rows: u32,
    ignore_index: u32,
) -> Result<(), CudaError> {
    let cfg = Launch {
        grid: (1, 1, 1),
        block: (MEAN_BLOCK, 1, 1),
        shared: 0,
    };
    // SAFETY: ce_mean and ce_sum_into(const float* loss, const u32* targets, float* out,
    // u32 rows, u32 ignore); loss and targets hold rows, out 2.
    unsafe {
        launch(
            dev,
            &SOURCE,
            kernel,
            cfg,
            &[loss, targets, out, &rows, &ignore_index],
        )
    }
}
