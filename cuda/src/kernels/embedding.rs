//! Embedding lookup and index_select (row gather by u32 ids), and the embedding backward's
//! scatter-add (`kernels/embedding.cu`).

use super::{
    bits_kernel, check_device, check_dtype, check_len, float_kernel, launch, to_u32, Launch,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "embedding",
    source: &[include_str!("../../kernels/embedding.cu")],
};

/// Threads per block along a row.
const ROW_BLOCK: u32 = 256;

fn row_launch(dev: &CudaDevice, count: u64) -> Launch {
    Launch {
        grid: (
            count.clamp(1, dev.sm_count().max(1) as u64 * 32) as u32,
            1,
            1,
        ),
        block: (ROW_BLOCK, 1, 1),
        shared: 0,
    }
}

/// `out[r, :] = src[idx[r], :]`: rows of `row_len` elements of `src` (any dtype; `src.len()`
/// a multiple of `row_len`) picked by the u32 `idx`; `out` holds `idx.len() * row_len`.
/// An index past the last row yields a zero row and raises a flag that
/// `CudaDevice::take_kernel_errors` reports.
pub fn index_select(
    dev: &CudaDevice,
    src: &Buffer,
    row_len: usize,
    idx: &Buffer,
    out: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "index_select";
    check_device(OP, dev, &[src, idx, out])?;
    check_dtype(OP, "idx", idx, DType::U32)?;
    check_dtype(OP, "out", out, src.dtype())?;
    let src_rows = super::rows_of(OP, src, row_len)?;
    let want = idx.len().checked_mul(row_len);
    check_len(OP, "out", out, want.unwrap_or(usize::MAX))?;
    if out.is_empty() {
        return Ok(());
    }
    let count = idx.len() as u64;
    let row_len = row_len as u64;
    let err = dev.error_word()?;
    let name = bits_kernel!(OP, "gather", src.dtype())?;
    // SAFETY: gather_bN(const u32* ids, const E* src, E* dst, u64 count, u32 src_rows,
    // u64 row_len, u32* err); ids holds count, src src_rows * row_len, dst count * row_len
    // elements; ids >= src_rows are never dereferenced; err is the device's live error word.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            row_launch(dev, count),
            &[idx, src, out, &count, &src_rows, &row_len, &err],
        )
    }
}

/// Embedding lookup: `out[r, :] = table[ids[r], :]` for a `table` of `vocab` rows of `dim`
/// (f32 or bf16); out-of-range ids as in [`index_select`].
pub fn embedding(
    dev: &CudaDevice,
    ids: &Buffer,
    table: &Buffer,
    vocab: usize,
    dim: usize,
    out: &mut Buffer,
) -> Result<(), CudaError> {
    check_len("embedding", "table", table, vocab * dim)?;
    index_select(dev, table, dim, ids, out)
}

/// Embedding backward: `dtable[ids[r], :] += dout[r, :]`, accumulated in f32 with atomics (so
/// repeated ids add up; the order of additions, and so the last bits, vary run to run).
/// `dtable` (f32, vocab * dim) is added to, not overwritten: zero it for a fresh gradient.
/// `dout` is f32 or bf16 with `ids.len() * dim` elements; out-of-range ids are skipped.
pub fn embedding_backward(
    dev: &CudaDevice,
    ids: &Buffer,
    dout: &Buffer,
    vocab: usize,
    dim: usize,
    dtable: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "embedding_backward";
    check_device(OP, dev, &[ids, dout, dtable])?;
    check_dtype(OP, "ids", ids, DType::U32)?;
    check_dtype(OP, "dtable", dtable, DType::F32)?;
    check_len(OP, "dtable", dtable, vocab * dim)?;
    check_len(OP, "dout", dout, ids.len() * dim)?;
    let name = float_kernel!(OP, "scatter_add", dout.dtype())?;
    if dout.is_empty() {
        return Ok(());
    }
    let count = ids.len() as u64;
    let rows = to_u32(OP, "vocab", vocab)?;
    let row_len = dim as u64;
    // SAFETY: scatter_add_T(const u32* ids, const T* dout, float* dtable, u64 count,
    // u32 table_rows, u64 row_len); sizes checked above; ids >= table_rows are skipped.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            row_launch(dev, count),
            &[ids, dout, dtable, &count, &rows, &row_len],
        )
    }
}
