//! Sliding-window attention on CUDA, flash style, forward and backward on bf16 tensor cores
//! (`attention.cu`, after swax-cuda's `mma.cuh`, `wgmma.cuh` and `tma.cuh`; it says how the
//! kernels work), with Hopper's own forward and backward (`hopper_fwd.cu`, `hopper_bwd.cu`,
//! warp-specialised, fed by TMA).
//! f32 operands are rounded to bf16 on the way in and the results widened back (the softmax
//! statistics and accumulations stay f32).
use super::{SwaBackward, SwaGrads, SwaIn, SwaOut};
use swax_cuda::kernels::attention::AttnShape;
use swax_cuda::kernels::cast::cast;
use swax_cuda::kernels::{
    check_device, check_dtype, check_len, launch, to_u32, Launch, MMA_CUH, TMA_CUH, WGMMA_CUH,
};
use swax_cuda::tma::TensorMap;
use swax_cuda::{Buffer, CudaDevice, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "attention",
    source: &[
        MMA_CUH,
        WGMMA_CUH,
        TMA_CUH,
        include_str!("attention.cu"),
        include_str!("hopper_fwd.cu"),
        include_str!("hopper_bwd.cu"),
    ],
};

/// Rows of a query or key tile (the backward's keys per block), the forward's query rows per
/// block, and threads per block (the `#define`s of attention.cu).
const TILE: usize = 64;
const FWD_ROWS: usize = 128;
const FWD_THREADS: u32 = 128;
const BWD_THREADS: u32 = 128;
/// Rows of `swa_bwd_prep` per block, d / 8 threads each.
const PREP_ROWS: u32 = 32;
/// Hopper's forward (hopper_fwd.cu): query rows a block (two consumer warpgroups of 64),
/// threads (and a producer warp), K/V buffers.
const WS_ROWS: usize = 128;
const WS_THREADS: u32 = 288;
const WS_STAGES: usize = 4;
/// Hopper's backward (hopper_bwd.cu): keys a block (two consumer warpgroups of 64), threads (and
/// a producer warpgroup), buffers of query tiles.
const WSB_KEYS: usize = 128;
const WSB_THREADS: u32 = 384;
const WSB_STAGES: usize = 2;
/// The narrowest window (at most T) whose backward on Hopper is hopper_bwd.cu's: narrower
/// windows give its 128-key tiles few query tiles to walk, and there swa_bwd's two blocks per SM
/// hide more of each walk's latency (measured at windows 128 and 512: BENCHMARKS.md).
const WS_BWD_MIN_WINDOW: u32 = 512;
/// Threads a block of `swa_dq_unblock`.
const UNBLOCK_THREADS: u32 = 256;
/// The architecture whose forward and backward at head dim 128 are hopper_fwd.cu's and
/// hopper_bwd.cu's (NVRTC compiles them for sm_90a; at head dim 64 both measured slower than
/// swa_fwd and swa_bwd, BENCHMARKS.md).
const HOPPER: (u32, u32) = (9, 0);

/// What the kernels launch with at head dim `d`: positions and threads a block and shared
/// bytes of the forward (query rows) and the backward (keys), `swa_bwd_prep`'s rows and threads
/// a block, and the same of Hopper's forward and backward.
/// Public so that the kernels' CPU emulation (tests/tests/emulated_kernels.rs) launches them as
/// the wrappers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub fwd_rows: usize,
    pub fwd_threads: u32,
    pub fwd_shared: usize,
    pub bwd_rows: usize,
    pub bwd_threads: u32,
    pub bwd_shared: usize,
    pub prep_rows: u32,
    pub prep_threads: u32,
    pub hopper_fwd_rows: usize,
    pub hopper_fwd_threads: u32,
    pub hopper_fwd_shared: usize,
    pub hopper_bwd_keys: usize,
    pub hopper_bwd_threads: u32,
    pub hopper_bwd_shared: usize,
}

/// The sizes at head dim `d`.
pub fn sizes(d: usize) -> Sizes {
    Sizes {
        fwd_rows: FWD_ROWS,
        fwd_threads: FWD_THREADS,
        // The block's Q rows and double-buffered K and V tiles, bf16; 1024 bytes to align the
        // tiles as wgmma reads them.
        fwd_shared: (FWD_ROWS + 4 * TILE) * d * 2 + 1024,
        bwd_rows: TILE,
        bwd_threads: BWD_THREADS,
        // K and V tiles, double-buffered Q and dO tiles, a dS tile (bf16); lse and delta of two
        // query tiles (f32); 1024 bytes to align the tiles as wgmma reads them.
        bwd_shared: (6 * TILE * d + TILE * TILE) * 2 + 4 * TILE * 4 + 1024,
        prep_rows: PREP_ROWS,
        prep_threads: PREP_ROWS * d as u32 / 8,
        hopper_fwd_rows: WS_ROWS,
        hopper_fwd_threads: WS_THREADS,
        // Two tiles' Q rows and the ring of K and V tiles, bf16; the barriers (two each for Q,
        // three a K/V buffer); 1024 bytes to align the tiles as TMA writes them.
        hopper_fwd_shared: (2 * WS_ROWS + 2 * WS_STAGES * TILE) * d * 2
            + (4 + 3 * WS_STAGES) * 8
            + 1024,
        hopper_bwd_keys: WSB_KEYS,
        hopper_bwd_threads: WSB_THREADS,
        // K and V of the block's keys, the ring of Q and dO tiles, two dS^T tiles (bf16); two
        // warpgroups' 64-column blocks of dQ, the ring's lse2 and delta rows (f32); the barriers
        // (two for K and V, three a ring buffer); 1024 bytes to align the tiles.
        hopper_bwd_shared: (4 * WSB_KEYS + 4 * WSB_STAGES * TILE) * d
            + (2 * WSB_KEYS * TILE) * 2
            + (2 * TILE * 64 + 2 * WSB_STAGES * TILE) * 4
            + (2 + 3 * WSB_STAGES) * 8
            + 1024,
    }
}

/// An operand as the kernels read it, bf16: the buffer itself, or a bf16 copy of an f32 one.
pub(crate) enum Bf16<'a> {
    Same(&'a Buffer),
    Copy(Buffer),
}

impl std::ops::Deref for Bf16<'_> {
    type Target = Buffer;
    fn deref(&self) -> &Buffer {
        match self {
            Bf16::Same(b) => b,
            Bf16::Copy(b) => b,
        }
    }
}

/// `b` as bf16 (see [`Bf16`]).
pub(crate) fn bf16(b: &Buffer) -> Result<Bf16<'_>, CudaError> {
    if b.dtype() == DType::BF16 {
        return Ok(Bf16::Same(b));
    }
    let mut y = b.device().alloc(DType::BF16, b.len())?;
    cast(b.device(), b, &mut y)?;
    Ok(Bf16::Copy(y))
}

/// A result `b` as `dtype`, the operands' (a kernel's bf16 widened back to f32).
pub(crate) fn as_dtype(b: Buffer, dtype: DType) -> Result<CudaStorage, CudaError> {
    if b.dtype() == dtype {
        return Ok(b.into());
    }
    let mut y = b.device().alloc(dtype, b.len())?;
    cast(b.device(), &b, &mut y)?;
    Ok(y.into())
}

/// What a launch needs, checked: the kernel names of this head dim and the sizes as u32.
struct Checked {
    fwd: &'static str,
    bwd: &'static str,
    t: u32,
    h: u32,
    hkv: u32,
    window: u32,
    b: u32,
}

impl Checked {
    fn new(op: &'static str, s: AttnShape, window: usize) -> Result<Checked, CudaError> {
        s.check(op)?;
        let (fwd, bwd) = match s.d {
            64 => ("swa_fwd_d64", "swa_bwd_d64"),
            _ => ("swa_fwd_d128", "swa_bwd_d128"),
        };
        Ok(Checked {
            fwd,
            bwd,
            t: to_u32(op, "t", s.t)?,
            h: to_u32(op, "h", s.h)?,
            hkv: to_u32(op, "hkv", s.hkv)?,
            window: to_u32(op, "window", window.min(s.t.max(1)))?,
            b: to_u32(op, "b", s.b)?,
        })
    }

    /// Blocks of `rows` positions over (time, `heads`, batch), `shared` bytes each.
    fn grid(
        &self,
        s: AttnShape,
        rows: usize,
        heads: u32,
        threads: u32,
        shared: usize,
    ) -> Result<Launch, CudaError> {
        Ok(Launch {
            grid: (
                to_u32("attention", "blocks", s.t.div_ceil(rows))?,
                heads,
                self.b,
            ),
            block: (threads, 1, 1),
            shared: to_u32("attention", "shared", shared)?,
        })
    }
}

/// The launch of a persistent kernel over `tiles` tiles: one block an SM, or one a tile where
/// there are fewer.
fn persistent(
    op: &'static str,
    dev: &CudaDevice,
    tiles: usize,
    threads: u32,
    shared: usize,
) -> Result<Launch, CudaError> {
    Ok(Launch {
        grid: (
            to_u32(op, "blocks", tiles.min(dev.sm_count() as usize))?,
            1,
            1,
        ),
        block: (threads, 1, 1),
        shared: to_u32(op, "shared", shared)?,
    })
}

/// The forward: o (the operands' dtype) and each query row's natural log-sum-exp of its scaled
/// scores, lse f32 `[b, h, t]`.
pub(super) fn forward(
    x: &SwaIn<&Buffer>,
    s: AttnShape,
    window: usize,
    scale: f64,
) -> Result<SwaOut<CudaStorage>, CudaError> {
    const OP: &str = "swa_forward";
    let dev = x.q.device();
    check_device(OP, dev, &[x.q, x.k, x.v])?;
    let c = Checked::new(OP, s, window)?;
    let (q, k, v) = (bf16(x.q)?, bf16(x.k)?, bf16(x.v)?);
    let (q, k, v) = (&*q, &*k, &*v);
    let o = dev.alloc(DType::BF16, s.q_len())?;
    let lse = dev.alloc(DType::F32, s.rows())?;
    s.check_io(OP, &[q, &o], &[k, v])?;
    if s.rows() > 0 {
        let scale_log2 = (scale * std::f64::consts::LOG2_E) as f32;
        if dev.compute_capability() == HOPPER && s.d == 128 {
            forward_hopper(dev, &c, s, [q, k, v], &o, &lse, scale_log2)?;
        } else {
            let z = sizes(s.d);
            let cfg = c.grid(s, z.fwd_rows, c.h, z.fwd_threads, z.fwd_shared)?;
            // SAFETY: swa_fwd_dD(const bf16* q, const bf16* k, const bf16* v, bf16* o, float*
            // lse, u32 t_len, u32 heads, u32 kv_heads, u32 window, float scale_log2); q and o
            // hold b*t*h*d, k and v b*t*hkv*d (checked above), lse b*h*t (allocated); the grid
            // covers exactly those.
            unsafe {
                launch(
                    dev,
                    &SOURCE,
                    c.fwd,
                    cfg,
                    &[
                        q,
                        k,
                        v,
                        &o,
                        &lse,
                        &c.t,
                        &c.h,
                        &c.hkv,
                        &c.window,
                        &scale_log2,
                    ],
                )?;
            }
        }
    }
    Ok(SwaOut {
        o: as_dtype(o, x.q.dtype())?,
        lse: lse.into(),
    })
}

/// The forward on Hopper at head dim 128: one persistent block an SM (or fewer, one a tile)
/// walking the (query block, q head, sequence) tiles, its loads by TMA through tensor maps of
/// q, k, v.
fn forward_hopper(
    dev: &CudaDevice,
    c: &Checked,
    s: AttnShape,
    [q, k, v]: [&Buffer; 3],
    o: &Buffer,
    lse: &Buffer,
    scale_log2: f32,
) -> Result<(), CudaError> {
    const OP: &str = "swa_forward";
    let z = sizes(s.d);
    let tq = TensorMap::bf16_rows(OP, q, &[s.b, s.t, s.h, s.d], 1, z.hopper_fwd_rows)?;
    let tk = TensorMap::bf16_rows(OP, k, &[s.b, s.t, s.hkv, s.d], 1, TILE)?;
    let tv = TensorMap::bf16_rows(OP, v, &[s.b, s.t, s.hkv, s.d], 1, TILE)?;
    let tiles = s.t.div_ceil(z.hopper_fwd_rows) * s.h * s.b;
    let cfg = persistent(OP, dev, tiles, z.hopper_fwd_threads, z.hopper_fwd_shared)?;

    // SAFETY: swa_fwd_ws_d128(TensorMap tq, TensorMap tk, TensorMap tv, bf16* o, float* lse, u32
    // t_len, u32 heads, u32 kv_heads, u32 batch, u32 window, float scale_log2); the maps
    // describe q, k, v at their checked sizes (the TMA unit reads nothing outside them), o holds
    // b*t*h*d and lse b*h*t, and the blocks write only the rows of their tiles.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "swa_fwd_ws_d128",
            cfg,
            &[
                &tq,
                &tk,
                &tv,
                o,
                lse,
                &c.t,
                &c.h,
                &c.hkv,
                &c.b,
                &c.window,
                &scale_log2,
            ],
        )
    }
}

/// The backward: dq (accumulated in f32), dk and dv (summed over the q heads that share a kv
/// head), all of the operands' dtype.
pub(super) fn backward(
    x: &SwaBackward<&Buffer>,
    s: AttnShape,
    window: usize,
    scale: f64,
) -> Result<SwaGrads<CudaStorage>, CudaError> {
    const OP: &str = "swa_backward";
    let i = &x.input;
    let (dev, dtype) = (i.q.device(), i.q.dtype());
    check_device(OP, dev, &[i.q, i.k, i.v, x.out.o, x.out.lse, x.dout])?;
    let c = Checked::new(OP, s, window)?;
    let (q, k, v) = (bf16(i.q)?, bf16(i.k)?, bf16(i.v)?);
    let (o, dout) = (bf16(x.out.o)?, bf16(x.dout)?);
    let (q, k, v, o, dout) = (&*q, &*k, &*v, &*o, &*dout);
    let lse = x.out.lse;
    let dk = dev.alloc(DType::BF16, s.kv_len())?;
    let dv = dev.alloc(DType::BF16, s.kv_len())?;
    s.check_io(OP, &[q, o, dout], &[k, v, &dk, &dv])?;
    check_dtype(OP, "lse", lse, DType::F32)?;
    check_len(OP, "lse", lse, s.rows())?;
    let dq = if s.rows() == 0 {
        dev.alloc_zeros(dtype, 0)?
    } else {
        let z = sizes(s.d);
        // delta and lse2 [b, h, t_pad]: whole query tiles, as the kernels read them.
        let t_pad = s.t.next_multiple_of(TILE);
        let stat_rows = to_u32(OP, "rows", s.b * s.h * t_pad)?;
        let t_pad = to_u32(OP, "t_pad", t_pad)?;
        let d = to_u32(OP, "d", s.d)?;
        let delta = dev.alloc(DType::F32, stat_rows as usize)?;
        let lse2 = dev.alloc(DType::F32, stat_rows as usize)?;
        // SAFETY: swa_bwd_prep(const bf16* o, const bf16* dout, const float* lse, float* delta,
        // float* lse2, u32 rows, u32 t_len, u32 t_pad, u32 heads, u32 d); o and dout hold
        // b*t*h*d, lse b*h*t (checked above), delta and lse2 rows = b*h*t_pad; d / 8 threads a
        // row.
        unsafe {
            launch(
                dev,
                &SOURCE,
                "swa_bwd_prep",
                Launch {
                    grid: (stat_rows.div_ceil(z.prep_rows), 1, 1),
                    block: (z.prep_threads, 1, 1),
                    shared: 0,
                },
                &[
                    o, dout, lse, &delta, &lse2, &stat_rows, &c.t, &t_pad, &c.h, &d,
                ],
            )?;
        }
        let scale = scale as f32;
        let stats = [&lse2, &delta];
        if dev.compute_capability() == HOPPER && s.d == 128 && c.window >= WS_BWD_MIN_WINDOW {
            backward_hopper(dev, &c, s, [q, k, v, dout], stats, [&dk, &dv], scale, dtype)?
        } else {
            let dq = dev.alloc_zeros(DType::F32, s.q_len())?;
            let cfg = c.grid(s, z.bwd_rows, c.hkv, z.bwd_threads, z.bwd_shared)?;
            // SAFETY: swa_bwd_dD(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
            // const float* lse2, const float* delta, float* dq_acc, bf16* dk, bf16* dv, u32
            // t_len, u32 heads, u32 kv_heads, u32 window, float scale); sizes checked above, dq
            // holds b*t*h*d f32 zeros, lse2 and delta b*h*t_pad.
            unsafe {
                launch(
                    dev,
                    &SOURCE,
                    c.bwd,
                    cfg,
                    &[
                        q, k, v, dout, &lse2, &delta, &dq, &dk, &dv, &c.t, &c.h, &c.hkv, &c.window,
                        &scale,
                    ],
                )?;
            }
            dq
        }
    };
    Ok(SwaIn {
        q: as_dtype(dq, dtype)?,
        k: as_dtype(dk, dtype)?,
        v: as_dtype(dv, dtype)?,
    })
}

/// The backward on Hopper at head dim 128: one persistent block an SM (or fewer, one a tile)
/// walking the tiles of 128 keys of a kv head, its loads by TMA through tensor maps of q, k, v
/// and dout, dq accumulated in f32 in tile blocks and then written out by `swa_dq_unblock`
/// (bf16 where `dtype` is, else f32).
#[allow(clippy::too_many_arguments)]
fn backward_hopper(
    dev: &CudaDevice,
    c: &Checked,
    s: AttnShape,
    [q, k, v, dout]: [&Buffer; 4],
    [lse2, delta]: [&Buffer; 2],
    [dk, dv]: [&Buffer; 2],
    scale: f32,
    dtype: DType,
) -> Result<Buffer, CudaError> {
    const OP: &str = "swa_backward";
    let z = sizes(s.d);
    let tq = TensorMap::bf16_rows(OP, q, &[s.b, s.t, s.h, s.d], 1, TILE)?;
    let tdo = TensorMap::bf16_rows(OP, dout, &[s.b, s.t, s.h, s.d], 1, TILE)?;
    let tk = TensorMap::bf16_rows(OP, k, &[s.b, s.t, s.hkv, s.d], 1, z.hopper_bwd_keys)?;
    let tv = TensorMap::bf16_rows(OP, v, &[s.b, s.t, s.hkv, s.d], 1, z.hopper_bwd_keys)?;
    let acc = dev.alloc_zeros(DType::F32, s.b * s.h * s.t.next_multiple_of(TILE) * s.d)?;
    let tiles = s.t.div_ceil(z.hopper_bwd_keys) * s.hkv * s.b;
    let cfg = persistent(OP, dev, tiles, z.hopper_bwd_threads, z.hopper_bwd_shared)?;
    // SAFETY: swa_bwd_ws_d128(TensorMap tq, TensorMap tk, TensorMap tv, TensorMap tdo, const
    // float* lse2, const float* delta, float* dq_acc, bf16* dk, bf16* dv, u32 t_len, u32 heads,
    // u32 kv_heads, u32 batch, u32 window, float scale); the maps describe q, k, v, dout at
    // their checked sizes, lse2 and delta hold b*h*t_pad, dq_acc b*h*t_pad*d zeros, dk and dv
    // b*t*hkv*d; the blocks write only the keys of their tiles.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "swa_bwd_ws_d128",
            cfg,
            &[
                &tq, &tk, &tv, &tdo, lse2, delta, &acc, dk, dv, &c.t, &c.h, &c.hkv, &c.b,
                &c.window, &scale,
            ],
        )?;
    }
    // dq in bf16 for bf16 operands, else f32 (as_dtype widens it further where asked).
    let (kernel, out) = match dtype {
        DType::BF16 => ("swa_dq_unblock_bf16_d128", DType::BF16),
        _ => ("swa_dq_unblock_f32_d128", DType::F32),
    };
    let dq = dev.alloc(out, s.q_len())?;
    let blocks = (acc.len() / (64 * 64)).min(dev.sm_count() as usize * 16);
    // SAFETY: swa_dq_unblock_O_d128(const float* acc, O* dq, u32 t_len, u32 heads, u32 batch,
    // float scale); acc holds b*h*t_pad*d (a grid-stride walk over its 64 x 64 blocks), dq
    // b*t*h*d of dtype O (rows past t are skipped).
    unsafe {
        launch(
            dev,
            &SOURCE,
            kernel,
            Launch {
                grid: (to_u32(OP, "blocks", blocks)?, 1, 1),
                block: (UNBLOCK_THREADS, 1, 1),
                shared: 0,
            },
            &[&acc, &dq, &c.t, &c.h, &c.b, &scale],
        )?;
    }
    Ok(dq)
}
