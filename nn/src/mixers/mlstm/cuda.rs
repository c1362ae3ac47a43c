//! The mLSTM's chunkwise kernel on CUDA, forward and backward (`mlstm.cu`, after swax-cuda's
//! `kernels/mma.cuh` and `kernels/chunk.cuh`): lean sequential scans over the chunk-boundary
//! states, one block per (batch, head, value tile), around chunk-parallel kernels, one block per
//! (batch, head, value tile, chunk); f32 data is multiplied in f32, bf16 data on tensor cores.
use super::{MlstmBackward, MlstmGrads, MlstmIn, MlstmOut, MlstmState};
use swax_cuda::kernels::chunk::{
    check_operands, head_launch, sum_tiles, tile_ld, tile_shares, RecArgs, RecurrentShape,
    CHUNK_THREADS,
};
use swax_cuda::kernels::{float_kernel, launch, to_u32, Launch, CHUNK_CUH, MMA_CUH};
use swax_cuda::{Buffer, CudaDevice, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "mlstm",
    source: &[MMA_CUH, CHUNK_CUH, include_str!("mlstm.cu")],
};

/// The most blocks a grid's z dimension takes (the chunks of the chunk-parallel kernels).
const MAX_GRID_Z: usize = 65535;

/// Checks the inputs q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, i, f `[B, T, H]` and the state (or
/// state gradient) of one dtype (f32 or bf16); returns the kernels' sizes and that dtype.
fn check(
    op: &'static str,
    x: &MlstmIn<&Buffer>,
    s: RecurrentShape,
    eps: f32,
) -> Result<(RecArgs, DType), CudaError> {
    let (dev, dt) = (x.q.device(), x.q.dtype());
    let args = RecArgs::new(op, s, dt, eps)?;
    check_operands(
        op,
        dev,
        &[
            ("q", x.q, dt, s.rows(s.dk)),
            ("k", x.k, dt, s.rows(s.dk)),
            ("v", x.v, dt, s.rows(s.dv)),
            ("i", x.i, dt, s.rows(1)),
            ("f", x.f, dt, s.rows(1)),
            ("c", x.state.c, dt, s.heads() * s.dk * s.dv),
            ("n", x.state.n, dt, s.heads() * s.dk),
            ("m", x.state.m, dt, s.heads()),
        ],
    )?;
    Ok((args, dt))
}

/// The chunk's padded rows, a tile row of `n` elements of `e` bytes, and the f32 words of the
/// six per-row gate vectors (`Gates` in mlstm.cu).
fn lp(s: RecurrentShape) -> usize {
    s.chunk.next_multiple_of(16)
}
fn gates(s: RecurrentShape) -> usize {
    6 * lp(s)
}

/// Shared-memory bytes of `mlstm_scan_fwd`: f32 C `[Dk, bv]`, n and the gates; two pairs of k
/// `[lp, Dk]` and v `[lp, bv]` of the data's type (the next chunk's arriving while the current
/// one's are used).
fn scan_fwd_bytes(s: RecurrentShape, a: &RecArgs, e: usize) -> usize {
    let (lp, bv) = (lp(s), a.bv());
    let f32s = s.dk * tile_ld(bv, 4) + s.dk.next_multiple_of(16) + gates(s);
    4 * f32s + 2 * e * (lp * tile_ld(s.dk, e) + lp * tile_ld(bv, e))
}

/// Shared-memory bytes of `mlstm_chunk_fwd`: f32 n, two per-row vectors and the gates; q, k
/// `[lp, Dk]`, v `[lp, bv]`, C `[Dk, bv]` and the scores `[lp, lp]` of the data's type.
fn chunk_fwd_bytes(s: RecurrentShape, a: &RecArgs, e: usize) -> usize {
    let (lp, bv) = (lp(s), a.bv());
    let f32s = s.dk.next_multiple_of(16) + 2 * lp + gates(s);
    let elems = 2 * lp * tile_ld(s.dk, e) + (lp + s.dk) * tile_ld(bv, e) + lp * tile_ld(lp, e);
    4 * f32s + e * elems
}

/// Shared-memory bytes of `mlstm_scan_bwd`: f32 dC `[Dk, bv]`, dn, two per-row vectors, the
/// gates and 32 floats of scratch; two pairs of q `[lp, Dk]` and dnum `[lp, bv]` of the data's
/// type (as `mlstm_scan_fwd`'s k and v).
fn scan_bwd_bytes(s: RecurrentShape, a: &RecArgs, e: usize) -> usize {
    let (lp, bv) = (lp(s), a.bv());
    let f32s = s.dk * tile_ld(bv, 4) + s.dk.next_multiple_of(16) + 2 * lp + gates(s) + 32;
    4 * f32s + 2 * e * (lp * tile_ld(s.dk, e) + lp * tile_ld(bv, e))
}

/// Shared-memory bytes of `mlstm_grads`: f32 an accumulator tile `[lp, max(Dk, bv)]`, dn and
/// n, eight per-row vectors, the gates and 32 floats of scratch; q, k `[lp, Dk]`, v, dnum
/// `[lp, bv]`, the scores and their gradient `[lp, lp]`, dC and C_prev `[Dk, bv]` of the data's
/// type, C_prev in dC's tile when `lean` (`mlstm_grads_lean`).
fn grads_bytes(s: RecurrentShape, a: &RecArgs, e: usize, lean: bool) -> usize {
    let (lp, bv) = (lp(s), a.bv());
    let states = if lean { 1 } else { 2 };
    let f32s =
        lp * tile_ld(s.dk.max(bv), 4) + 2 * s.dk.next_multiple_of(16) + 8 * lp + gates(s) + 32;
    let elems = 2 * lp * tile_ld(s.dk, e)
        + (2 * lp + states * s.dk) * tile_ld(bv, e)
        + 2 * lp * tile_ld(lp, e);
    4 * f32s + e * elems
}

/// The shared memory a value tile of each pass needs: the most of its tiled kernels'.
fn forward_bytes(s: RecurrentShape, e: usize) -> impl Fn(&RecArgs) -> usize {
    move |a| scan_fwd_bytes(s, a, e).max(chunk_fwd_bytes(s, a, e))
}
fn backward_bytes(s: RecurrentShape, e: usize) -> impl Fn(&RecArgs) -> usize {
    let lean = lean_grads(s);
    move |a| scan_bwd_bytes(s, a, e).max(grads_bytes(s, a, e, lean))
}

/// Threads of a block of the tiled kernels (all but `mlstm_gates`), by the size of a head's
/// state: 512 (16 warps) from Dk·Dv = 128·64 up, else 256. The kernels are built for up to 512
/// threads of up to 128 registers, so a 512-thread block of the scans or of mlstm_grads holds an
/// SM's registers alone; smaller heads leave those warps little to do per chunk (a [32, 64]
/// state is 8 tensor-core tiles), and at 256 two blocks share an SM: swax-small's 192 heads
/// (Dk 32, Dv 64) then fit the H200's 132 SMs in one wave of the sequential scans instead of
/// two, and the chunk-parallel kernels run twice as many blocks side by side for the same warps
/// (the block sizes measured: BENCHMARKS.md).
fn block_threads(s: RecurrentShape) -> u32 {
    if s.dk * s.dv >= 128 * 64 {
        CHUNK_THREADS
    } else {
        CHUNK_THREADS / 2
    }
}

/// Threads of an `mlstm_gates` block (`GATE_THREADS` in mlstm.cu), one block per head.
const GATE_THREADS: u32 = 256;

/// The most threads of an `mlstm_grads_lean` block (`GRADS_LEAN_THREADS` in mlstm.cu).
const GRADS_LEAN_THREADS: u32 = 256;

/// Whether the backward runs `mlstm_grads_lean` (registers bounded for three blocks per SM, C_prev
/// sharing dC's tile) rather than `mlstm_grads`: wherever its bound allows the blocks
/// (`block_threads`): at swax-small's heads it measured faster than `mlstm_grads`
/// (BENCHMARKS.md).
fn lean_grads(s: RecurrentShape) -> bool {
    block_threads(s) <= GRADS_LEAN_THREADS
}

/// What the kernels launch with under a block's shared-memory limit: the threads of a block of
/// the tiled kernels and of `mlstm_gates`, each pass's value tile width (`bv` columns, Dv in
/// `Dv.div_ceil(bv)` tiles, the same for all the pass's kernels), each kernel's shared memory
/// in bytes (`mlstm_prep_bwd` and `mlstm_gates` take none) and whether the gradients run
/// `mlstm_grads_lean`. Public so that the kernels' CPU emulation (tests/tests/emulated_kernels.rs)
/// launches them as the wrappers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub threads: u32,
    pub gate_threads: u32,
    pub forward_bv: usize,
    pub scan_fwd: usize,
    pub chunk_fwd: usize,
    pub backward_bv: usize,
    pub scan_bwd: usize,
    pub grads: usize,
    pub lean_grads: bool,
}

/// The sizes for a shape of `dtype` under `shared_limit` bytes a block.
pub fn sizes(s: RecurrentShape, dtype: DType, shared_limit: usize) -> Result<Sizes, CudaError> {
    let args = RecArgs::new("mlstm", s, dtype, 0.0)?;
    let e = dtype.size_bytes();
    let fwd = args.fit_within(shared_limit, dtype, forward_bytes(s, e));
    let bwd = args.fit_within(shared_limit, dtype, backward_bytes(s, e));
    Ok(Sizes {
        threads: block_threads(s),
        gate_threads: GATE_THREADS,
        forward_bv: fwd.bv(),
        scan_fwd: scan_fwd_bytes(s, &fwd, e),
        chunk_fwd: chunk_fwd_bytes(s, &fwd, e),
        backward_bv: bwd.bv(),
        scan_bwd: scan_bwd_bytes(s, &bwd, e),
        grads: grads_bytes(s, &bwd, e, lean_grads(s)),
        lean_grads: lean_grads(s),
    })
}

/// One block of `block_threads` per (batch, head, value tile), `bytes` of shared memory.
fn scan_launch(
    op: &'static str,
    dev: &CudaDevice,
    s: RecurrentShape,
    args: &RecArgs,
    bytes: usize,
) -> Result<Launch, CudaError> {
    let mut l = head_launch(op, dev, s, args, bytes)?;
    l.block.0 = block_threads(s);
    Ok(l)
}

/// Threads of an `mlstm_gate_rows_bwd` block (`GATE_ROW_THREADS` in mlstm.cu), a warp per chunk.
const GATE_ROW_THREADS: u32 = 256;

/// `walks` warps of `mlstm_gate_rows_bwd`, in blocks of `GATE_ROW_THREADS`.
fn gate_row_launch(op: &'static str, walks: usize) -> Result<Launch, CudaError> {
    let per_block = (GATE_ROW_THREADS / 32) as usize;
    Ok(Launch {
        grid: (
            to_u32(op, "gate-row blocks", walks.div_ceil(per_block))?,
            1,
            1,
        ),
        block: (GATE_ROW_THREADS, 1, 1),
        shared: 0,
    })
}

/// One block of `block_threads` per (batch, head, value tile, chunk) (`blockIdx.z` the chunk),
/// `bytes` of shared memory.
fn chunk_launch(
    op: &'static str,
    dev: &CudaDevice,
    s: RecurrentShape,
    args: &RecArgs,
    bytes: usize,
) -> Result<Launch, CudaError> {
    let nc = s.chunks();
    if nc > MAX_GRID_Z {
        return Err(CudaError::invalid(
            op,
            format!(
                "T = {} makes {nc} chunks of {}, more than the {MAX_GRID_Z} a grid takes",
                s.t, s.chunk
            ),
        ));
    }
    let mut l = scan_launch(op, dev, s, args, bytes)?;
    l.grid.2 = nc as u32;
    Ok(l)
}

/// The chunkwise forward from the state `x.state` (of the inputs' dtype).
pub(super) fn forward(
    x: &MlstmIn<&Buffer>,
    s: RecurrentShape,
    eps: f32,
) -> Result<MlstmOut<CudaStorage>, CudaError> {
    const OP: &str = "mlstm_forward";
    let dev = x.q.device();
    let (args, dt) = check(OP, x, s, eps)?;
    let e = dt.size_bytes();
    let args = args.fit(dev, dt, forward_bytes(s, e));
    let h = dev.alloc(dt, s.rows(s.dv))?;
    let c = dev.alloc(DType::F32, s.boundaries(s.dk * s.dv))?;
    let n = dev.alloc(DType::F32, s.boundaries(s.dk))?;
    let m = dev.alloc(DType::F32, s.boundaries(1))?;
    let den = dev.alloc(DType::F32, s.rows(2))?;
    let rows = dev.alloc(DType::F32, s.rows(4))?;
    let scan = scan_launch(OP, dev, s, &args, scan_fwd_bytes(s, &args, e))?;
    let chunks = chunk_launch(OP, dev, s, &args, chunk_fwd_bytes(s, &args, e))?;
    let s0 = &x.state;
    // SAFETY: mlstm_scan_fwd_T(k, v, i, f, c0, n0, m0, cs, ns, ms, rows, RecDims), then
    // mlstm_chunk_fwd_T(q, k, v, rows, cs, ns, ms, h, den, RecDims): every buffer was checked (or
    // allocated) at the length the sizes in `args` imply (rows f32 [4, B·H, T]), and each
    // launch's shared memory is what its kernel carves for those sizes.
    unsafe {
        let name = float_kernel!(OP, "mlstm_scan_fwd", dt)?;
        launch(
            dev,
            &SOURCE,
            name,
            scan,
            &[
                x.k, x.v, x.i, x.f, s0.c, s0.n, s0.m, &c, &n, &m, &rows, &args,
            ],
        )?;
        let name = float_kernel!(OP, "mlstm_chunk_fwd", dt)?;
        launch(
            dev,
            &SOURCE,
            name,
            chunks,
            &[x.q, x.k, x.v, &rows, &c, &n, &m, &h, &den, &args],
        )?;
    }
    Ok(MlstmOut {
        h: h.into(),
        boundary: MlstmState {
            c: c.into(),
            n: n.into(),
            m: m.into(),
        },
        den: den.into(),
    })
}

/// The gradients (the inputs' dtype) given the inputs, the forward's boundary states and h, the
/// gradient dh of h and that of the final state.
pub(super) fn backward(
    x: &MlstmBackward<&Buffer>,
    s: RecurrentShape,
    eps: f32,
) -> Result<MlstmGrads<CudaStorage>, CudaError> {
    const OP: &str = "mlstm_backward";
    let dev = x.input.q.device();
    let (args, dt) = check(OP, &x.input, s, eps)?;
    check(
        OP,
        &MlstmIn {
            state: x.d_final.clone(),
            ..x.input.clone()
        },
        s,
        eps,
    )?;
    let e = dt.size_bytes();
    let args = args.fit(dev, dt, backward_bytes(s, e));
    let f32 = DType::F32;
    let (states, ds) = (&x.out.boundary, &x.d_final);
    check_operands(
        OP,
        dev,
        &[
            ("c", states.c, f32, s.boundaries(s.dk * s.dv)),
            ("n", states.n, f32, s.boundaries(s.dk)),
            ("m", states.m, f32, s.boundaries(1)),
            ("den", x.out.den, f32, s.rows(2)),
            ("h", x.out.h, dt, s.rows(s.dv)),
            ("dh", x.dh, dt, s.rows(s.dv)),
        ],
    )?;
    let (rk, rv, r1, nh, nc, nv) = (
        s.rows(s.dk),
        s.rows(s.dv),
        s.rows(1),
        s.heads(),
        s.chunks(),
        args.nv(),
    );
    let alloc = |n: usize| dev.alloc(dt, n);
    let g = MlstmIn {
        q: alloc(rk)?,
        k: alloc(rk)?,
        v: alloc(rv)?,
        i: alloc(r1)?,
        f: alloc(r1)?,
        state: MlstmState {
            c: alloc(nh * s.dk * s.dv)?,
            n: alloc(nh * s.dk)?,
            m: alloc(nh)?,
        },
    };
    // f32 scratch: the gate rows [4, B·H, T] (mlstm_gate_rows_bwd), the rows' statistics
    // [4, B·H, T] (mlstm_prep_bwd), the state gradients at each chunk's end [B·H, N, ..], the
    // states' dots with their gradients [B·H, nv, 2], the tiles' shares of the gates
    // [nv, 2, B·H, T], and with several tiles their shares of dq, dk.
    let gate_rows = dev.alloc(f32, 4 * r1)?;
    let rows = dev.alloc(f32, 4 * r1)?;
    let dcs = dev.alloc(f32, nh * nc * s.dk * s.dv)?;
    let dns = dev.alloc(f32, nh * nc * s.dk)?;
    let dots = dev.alloc(f32, nh * nv * 2)?;
    let gates = dev.alloc(f32, nv * 2 * r1)?;
    let shares = tile_shares(dev, &args, 2 * rk)?;
    // With one tile mlstm_grads never touches `part`: dq stands in.
    let part = shares.as_ref().unwrap_or(&g.q);
    let walk = gate_row_launch(OP, nh * nc)?;
    let mut prep = chunk_launch(OP, dev, s, &args, 0)?;
    prep.grid.1 = 1;
    let scan = scan_launch(OP, dev, s, &args, scan_bwd_bytes(s, &args, e))?;
    let lean = lean_grads(s);
    let chunks = chunk_launch(OP, dev, s, &args, grads_bytes(s, &args, e, lean))?;
    let heads = Launch {
        grid: (to_u32(OP, "B*H", nh)?, 1, 1),
        block: (GATE_THREADS, 1, 1),
        shared: 0,
    };
    let xi = &x.input;
    // SAFETY: each kernel's operands in the order of its signature in mlstm.cu: the inputs were
    // checked and the outputs and scratch allocated at the lengths the sizes in `args` imply
    // (the comment above says each scratch's shape), and each launch's shared memory is what its
    // kernel carves for those sizes.
    unsafe {
        let name = float_kernel!(OP, "mlstm_gate_rows_bwd", dt)?;
        launch(
            dev,
            &SOURCE,
            name,
            walk,
            &[xi.i, xi.f, states.m, &gate_rows, &args],
        )?;
        let name = float_kernel!(OP, "mlstm_prep_bwd", dt)?;
        launch(
            dev,
            &SOURCE,
            name,
            prep,
            &[xi.i, xi.f, states.m, x.out.den, x.out.h, x.dh, &rows, &args],
        )?;
        let name = float_kernel!(OP, "mlstm_scan_bwd", dt)?;
        launch(
            dev,
            &SOURCE,
            name,
            scan,
            &[
                xi.q, &gate_rows, states.c, states.n, states.m, &rows, x.dh, ds.c, ds.n, &dcs,
                &dns, &g.state.c, &g.state.n, &dots, &args,
            ],
        )?;
        let name = if lean {
            float_kernel!(OP, "mlstm_grads_lean", dt)?
        } else {
            float_kernel!(OP, "mlstm_grads", dt)?
        };
        launch(
            dev,
            &SOURCE,
            name,
            chunks,
            &[
                xi.q, xi.k, xi.v, &gate_rows, states.c, states.n, states.m, &rows, x.dh, &dcs,
                &dns, &g.q, &g.k, &g.v, &gates, part, &args,
            ],
        )?;
        let name = float_kernel!(OP, "mlstm_gates", dt)?;
        launch(
            dev,
            &SOURCE,
            name,
            heads,
            &[
                xi.f, &rows, &gates, &dots, ds.m, &g.i, &g.f, &g.state.m, &args,
            ],
        )?;
    }
    if let Some(shares) = &shares {
        for (out, off) in [(&g.q, 0), (&g.k, rk)] {
            sum_tiles(dev, &SOURCE, shares, off, 2 * rk, &args, out)?;
        }
    }
    Ok(MlstmIn {
        q: g.q.into(),
        k: g.k.into(),
        v: g.v.into(),
        i: g.i.into(),
        f: g.f.into(),
        state: MlstmState {
            c: g.state.c.into(),
            n: g.state.n.into(),
            m: g.state.m.into(),
        },
    })
}
