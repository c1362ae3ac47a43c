//! The mLSTM's chunkwise kernel on CUDA, forward and backward (`mlstm.cu`, after swax-cuda's
//! `kernels/mma.cuh` and `kernels/chunk.cuh`): one block per (batch, head, value tile); f32 data
//! is multiplied in f32, bf16 data on tensor cores.
use super::{MlstmBackward, MlstmGrads, MlstmIn, MlstmOut, MlstmState};
use swax_cuda::kernels::chunk::{
    check_operands, head_launch, sum_tiles, tile_ld, tile_shares, RecArgs, RecurrentShape,
};
use swax_cuda::kernels::{float_kernel, launch, CHUNK_CUH, MMA_CUH};
use swax_cuda::{Buffer, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "mlstm",
    source: &[MMA_CUH, CHUNK_CUH, include_str!("mlstm.cu")],
};

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

/// The chunkwise forward from the state `x.state` (of the inputs' dtype).
pub(super) fn forward(
    x: &MlstmIn<&Buffer>,
    s: RecurrentShape,
    eps: f32,
) -> Result<MlstmOut<CudaStorage>, CudaError> {
    const OP: &str = "mlstm_forward";
    let dev = x.q.device();
    let (args, dt) = check(OP, x, s, eps)?;
    let bytes = |a: &RecArgs| forward_bytes(s, a, dt);
    let args = args.fit(dev, dt, bytes);
    let h = dev.alloc(dt, s.rows(s.dv))?;
    let c = dev.alloc(DType::F32, s.boundaries(s.dk * s.dv))?;
    let n = dev.alloc(DType::F32, s.boundaries(s.dk))?;
    let m = dev.alloc(DType::F32, s.boundaries(1))?;
    let name = float_kernel!(OP, "mlstm_forward", dt)?;
    let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
    let s0 = &x.state;
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
                x.q, x.k, x.v, x.i, x.f, s0.c, s0.n, s0.m, &h, &c, &n, &m, &args,
            ],
        )?;
    }
    Ok(MlstmOut {
        h: h.into(),
        boundary: MlstmState {
            c: c.into(),
            n: n.into(),
            m: m.into(),
        },
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
    let bytes = |a: &RecArgs| backward_bytes(s, a, dt);
    let args = args.fit(dev, dt, bytes);
    let f32 = DType::F32;
    let (states, ds) = (&x.out.boundary, &x.d_final);
    check_operands(
        OP,
        dev,
        &[
            ("c", states.c, f32, s.boundaries(s.dk * s.dv)),
            ("n", states.n, f32, s.boundaries(s.dk)),
            ("m", states.m, f32, s.boundaries(1)),
            ("h", x.out.h, dt, s.rows(s.dv)),
            ("dh", x.dh, dt, s.rows(s.dv)),
        ],
    )?;
    let (rk, rv, r1, nh) = (s.rows(s.dk), s.rows(s.dv), s.rows(1), s.heads());
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
    let scratch = dev.alloc(f32, nh * s.dk * s.dv)?;
    // The value tiles' shares of dq, dk, di, df, dn0 and dm0, in that order, per tile
    // (mlstm.cu): their offsets in a tile's row of `stride`.
    let shared = [
        (&g.q, 0),
        (&g.k, rk),
        (&g.i, 2 * rk),
        (&g.f, 2 * rk + r1),
        (&g.state.n, 2 * rk + 2 * r1),
        (&g.state.m, 2 * rk + 2 * r1 + nh * s.dk),
    ];
    let stride = 2 * rk + 2 * r1 + nh * (s.dk + 1);
    let shares = tile_shares(dev, &args, stride)?;
    let name = float_kernel!(OP, "mlstm_backward", dt)?;
    let cfg = head_launch(OP, dev, s, &args, bytes(&args))?;
    // With one tile the kernel never touches `part`: dq stands in.
    let part = shares.as_ref().unwrap_or(&g.q);
    let xi = &x.input;
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
                xi.q, xi.k, xi.v, xi.i, xi.f, states.c, states.n, states.m, x.out.h, x.dh, ds.c,
                ds.n, ds.m, &g.q, &g.k, &g.v, &g.i, &g.f, &g.state.c, &g.state.n, &g.state.m,
                &scratch, part, &args,
            ],
        )?;
    }
    if let Some(shares) = &shares {
        for (out, off) in shared {
            sum_tiles(dev, &SOURCE, shares, off, stride, &args, out)?;
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
