//! The mLSTM's chunkwise forward and backward (`kernels/mlstm.cu`, after `kernels/mma.cuh` and
//! `kernels/chunk.cuh`): one block per (batch, head, value tile); f32 data is multiplied in f32,
//! bf16 data on tensor cores.

use super::chunk::{
    check_operands, head_launch, sum_tiles, tile_ld, tile_shares, RecArgs, RecurrentShape,
};
use super::{float_kernel, launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, DType, Device};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "mlstm",
    source: concat!(
        include_str!("../../kernels/mma.cuh"),
        include_str!("../../kernels/chunk.cuh"),
        include_str!("../../kernels/mlstm.cu")
    ),
};

/// q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]` and the gate preactivations i, f `[B, T, H]`, of one
/// dtype (f32 or bf16).
pub struct MlstmInputs<'a> {
    pub q: &'a Buffer,
    pub k: &'a Buffer,
    pub v: &'a Buffer,
    pub i: &'a Buffer,
    pub f: &'a Buffer,
}

/// A state `(C [B, H, Dk, Dv], n [B, H, Dk], m [B, H])`, or the boundary states
/// `[B, H, N + 1, ..]` (always f32), or their gradients.
pub struct MlstmState<'a> {
    pub c: &'a Buffer,
    pub n: &'a Buffer,
    pub m: &'a Buffer,
}

/// What the forward returns: h `[B, T, H, Dv]` of the inputs' dtype and the f32 boundary
/// states c `[B, H, N + 1, Dk, Dv]`, n `[B, H, N + 1, Dk]`, m `[B, H, N + 1]`.
pub struct MlstmForward {
    pub h: Buffer,
    pub c: Buffer,
    pub n: Buffer,
    pub m: Buffer,
}

impl MlstmInputs<'_> {
    fn check(
        &self,
        op: &'static str,
        dev: &Device,
        s: RecurrentShape,
        eps: f32,
    ) -> Result<(RecArgs, DType), CudaError> {
        let dt = self.q.dtype();
        let args = RecArgs::new(op, s, dt, eps)?;
        check_operands(
            op,
            dev,
            &[
                ("q", self.q, dt, s.rows(s.dk)),
                ("k", self.k, dt, s.rows(s.dk)),
                ("v", self.v, dt, s.rows(s.dv)),
                ("i", self.i, dt, s.rows(1)),
                ("f", self.f, dt, s.rows(1)),
            ],
        )?;
        Ok((args, dt))
    }
}

/// Shared-memory bytes of the forward (`mlstm_forward` in mlstm.cu): f32 the state C and the
/// output's sum tile (`[Dk, bv]`, `[lp, bv]`), n and the per-row vectors; then tiles of the data's
/// type: q, k `[lp, Dk]`, v `[lp, bv]`, C rounded `[Dk, bv]`, the scores `[lp, lp]`.
fn forward_bytes(s: RecurrentShape, args: &RecArgs, dt: DType) -> usize {
    let (lp, e, bv) = (s.chunk.next_multiple_of(16), dt.size_bytes(), args.bv());
    let f32s = (s.dk + lp) * tile_ld(bv, 4) + s.dk.next_multiple_of(16) + 8 * lp;
    let elems = 2 * lp * tile_ld(s.dk, e) + (lp + s.dk) * tile_ld(bv, e) + lp * tile_ld(lp, e);
    4 * f32s + e * elems
}

/// Shared-memory bytes of the backward (`mlstm_backward` in mlstm.cu): f32 an accumulator tile
/// `[lp, max(Dk, bv)]`, dn and n, the per-row vectors; then tiles of the data's type: q, k
/// `[lp, Dk]`, v, dnum `[lp, bv]`, the scores and their gradient `[lp, lp]`, dC and C_prev rounded
/// `[Dk, bv]`.
fn backward_bytes(s: RecurrentShape, args: &RecArgs, dt: DType) -> usize {
    let (lp, e, bv) = (s.chunk.next_multiple_of(16), dt.size_bytes(), args.bv());
    let f32s = lp * tile_ld(s.dk.max(bv), 4) + 2 * s.dk.next_multiple_of(16) + 13 * lp;
    let elems =
        2 * lp * tile_ld(s.dk, e) + 2 * (lp + s.dk) * tile_ld(bv, e) + 2 * lp * tile_ld(lp, e);
    4 * f32s + e * elems
}

/// The chunkwise forward from the state `s0` (of the inputs' dtype); see
/// `Backend::mlstm_chunk_forward` in swax-tensor for the equations.
pub fn mlstm_forward(
    dev: &Device,
    x: &MlstmInputs,
    s0: &MlstmState,
    s: RecurrentShape,
    eps: f32,
) -> Result<MlstmForward, CudaError> {
    const OP: &str = "mlstm_forward";
    let (args, dt) = x.check(OP, dev, s, eps)?;
    let bytes = |a: &RecArgs| forward_bytes(s, a, dt);
    let args = args.fit(dev, dt, bytes);
    check_operands(
        OP,
        dev,
        &[
            ("c0", s0.c, dt, s.heads() * s.dk * s.dv),
            ("n0", s0.n, dt, s.heads() * s.dk),
            ("m0", s0.m, dt, s.heads()),
        ],
    )?;
    let out = MlstmForward {
        h: dev.alloc(dt, s.rows(s.dv))?,
        c: dev.alloc(DType::F32, s.boundaries(s.dk * s.dv))?,
        n: dev.alloc(DType::F32, s.boundaries(s.dk))?,
        m: dev.alloc(DType::F32, s.boundaries(1))?,
    };
    let name = float_kernel!(OP, "mlstm_forward", dt)?;
    let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
    // SAFETY: mlstm_forward_T(q, k, v, i, f, c0, n0, m0, h, cs, ns, ms, RecDims); every buffer
    // was checked (or allocated) at the length the sizes in `args` imply, and the shared memory
    // asked for is what the kernel carves for those sizes.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x.q, x.k, x.v, x.i, x.f, s0.c, s0.n, s0.m, &out.h, &out.c, &out.n, &out.m, &args,
            ],
        )?;
    }
    Ok(out)
}

/// The gradients `[dq, dk, dv, di, df, dc0, dn0, dm0]` (the inputs' dtype) given the inputs, the
/// forward's boundary states and h, the gradient dh of h and `ds` of the final state.
#[allow(clippy::too_many_arguments)]
pub fn mlstm_backward(
    dev: &Device,
    x: &MlstmInputs,
    states: &MlstmState,
    h: &Buffer,
    dh: &Buffer,
    ds: &MlstmState,
    s: RecurrentShape,
    eps: f32,
) -> Result<Vec<Buffer>, CudaError> {
    const OP: &str = "mlstm_backward";
    let (args, dt) = x.check(OP, dev, s, eps)?;
    let bytes = |a: &RecArgs| backward_bytes(s, a, dt);
    let args = args.fit(dev, dt, bytes);
    let f32 = DType::F32;
    check_operands(
        OP,
        dev,
        &[
            ("c", states.c, f32, s.boundaries(s.dk * s.dv)),
            ("n", states.n, f32, s.boundaries(s.dk)),
            ("m", states.m, f32, s.boundaries(1)),
            ("h", h, dt, s.rows(s.dv)),
            ("dh", dh, dt, s.rows(s.dv)),
            ("dc", ds.c, dt, s.heads() * s.dk * s.dv),
            ("dn", ds.n, dt, s.heads() * s.dk),
            ("dm", ds.m, dt, s.heads()),
        ],
    )?;
    let sizes = [
        s.rows(s.dk),
        s.rows(s.dk),
        s.rows(s.dv),
        s.rows(1),
        s.rows(1),
        s.heads() * s.dk * s.dv,
        s.heads() * s.dk,
        s.heads(),
    ];
    let g = sizes
        .iter()
        .map(|&n| dev.alloc(dt, n))
        .collect::<Result<Vec<_>, _>>()?;
    let scratch = dev.alloc(f32, s.heads() * s.dk * s.dv)?;
    // The value tiles' shares of dq, dk, di, df, dn0 and dm0 (g[0, 1, 3, 4, 6, 7]), in that
    // order, per tile (mlstm.cu).
    let (rk, r1, nh) = (s.rows(s.dk), s.rows(1), s.heads());
    let shared = [0, 1, 3, 4, 6, 7];
    let offsets = [
        0,
        rk,
        2 * rk,
        2 * rk + r1,
        2 * rk + 2 * r1,
        2 * rk + 2 * r1 + nh * s.dk,
    ];
    let stride = 2 * rk + 2 * r1 + nh * (s.dk + 1);
    let shares = tile_shares(dev, &args, stride)?;
    let name = float_kernel!(OP, "mlstm_backward", dt)?;
    let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
    // With one tile the kernel never touches `part`: dq stands in.
    let part = shares.as_ref().unwrap_or(&g[0]);
    // SAFETY: mlstm_backward_T(q, k, v, i, f, cs, ns, ms, h, dh, dc, dn, dm, dq, dk, dv, di, df,
    // dc0, dn0, dm0, dcs, part, RecDims); inputs checked and outputs allocated at the lengths
    // the sizes imply, the scratch holds one f32 [Dk, Dv] per head, `part` the tiles' shares
    // [nv, stride] where there are several, and the shared memory asked for is what the kernel
    // carves.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x.q, x.k, x.v, x.i, x.f, states.c, states.n, states.m, h, dh, ds.c, ds.n, ds.m,
                &g[0], &g[1], &g[2], &g[3], &g[4], &g[5], &g[6], &g[7], &scratch, part, &args,
            ],
        )?;
    }
    if let Some(shares) = &shares {
        for (&i, &off) in shared.iter().zip(&offsets) {
            sum_tiles(dev, &SOURCE, shares, off, stride, &args, &g[i])?;
        }
    }
    Ok(g)
}
