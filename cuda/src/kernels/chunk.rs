//! What the chunkwise recurrent kernel wrappers (mLSTM, gated delta rule) share: the sizes
//! struct the kernels take, the checks of their operands, and the launch of one block per
//! (batch, head) with its shared memory (`kernels/chunk.cuh`).

use super::{check_device, check_dtype, check_len, to_u32, KernelArg, Launch};
use crate::{Buffer, CudaError, DType, Device};
use std::ffi::c_void;

/// Sizes of a chunkwise call: q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, per-head gates
/// `[B, T, H]`, states `[B, H, Dk, Dv]`, time in `chunk`-step chunks (the last one shorter when
/// `chunk` does not divide T).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecurrentShape {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub dk: usize,
    pub dv: usize,
    pub chunk: usize,
}

impl RecurrentShape {
    pub fn chunks(&self) -> usize {
        self.t.div_ceil(self.chunk)
    }
    pub fn heads(&self) -> usize {
        self.b * self.h
    }
    /// Elements of a `[B, T, H, d]` buffer.
    pub fn rows(&self, d: usize) -> usize {
        self.b * self.t * self.h * d
    }
    /// Elements of the boundary states `[B, H, N + 1, rest]`.
    pub fn boundaries(&self, rest: usize) -> usize {
        self.heads() * (self.chunks() + 1) * rest
    }
}

/// The kernels' `RecDims` (chunk.cuh).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecArgs {
    b: i32,
    t: i32,
    h: i32,
    dk: i32,
    dv: i32,
    chunk: i32,
    eps: f32,
    scale: f32,
}

impl KernelArg for RecArgs {
    fn as_param(&self) -> *mut c_void {
        self as *const RecArgs as *mut c_void
    }
}

/// Threads of a chunkwise block (`MLSTM_THREADS` in mlstm.cu).
pub(crate) const CHUNK_THREADS: u32 = 256;

impl RecArgs {
    /// Checks the sizes (every one at least 1; with bf16 tensor cores, Dk and Dv multiples of
    /// 16) and converts them.
    pub fn new(
        op: &'static str,
        s: RecurrentShape,
        dtype: DType,
        eps: f32,
    ) -> Result<RecArgs, CudaError> {
        if [s.b, s.t, s.h, s.dk, s.dv, s.chunk].contains(&0) {
            return Err(CudaError::invalid(op, format!("empty sizes {s:?}")));
        }
        if dtype == DType::BF16 && (s.dk % 16 != 0 || s.dv % 16 != 0) {
            return Err(CudaError::invalid(
                op,
                format!(
                    "bf16 tensor-core tiles need Dk and Dv multiples of 16, got {} and {}",
                    s.dk, s.dv
                ),
            ));
        }
        to_u32(op, "B*T*H*D", s.rows(s.dk.max(s.dv)))?;
        let int = |what: &str, v: usize| -> Result<i32, CudaError> {
            i32::try_from(v).map_err(|_| CudaError::invalid(op, format!("{what} = {v} too large")))
        };
        Ok(RecArgs {
            b: int("B", s.b)?,
            t: int("T", s.t)?,
            h: int("H", s.h)?,
            dk: int("Dk", s.dk)?,
            dv: int("Dv", s.dv)?,
            chunk: int("chunk", s.chunk)?,
            eps,
            scale: 1.0 / (s.dk as f32).sqrt(),
        })
    }
}

/// One block per (batch, head), `floats` f32 of dynamic shared memory, which must fit the
/// device's opt-in limit (the chunk's tiles live there: a longer chunk or larger heads need
/// more).
pub(crate) fn head_launch(
    op: &'static str,
    dev: &Device,
    s: RecurrentShape,
    floats: usize,
) -> Result<Launch, CudaError> {
    let bytes = floats * 4;
    if bytes > dev.max_shared_optin() as usize {
        return Err(CudaError::invalid(
            op,
            format!(
                "chunk {} with Dk {} and Dv {} needs {bytes} bytes of shared memory, more than the {} a block gets",
                s.chunk,
                s.dk,
                s.dv,
                dev.max_shared_optin()
            ),
        ));
    }
    Ok(Launch {
        grid: (to_u32(op, "B*H", s.heads())?, 1, 1),
        block: (CHUNK_THREADS, 1, 1),
        shared: bytes as u32,
    })
}

/// Rows of a chunk tile, padded to whole 16-row tensor-core tiles, and the padded row lengths
/// of the `[rows, Dk]`, `[rows, Dv]` and `[rows, rows]` tiles (4 floats past the data, so that
/// the rows of a fragment fall in different shared-memory banks).
pub(crate) fn tile_sizes(s: RecurrentShape) -> (usize, usize, usize, usize) {
    let lp = s.chunk.next_multiple_of(16);
    (lp, s.dk + 4, s.dv + 4, lp + 4)
}

/// Checks device, dtype and length of each `(name, buffer, dtype, len)`.
pub(crate) fn check_operands(
    op: &'static str,
    dev: &Device,
    operands: &[(&str, &Buffer, DType, usize)],
) -> Result<(), CudaError> {
    for &(name, buf, dtype, len) in operands {
        check_device(op, dev, &[buf])?;
        check_dtype(op, name, buf, dtype)?;
        check_len(op, name, buf, len)?;
    }
    Ok(())
}
