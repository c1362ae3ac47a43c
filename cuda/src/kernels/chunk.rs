//! What the chunkwise recurrent kernel wrappers (the mLSTM's and the gated delta rule's, in
//! swax-nn) share: the sizes struct the kernels take (swax-nn's mixers check it against their
//! tensors), the checks of their operands, the launch of one block per (batch, head, value tile)
//! with its shared memory, and the sum of the value tiles' shares of a gradient
//! (`kernels/chunk.cuh`).

use super::{check_device, check_dtype, check_len, launch, to_u32, KernelArg, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};
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
pub struct RecArgs {
    b: i32,
    t: i32,
    h: i32,
    dk: i32,
    dv: i32,
    chunk: i32,
    bv: i32,
    nv: i32,
    eps: f32,
    scale: f32,
}

impl KernelArg for RecArgs {
    fn as_param(&self) -> *mut c_void {
        self as *const RecArgs as *mut c_void
    }
}

/// Threads of a chunkwise block (`REC_THREADS` in chunk.cuh).
pub const CHUNK_THREADS: u32 = 512;

impl RecArgs {
    /// Columns of a value tile.
    pub fn bv(&self) -> usize {
        self.bv as usize
    }
    /// Value tiles: blocks per (batch, head).
    pub fn nv(&self) -> usize {
        self.nv as usize
    }

    /// The value dimension in `nv` tiles of equal width (with bf16 tensor cores a multiple of
    /// 16), the last one narrower where that width does not divide Dv.
    fn with_tiles(mut self, nv: usize, dtype: DType) -> RecArgs {
        let dv = self.dv as usize;
        let bv = dv.div_ceil(nv);
        let bv = match dtype {
            DType::BF16 => bv.next_multiple_of(16),
            _ => bv,
        }
        .min(dv);
        self.bv = bv as i32;
        self.nv = dv.div_ceil(bv) as i32;
        self
    }

    /// The value tiles of a kernel needing `bytes(args)` of shared memory: all of Dv in one
    /// tile where it fits, else the fewest tiles that fit: each tile redoes the chunk's L x L
    /// work, and a block already fills an SM, so more tiles are slower (BENCHMARKS.md).
    pub fn fit(self, dev: &CudaDevice, dtype: DType, bytes: impl Fn(&RecArgs) -> usize) -> RecArgs {
        self.fit_within(dev.max_shared_optin() as usize, dtype, bytes)
    }

    /// `fit` for a block's shared-memory limit in bytes (what a device's opt-in limit would be).
    pub fn fit_within(
        self,
        limit: usize,
        dtype: DType,
        bytes: impl Fn(&RecArgs) -> usize,
    ) -> RecArgs {
        let mut nv = 1;
        loop {
            let a = self.with_tiles(nv, dtype);
            if bytes(&a) <= limit || a.bv() <= 16 || a.nv() >= a.dv as usize {
                return a;
            }
            nv += 1;
        }
    }

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
        if dtype == DType::BF16 && (!s.dk.is_multiple_of(16) || !s.dv.is_multiple_of(16)) {
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
            bv: int("Dv", s.dv)?,
            nv: 1,
            eps,
            scale: 1.0 / (s.dk as f32).sqrt(),
        })
    }
}

/// One block per (batch, head, value tile), `bytes` of dynamic shared memory, which must
/// fit the device's opt-in limit (the chunk's tiles live there: a longer chunk or larger heads
/// need more).
pub fn head_launch(
    op: &'static str,
    dev: &CudaDevice,
    s: RecurrentShape,
    args: &RecArgs,
    bytes: usize,
) -> Result<Launch, CudaError> {
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
        grid: (to_u32(op, "B*H", s.heads())?, args.nv as u32, 1),
        block: (CHUNK_THREADS, 1, 1),
        shared: bytes as u32,
    })
}

/// The row length of a shared tile of n columns of `size`-byte elements: n and 16 bytes more
/// (`tile_ld` in chunk.cuh).
pub fn tile_ld(n: usize, size: usize) -> usize {
    n + 16 / size
}

/// With several value tiles, the f32 buffer `[nv, stride]` of the tiles' shares of the gradients
/// summed over v (`Sink` in chunk.cuh); with one, the kernel writes those gradients directly
/// and `None` is returned.
pub fn tile_shares(
    dev: &CudaDevice,
    args: &RecArgs,
    stride: usize,
) -> Result<Option<Buffer>, CudaError> {
    if args.nv() > 1 {
        dev.alloc(DType::F32, args.nv() * stride).map(Some)
    } else {
        Ok(None)
    }
}

/// `out[i] = sum_v shares[v * stride + off + i]` for i < out's length: one gradient from the
/// value tiles' shares.
pub fn sum_tiles(
    dev: &CudaDevice,
    src: &KernelSource,
    shares: &Buffer,
    off: usize,
    stride: usize,
    args: &RecArgs,
    out: &Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "rec_reduce";
    let name = super::float_kernel!(OP, "rec_reduce", out.dtype())?;
    let n = out.len() as u64;
    let nv = args.nv;
    // SAFETY: rec_reduce_T(part, off, stride, nv, n, out); `shares` holds nv rows of `stride`
    // f32 (tile_shares) and the caller's `off + n` is within a row.
    unsafe {
        launch(
            dev,
            src,
            name,
            Launch::elementwise(dev, n),
            &[shares, &(off as u64), &(stride as u64), &nv, &n, out],
        )
    }
}

/// Checks device, dtype and length of each `(name, buffer, dtype, len)`.
pub fn check_operands(
    op: &'static str,
    dev: &CudaDevice,
    operands: &[(&str, &Buffer, DType, usize)],
) -> Result<(), CudaError> {
    for &(name, buf, dtype, len) in operands {
        check_device(op, dev, &[buf])?;
        check_dtype(op, name, buf, dtype)?;
        check_len(op, name, buf, len)?;
    }
    Ok(())
}
