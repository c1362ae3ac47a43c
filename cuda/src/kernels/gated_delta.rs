//! The gated delta rule's chunkwise forward and backward, on one of two kernel families: bf16 at
//! chunk 64 and the head sizes it takes, the chunk-parallel kernels of `gated_delta_parallel`
//! (its `Plan`); anything else (f32, other chunks and sizes) `kernels/gated_delta.cu` (after
//! `kernels/mma.cuh`, `kernels/chunk.cuh` and `kernels/gated_delta.cuh`), one block per (batch,
//! head, value tile) walking its chunks, f32 data multiplied in f32 and bf16 data on tensor cores
//! (bf16 shared tiles through ldmatrix).

use super::chunk::{
    check_operands, head_launch, sum_tiles, tile_ld, tile_shares, RecArgs, RecurrentShape,
    CHUNK_THREADS,
};
use super::gated_delta_parallel::Plan;
use super::{float_kernel, launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, DType, Device};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "gated_delta",
    source: concat!(
        include_str!("../../kernels/mma.cuh"),
        include_str!("../../kernels/chunk.cuh"),
        include_str!("../../kernels/gated_delta.cuh"),
        include_str!("../../kernels/gated_delta.cu")
    ),
};

/// q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, beta and the log decay g `[B, T, H]`, of one dtype
/// (f32 or bf16).
pub struct GatedDeltaInputs<'a> {
    pub q: &'a Buffer,
    pub k: &'a Buffer,
    pub v: &'a Buffer,
    pub beta: &'a Buffer,
    pub g: &'a Buffer,
}

impl GatedDeltaInputs<'_> {
    fn buffers(&self) -> [&Buffer; 5] {
        [self.q, self.k, self.v, self.beta, self.g]
    }

    fn check(
        &self,
        op: &'static str,
        dev: &Device,
        s: RecurrentShape,
    ) -> Result<(RecArgs, DType), CudaError> {
        let dt = self.q.dtype();
        let args = RecArgs::new(op, s, dt, 0.0)?;
        check_operands(
            op,
            dev,
            &[
                ("q", self.q, dt, s.rows(s.dk)),
                ("k", self.k, dt, s.rows(s.dk)),
                ("v", self.v, dt, s.rows(s.dv)),
                ("beta", self.beta, dt, s.rows(1)),
                ("g", self.g, dt, s.rows(1)),
            ],
        )?;
        Ok((args, dt))
    }
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

/// The chunkwise forward from the state `s0` `[B, H, Dk, Dv]` (of the inputs' dtype); see
/// `Backend::gated_delta_forward` in swax-tensor for the equations. Returns o `[B, T, H, Dv]`
/// of the inputs' dtype and the f32 boundary states `[B, H, N + 1, Dk, Dv]`.
pub fn gated_delta_forward(
    dev: &Device,
    x: &GatedDeltaInputs,
    s0: &Buffer,
    s: RecurrentShape,
) -> Result<(Buffer, Buffer), CudaError> {
    const OP: &str = "gated_delta_forward";
    let (args, dt) = x.check(OP, dev, s)?;
    check_operands(OP, dev, &[("s0", s0, dt, s.heads() * s.dk * s.dv)])?;
    if let Some(plan) = Plan::new(dev, s, dt, args) {
        return plan.forward(dev, &x.buffers(), s0, s);
    }
    let bytes = |a: &RecArgs| forward_bytes(s, a, dt);
    let args = args.fit(dev, dt, bytes);
    let out = dev.alloc(dt, s.rows(s.dv))?;
    let states = dev.alloc(DType::F32, s.boundaries(s.dk * s.dv))?;
    let name = float_kernel!(OP, "gated_delta_forward", dt)?;
    let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
    // SAFETY: gated_delta_forward_T(q, k, v, beta, g, s0, out, states, RecDims); every buffer was
    // checked (or allocated) at the length the sizes in `args` imply, and the shared memory
    // asked for is what the kernel carves for those sizes.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[x.q, x.k, x.v, x.beta, x.g, s0, &out, &states, &args],
        )?;
    }
    Ok((out, states))
}

/// The gradients `[dq, dk, dv, dbeta, dg, ds0]` (the inputs' dtype; dq, dk with respect to the
/// raw q, k) given the inputs, the forward's f32 boundary states, the gradient `dout` of the
/// output and `ds` `[B, H, Dk, Dv]` of the final state.
pub fn gated_delta_backward(
    dev: &Device,
    x: &GatedDeltaInputs,
    states: &Buffer,
    dout: &Buffer,
    ds: &Buffer,
    s: RecurrentShape,
) -> Result<Vec<Buffer>, CudaError> {
    const OP: &str = "gated_delta_backward";
    let (args, dt) = x.check(OP, dev, s)?;
    let ssz = s.heads() * s.dk * s.dv;
    check_operands(
        OP,
        dev,
        &[
            ("states", states, DType::F32, s.boundaries(s.dk * s.dv)),
            ("dout", dout, dt, s.rows(s.dv)),
            ("ds", ds, dt, ssz),
        ],
    )?;
    if let Some(plan) = Plan::new(dev, s, dt, args) {
        return plan.backward(dev, &x.buffers(), states, dout, ds, s);
    }
    let bytes = |a: &RecArgs| backward_bytes(s, a, dt);
    let args = args.fit(dev, dt, bytes);
    let sizes = [
        s.rows(s.dk),
        s.rows(s.dk),
        s.rows(s.dv),
        s.rows(1),
        s.rows(1),
        ssz,
    ];
    let g = sizes
        .iter()
        .map(|&n| dev.alloc(dt, n))
        .collect::<Result<Vec<_>, _>>()?;
    // Per head: dS [Dk, Dv], and per value tile the chunk's dq and dk [lp, Dk], all f32.
    let lp = s.chunk.next_multiple_of(16);
    let scratch = dev.alloc(
        DType::F32,
        s.heads() * (s.dk * s.dv + args.nv() * 2 * lp * s.dk),
    )?;
    // The value tiles' shares of dq, dk, dbeta and dg (g[0, 1, 3, 4]), in that order, per tile.
    let (rk, r1) = (s.rows(s.dk), s.rows(1));
    let stride = 2 * rk + 2 * r1;
    let shares = tile_shares(dev, &args, stride)?;
    let name = float_kernel!(OP, "gated_delta_backward", dt)?;
    let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
    // With one tile the kernel never touches `part`: dq stands in.
    let part = shares.as_ref().unwrap_or(&g[0]);
    // SAFETY: gated_delta_backward_T(q, k, v, beta, g, states, dout, ds, dq, dk, dv, dbeta, dg,
    // ds0, scratch, part, RecDims); inputs checked and outputs allocated at the lengths the
    // sizes imply, the scratch holds what the kernel carves per head, `part` the tiles' shares
    // [nv, stride] where there are several, and the shared memory asked for is what the kernel
    // carves.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x.q, x.k, x.v, x.beta, x.g, states, dout, ds, &g[0], &g[1], &g[2], &g[3], &g[4],
                &g[5], &scratch, part, &args,
            ],
        )?;
    }
    if let Some(shares) = &shares {
        for (i, off) in [(0, 0), (1, rk), (3, 2 * rk), (4, 2 * rk + r1)] {
            sum_tiles(dev, &SOURCE, shares, off, stride, &args, &g[i])?;
        }
    }
    Ok(g)
}
