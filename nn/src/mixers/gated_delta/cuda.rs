//! The gated delta rule's chunkwise kernel on CUDA, forward and backward, on one of two kernel
//! families: bf16 at chunk 64 and the head sizes it takes, the chunk-parallel kernels of
//! `cuda_parallel.rs` (its `Plan`); anything else (f32, other chunks and sizes) `gated_delta.cu`
//! (after swax-cuda's `mma.cuh` and `chunk.cuh`, and `gated_delta.cuh`), one block per (batch,
//! head, value tile) walking its chunks, f32 data multiplied in f32 and bf16 data on tensor cores
//! (bf16 shared tiles through ldmatrix).
use super::cuda_parallel::Plan;
use super::{GatedDeltaBackward, GatedDeltaGrads, GatedDeltaIn, GatedDeltaOut};
use swax_cuda::kernels::chunk::{
    check_operands, head_launch, sum_tiles, tile_ld, tile_shares, RecArgs, RecurrentShape,
    CHUNK_THREADS,
};
use swax_cuda::kernels::{float_kernel, launch, CHUNK_CUH, MMA_CUH};
use swax_cuda::{Buffer, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "gated_delta",
    source: &[
        MMA_CUH,
        CHUNK_CUH,
        include_str!("gated_delta.cuh"),
        include_str!("gated_delta.cu"),
    ],
};

/// Checks the inputs q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, beta, g `[B, T, H]` and the state
/// (or state gradient) `[B, H, Dk, Dv]` of one dtype (f32 or bf16); returns the kernels' sizes and
/// that dtype.
fn check(
    op: &'static str,
    x: &GatedDeltaIn<&Buffer>,
    s: RecurrentShape,
) -> Result<(RecArgs, DType), CudaError> {
    let (dev, dt) = (x.q.device(), x.q.dtype());
    let args = RecArgs::new(op, s, dt, 0.0)?;
    check_operands(
        op,
        dev,
        &[
            ("q", x.q, dt, s.rows(s.dk)),
            ("k", x.k, dt, s.rows(s.dk)),
            ("v", x.v, dt, s.rows(s.dv)),
            ("beta", x.beta, dt, s.rows(1)),
            ("g", x.g, dt, s.rows(1)),
            ("state", x.state, dt, s.heads() * s.dk * s.dv),
        ],
    )?;
    Ok((args, dt))
}

/// Shared-memory bytes (`carve_tiles` in gated_delta.cu): f32 regions (a `[lp, bv]` tile, the
/// `[lp, lp]` inverse, the inversion scratch `[lp, max(16, lp / 4)]`, 6 + `vectors` per-row
/// vectors), then tiles of the data's type: `row_tiles` row tiles (`[lp, max(Dk, bv)]`,
/// `[lp, Dk]`, the rest `[lp, bv]`), one `[lp, lp]` tile and `state_tiles` state tiles
/// (`[Dk, bv]`, a second `[max(Dk, lp), bv]`); every row padded by 16 bytes.
fn shared_bytes(
    s: RecurrentShape,
    args: &RecArgs,
    dt: DType,
    row_tiles: usize,
    state_tiles: usize,
    vectors: usize,
) -> usize {
    let lp = s.chunk.next_multiple_of(16);
    let e = dt.size_bytes();
    let f32s = lp * tile_ld(args.bv(), 4)
        + lp * tile_ld(lp, 4)
        + lp * (lp / 4).max(16)
        + (6 + vectors) * lp;
    let elems = lp
        * (tile_ld(s.dk.max(args.bv()), e)
            + tile_ld(s.dk, e)
            + (row_tiles - 2) * tile_ld(args.bv(), e))
        + lp * tile_ld(lp, e)
        + (s.dk + (state_tiles - 1) * s.dk.max(lp)) * tile_ld(args.bv(), e);
    4 * f32s + e * elems
}

/// The forward's shared memory: five row tiles, one state tile, no extra vectors.
fn forward_bytes(s: RecurrentShape, args: &RecArgs, dt: DType) -> usize {
    shared_bytes(s, args, dt, 5, 1, 0)
}

/// The backward's: five row tiles, two state tiles, seven more per-row vectors.
fn backward_bytes(s: RecurrentShape, args: &RecArgs, dt: DType) -> usize {
    shared_bytes(s, args, dt, 5, 2, 7)
}

/// What the one-block-per-head kernels launch with all of Dv in one value tile: threads a
/// block and the forward's and backward's shared memory in bytes. Public so that the kernels'
/// CPU emulation (tests/tests/emulated_kernels.rs) launches them as the wrappers do.
pub fn one_tile_sizes(s: RecurrentShape, dtype: DType) -> Result<(u32, usize, usize), CudaError> {
    let args = RecArgs::new("gated_delta", s, dtype, 0.0)?;
    Ok((
        CHUNK_THREADS,
        forward_bytes(s, &args, dtype),
        backward_bytes(s, &args, dtype),
    ))
}

/// The chunkwise forward from the state `x.state` (of the inputs' dtype): o of the inputs' dtype
/// and the f32 boundary states `[B, H, N + 1, Dk, Dv]`.
pub(super) fn forward(
    x: &GatedDeltaIn<&Buffer>,
    s: RecurrentShape,
) -> Result<GatedDeltaOut<CudaStorage>, CudaError> {
    const OP: &str = "gated_delta_forward";
    let dev = x.q.device();
    let (args, dt) = check(OP, x, s)?;
    let y = match Plan::new(dev, s, dt, args) {
        Some(plan) => plan.forward(dev, x, s)?,
        None => {
            let bytes = |a: &RecArgs| forward_bytes(s, a, dt);
            let args = args.fit(dev, dt, bytes);
            let out = dev.alloc(dt, s.rows(s.dv))?;
            let states = dev.alloc(DType::F32, s.boundaries(s.dk * s.dv))?;
            let name = float_kernel!(OP, "gated_delta_forward", dt)?;
            let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
            // SAFETY: gated_delta_forward_T(q, k, v, beta, g, s0, out, states, RecDims); every
            // buffer was checked (or allocated) at the length the sizes in `args` imply, and the
            // shared memory asked for is what the kernel carves for those sizes.
            unsafe {
                launch(
                    dev,
                    &SOURCE,
                    name,
                    cfg,
                    &[x.q, x.k, x.v, x.beta, x.g, x.state, &out, &states, &args],
                )?;
            }
            GatedDeltaOut {
                o: out,
                boundary: states,
            }
        }
    };
    Ok(GatedDeltaOut {
        o: y.o.into(),
        boundary: y.boundary.into(),
    })
}

/// The gradients (the inputs' dtype; dq, dk with respect to the raw q, k) given the inputs, the
/// forward's f32 boundary states, the gradient of the output and that of the final state.
pub(super) fn backward(
    x: &GatedDeltaBackward<&Buffer>,
    s: RecurrentShape,
) -> Result<GatedDeltaGrads<CudaStorage>, CudaError> {
    const OP: &str = "gated_delta_backward";
    let xi = &x.input;
    let dev = xi.q.device();
    let (args, dt) = check(OP, xi, s)?;
    check(
        OP,
        &GatedDeltaIn {
            state: x.d_final,
            ..xi.clone()
        },
        s,
    )?;
    let (states, dout, ds) = (x.boundary, x.d_out, x.d_final);
    check_operands(
        OP,
        dev,
        &[
            ("states", states, DType::F32, s.boundaries(s.dk * s.dv)),
            ("dout", dout, dt, s.rows(s.dv)),
        ],
    )?;
    let g = match Plan::new(dev, s, dt, args) {
        Some(plan) => plan.backward(dev, x, s)?,
        None => {
            let bytes = |a: &RecArgs| backward_bytes(s, a, dt);
            let args = args.fit(dev, dt, bytes);
            let (rk, r1) = (s.rows(s.dk), s.rows(1));
            let alloc = |n: usize| dev.alloc(dt, n);
            let g = GatedDeltaIn {
                q: alloc(rk)?,
                k: alloc(rk)?,
                v: alloc(s.rows(s.dv))?,
                beta: alloc(r1)?,
                g: alloc(r1)?,
                state: alloc(s.heads() * s.dk * s.dv)?,
            };
            // Per head: dS [Dk, Dv], and per value tile the chunk's dq and dk [lp, Dk], all f32.
            let lp = s.chunk.next_multiple_of(16);
            let scratch = dev.alloc(
                DType::F32,
                s.heads() * (s.dk * s.dv + args.nv() * 2 * lp * s.dk),
            )?;
            // The value tiles' shares of dq, dk, dbeta and dg, in that order, per tile: their
            // offsets in a tile's row of `stride`.
            let shared = [
                (&g.q, 0),
                (&g.k, rk),
                (&g.beta, 2 * rk),
                (&g.g, 2 * rk + r1),
            ];
            let stride = 2 * rk + 2 * r1;
            let shares = tile_shares(dev, &args, stride)?;
            let name = float_kernel!(OP, "gated_delta_backward", dt)?;
            let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
            // With one tile the kernel never touches `part`: dq stands in.
            let part = shares.as_ref().unwrap_or(&g.q);
            // SAFETY: gated_delta_backward_T(q, k, v, beta, g, states, dout, ds, dq, dk, dv,
            // dbeta, dg, ds0, scratch, part, RecDims); inputs checked and outputs allocated at
            // the lengths the sizes imply, the scratch holds what the kernel carves per head,
            // `part` the tiles' shares [nv, stride] where there are several, and the shared
            // memory asked for is what the kernel carves.
            unsafe {
                launch(
                    dev,
                    &SOURCE,
                    name,
                    cfg,
                    &[
                        xi.q, xi.k, xi.v, xi.beta, xi.g, states, dout, ds, &g.q, &g.k, &g.v,
                        &g.beta, &g.g, &g.state, &scratch, part, &args,
                    ],
                )?;
            }
            if let Some(shares) = &shares {
                for (out, off) in shared {
                    sum_tiles(dev, &SOURCE, shares, off, stride, &args, out)?;
                }
            }
            g
        }
    };
    Ok(GatedDeltaIn {
        q: g.q.into(),
        k: g.k.into(),
        v: g.v.into(),
        beta: g.beta.into(),
        g: g.g.into(),
        state: g.state.into(),
    })
}
