//! The decoding steps on CUDA (`decode.cu`): one block of `DECODE_THREADS` per row and head
//! (per row and kv head for `rla_step`), each kernel one launch; `attend` two, its first a block
//! per row, head and range of keys.
use super::{
    AttendIn, AttendShape, GatedDeltaStep, MlstmStep, RlaStepIn, SplitRope, StepShape, Stepped,
};
use swax_cuda::kernels::chunk::check_operands;
use swax_cuda::kernels::{float_kernel, launch, to_u32, Launch};
use swax_cuda::{Buffer, CudaDevice, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "decode",
    source: &[include_str!("decode.cu")],
};

/// Threads of a block (`DECODE_THREADS` in decode.cu).
const DECODE_THREADS: u32 = 256;
/// Scores a block of `attend` holds at once (`DECODE_TILE`).
const DECODE_TILE: usize = 1024;
/// Keys a block of `attend_part` takes at least: with fewer, its fixed costs (the query, two
/// block-wide reductions a tile) outweigh its keys.
const RANGE_KEYS: usize = 128;
/// Ranges of keys per row and head at most: the join reads every range's D sums.
const MAX_RANGES: usize = 32;
/// The largest head dim: `attend`'s groups of threads each sum one element of every value, so a
/// head's elements must fit in a block's threads.
pub(super) const MAX_HEAD_DIM: usize = DECODE_THREADS as usize;

/// One block per row and head with `shared` bytes, at most what a block of `dev` can opt in to
/// (the device raises a kernel's limit above the default where it asks for more).
fn blocks(
    op: &'static str,
    dev: &CudaDevice,
    rows: usize,
    shared: usize,
) -> Result<Launch, CudaError> {
    let most = dev.max_shared_optin() as usize;
    if shared > most {
        return Err(CudaError::invalid(
            op,
            format!("{shared} bytes of shared memory, more than the {most} a block gets"),
        ));
    }
    Ok(Launch {
        grid: (to_u32(op, "rows x heads", rows)?, 1, 1),
        block: (DECODE_THREADS, 1, 1),
        shared: shared as u32,
    })
}

/// Checks the convolution's operands against the sizes (data of x's dtype, f32 states).
fn check_conv(
    op: &'static str,
    x: &super::ConvStep<&Buffer>,
    d: &StepShape,
    gates: [(&str, &Buffer); 2],
    states: &[(&str, &Buffer, usize)],
) -> Result<DType, CudaError> {
    let dt = x.x.dtype();
    if d.dk.max(d.dv) > MAX_HEAD_DIM {
        return Err(CudaError::invalid(
            op,
            format!("head dims {} and {} above {MAX_HEAD_DIM}", d.dk, d.dv),
        ));
    }
    let (c, k) = (d.channels(), d.taps);
    let mut all = vec![
        ("x", x.x, dt, d.b * c),
        ("weight", x.weight, dt, c * k),
        ("tail", x.tail, dt, d.b * (k - 1) * c),
    ];
    all.extend(gates.map(|(name, g)| (name, g, dt, d.b * d.h)));
    all.extend(states.iter().map(|&(name, s, n)| (name, s, DType::F32, n)));
    check_operands(op, x.x.device(), &all)?;
    Ok(dt)
}

pub(super) fn gated_delta_step(
    x: &GatedDeltaStep<&Buffer>,
    d: &StepShape,
) -> Result<Stepped<CudaStorage>, CudaError> {
    const OP: &str = "gated_delta_step";
    let heads = d.b * d.h;
    let dt = check_conv(
        OP,
        &x.conv,
        d,
        [("beta", x.beta), ("g", x.g)],
        &[("state", x.state, heads * d.dk * d.dv)],
    )?;
    let dev = x.conv.x.device();
    let out = dev.alloc(dt, heads * d.dv)?;
    let tail = dev.alloc(dt, x.conv.tail.len())?;
    let state = dev.alloc(DType::F32, heads * d.dk * d.dv)?;
    let name = float_kernel!(OP, "gated_delta_step", dt)?;
    let cfg = blocks(OP, dev, heads, 4 * (2 * d.dk + d.dv))?;
    let sizes = [d.h, d.dk, d.dv, d.taps].map(|n| n as u32);
    // SAFETY: gated_delta_step_T(x, w, tail, beta, g, s, out, tail_out, s_out, heads, dk, dv,
    // taps); every buffer checked or allocated at the length these sizes imply, and the shared
    // memory holds the head's q, k, v in f32.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x.conv.x,
                x.conv.weight,
                x.conv.tail,
                x.beta,
                x.g,
                x.state,
                &out,
                &tail,
                &state,
                &sizes[0],
                &sizes[1],
                &sizes[2],
                &sizes[3],
            ],
        )?;
    }
    Ok(Stepped {
        out: out.into(),
        tail: tail.into(),
        state: vec![state.into()],
    })
}

pub(super) fn mlstm_step(
    x: &MlstmStep<&Buffer>,
    d: &StepShape,
    eps: f32,
) -> Result<Stepped<CudaStorage>, CudaError> {
    const OP: &str = "mlstm_step";
    let heads = d.b * d.h;
    let s = &x.state;
    let dt = check_conv(
        OP,
        &x.conv,
        d,
        [("i", x.i), ("f", x.f)],
        &[
            ("c", s.c, heads * d.dk * d.dv),
            ("n", s.n, heads * d.dk),
            ("m", s.m, heads),
        ],
    )?;
    let dev = x.conv.x.device();
    let out = dev.alloc(dt, heads * d.dv)?;
    let tail = dev.alloc(dt, x.conv.tail.len())?;
    let c = dev.alloc(DType::F32, heads * d.dk * d.dv)?;
    let n = dev.alloc(DType::F32, heads * d.dk)?;
    let m = dev.alloc(DType::F32, heads)?;
    let name = float_kernel!(OP, "mlstm_step", dt)?;
    let cfg = blocks(OP, dev, heads, 4 * (2 * d.dk + d.dv))?;
    let sizes = [d.h, d.dk, d.dv, d.taps].map(|n| n as u32);
    // SAFETY: mlstm_step_T(x, w, tail, i, f, c, n, m, out, tail_out, c_out, n_out, m_out, heads,
    // dk, dv, taps, eps); every buffer checked or allocated at the length these sizes imply, and
    // the shared memory holds the head's q, k, v in f32.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x.conv.x,
                x.conv.weight,
                x.conv.tail,
                x.i,
                x.f,
                s.c,
                s.n,
                s.m,
                &out,
                &tail,
                &c,
                &n,
                &m,
                &sizes[0],
                &sizes[1],
                &sizes[2],
                &sizes[3],
                &eps,
            ],
        )?;
    }
    Ok(Stepped {
        out: out.into(),
        tail: tail.into(),
        state: vec![c.into(), n.into(), m.into()],
    })
}

pub(super) fn attend(
    x: &AttendIn<&Buffer>,
    d: &AttendShape,
    scale: f32,
) -> Result<CudaStorage, CudaError> {
    const OP: &str = "attend";
    let dt = x.q.dtype();
    if d.d > MAX_HEAD_DIM {
        return Err(CudaError::invalid(
            OP,
            format!("head dim {} above {MAX_HEAD_DIM}", d.d),
        ));
    }
    let cache = d.b * d.slots * d.hkv * d.d;
    check_operands(
        OP,
        x.q.device(),
        &[
            ("q", x.q, dt, d.b * d.h * d.d),
            ("k", x.k, dt, cache),
            ("v", x.v, dt, cache),
        ],
    )?;
    let dev = x.q.device();
    let (per, ranges) = attend_ranges(d.n);
    let rows = d.b * d.h;
    let part = dev.alloc(DType::F32, rows * ranges * (d.d + 2))?;
    let out = dev.alloc(dt, rows * d.d)?;
    // q, a tile of scores, the groups' sums of the values.
    let mut cfg = blocks(
        OP,
        dev,
        rows,
        4 * (d.d + DECODE_TILE + DECODE_THREADS as usize),
    )?;
    cfg.grid.1 = to_u32(OP, "ranges", ranges)?;
    let sizes = [d.h, d.hkv, d.d, d.slots, d.n, per].map(|n| n as u32);
    // SAFETY: attend_part_T(q, k, v, part, heads, kv_heads, d, slots, n, per, scale); buffers
    // checked or allocated at the lengths these sizes imply (n <= slots, checked by the op; part
    // holds rows x ranges x (d + 2)), and the shared memory is what the kernel carves.
    unsafe {
        launch(
            dev,
            &SOURCE,
            float_kernel!(OP, "attend_part", dt)?,
            cfg,
            &[
                x.q, x.k, x.v, &part, &sizes[0], &sizes[1], &sizes[2], &sizes[3], &sizes[4],
                &sizes[5], &scale,
            ],
        )?;
    }
    let ranges = ranges as u32;
    // SAFETY: attend_join_T(part, out, d, ranges), part written above for every (row, head,
    // range), out allocated for rows x d.
    unsafe {
        launch(
            dev,
            &SOURCE,
            float_kernel!(OP, "attend_join", dt)?,
            blocks(OP, dev, rows, 0)?,
            &[&part, &out, &sizes[2], &ranges],
        )?;
    }
    Ok(out.into())
}

/// The ranges `attend` splits `n >= 1` keys into: (keys a range, ranges), none empty.
pub fn attend_ranges(n: usize) -> (usize, usize) {
    let per = n.div_ceil(n.div_ceil(RANGE_KEYS).clamp(1, MAX_RANGES));
    (per, n.div_ceil(per))
}

/// The slot is `d.n` (`mod.rs`).
pub(super) fn rla_step(
    x: &RlaStepIn<&Buffer>,
    d: &AttendShape,
) -> Result<(CudaStorage, CudaStorage), CudaError> {
    const OP: &str = "rla_step";
    let dt = x.q.dtype();
    let (group, f) = (d.h / d.hkv, 2 * d.d);
    // phi(k), phi(q) of the kv head's q heads, v, and each q head's output column sums.
    let shared = 4 * (f + group * f + d.d + group * d.d);
    if d.d > MAX_HEAD_DIM {
        return Err(CudaError::invalid(
            OP,
            format!("head dim {} above {MAX_HEAD_DIM}", d.d),
        ));
    }
    let cache = d.b * d.slots * d.hkv * d.d;
    let states = d.b * d.hkv * f * d.d;
    check_operands(
        OP,
        x.q.device(),
        &[
            ("q", x.q, dt, d.b * d.h * d.d),
            ("k", x.k, dt, cache),
            ("v", x.v, dt, cache),
            ("state", x.state, DType::F32, states),
        ],
    )?;
    let dev = x.q.device();
    let out = dev.alloc(dt, d.b * d.h * d.d)?;
    let state = dev.alloc(DType::F32, states)?;
    let name = float_kernel!(OP, "rla_step", dt)?;
    let cfg = blocks(OP, dev, d.b * d.hkv, shared)?;
    let sizes = [d.h, d.hkv, d.d, d.slots, d.n].map(|n| n as u32);
    // SAFETY: rla_step_T(q, k, v, s, out, s_out, heads, kv_heads, d, slots, slot); buffers
    // checked or allocated at the lengths these sizes imply (slot < slots, checked by the op),
    // and the shared memory is what the kernel carves.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x.q, x.k, x.v, x.state, &out, &state, &sizes[0], &sizes[1], &sizes[2], &sizes[3],
                &sizes[4],
            ],
        )?;
    }
    Ok((out.into(), state.into()))
}

/// q, k and v of the step's qkv row, q and k rotated (`split_rope` in decode.cu).
pub(super) fn split_rope(qkv: &Buffer, d: &SplitRope) -> Result<[CudaStorage; 3], CudaError> {
    const OP: &str = "split_rope";
    let dt = qkv.dtype();
    let width = (d.h + 2 * d.hkv) * d.d;
    check_operands(OP, qkv.device(), &[("qkv", qkv, dt, d.b * width)])?;
    let dev = qkv.device();
    let q = dev.alloc(dt, d.b * d.h * d.d)?;
    let k = dev.alloc(dt, d.b * d.hkv * d.d)?;
    let v = dev.alloc(dt, d.b * d.hkv * d.d)?;
    let name = float_kernel!(OP, "split_rope", dt)?;
    let pairs = (d.b * width / 2) as u64;
    let cfg = Launch {
        grid: (
            to_u32(OP, "blocks", pairs.div_ceil(DECODE_THREADS as u64) as usize)?,
            1,
            1,
        ),
        block: (DECODE_THREADS, 1, 1),
        shared: 0,
    };
    let (rows, heads) = (to_u32(OP, "B", d.b)?, to_u32(OP, "H", d.h)?);
    let (kv_heads, half) = (to_u32(OP, "Hkv", d.hkv)?, to_u32(OP, "D / 2", d.d / 2)?);
    let pos = i64::try_from(d.pos)
        .map_err(|_| CudaError::invalid(OP, format!("position {} exceeds i64", d.pos)))?;
    // SAFETY: split_rope_T(qkv, q, k, v, rows, heads, kv_heads, half, pos, theta); qkv holds
    // rows * (heads + 2 kv_heads) * 2 half elements, q rows * heads * 2 half, k and v rows *
    // kv_heads * 2 half, and the grid's threads walk the pairs of all of them.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                qkv, &q, &k, &v, &rows, &heads, &kv_heads, &half, &pos, &d.theta,
            ],
        )?;
    }
    Ok([q.into(), k.into(), v.into()])
}
