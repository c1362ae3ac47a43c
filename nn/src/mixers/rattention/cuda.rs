//! RAttention's residual linear attention on CUDA, chunkwise on bf16 tensor cores with the
//! feature map fused in, forward and backward (`rla.cu`, after swax-cuda's `mma.cuh`; it says
//! how the kernels work). f32 operands are rounded to bf16 on the way in and the results
//! widened back, as SWA's (`attention::cuda`).
//!
//! The features phi(q), phi(k) and the chunk states live only for the call: the forward makes the
//! features and carries the states through one walk over the chunks; the backward makes the
//! features again, scans the states and their gradients (backwards) into memory, then forms dq
//! and (dk, dv).
use super::{RlaBackward, RlaGrads, RlaIn};
use crate::mixers::attention::cuda::{as_dtype, bf16};
use crate::mixers::attention::SwaIn;
use swax_cuda::kernels::attention::AttnShape;
use swax_cuda::kernels::{check_device, launch, to_u32, Launch, MMA_CUH};
use swax_cuda::{Buffer, CudaError, DType, Device, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "rla",
    source: &[MMA_CUH, include_str!("rla.cu")],
};

/// Time steps per chunk, threads per block of the feature and chunk kernels and of the scans, and
/// the scans' ring of tiles (`CH`, `THREADS`, `SCAN_THREADS`, `SCAN_STAGES` in rla.cu). The
/// caller's chunk size does not matter: every chunk size gives the same values.
const CHUNK: usize = 64;
const THREADS: u32 = 256;
const SCAN_THREADS: u32 = 128;
const SCAN_STAGES: usize = 3;

/// What the kernels launch with at head dim `d` (their grids follow from the shape: see the
/// launches below): the chunk, the scans' threads and shared bytes, the feature and chunk
/// kernels' threads (a warp per row in `rla_phi`), and the shared bytes of `rla_fwd` and of the
/// backward's chunk kernels. Public so that the kernels' CPU emulation
/// (tests/tests/emulated_kernels.rs) launches them as the wrappers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub chunk: usize,
    pub scan_threads: u32,
    pub scan_shared: usize,
    pub threads: u32,
    pub fwd_shared: usize,
    pub bwd_shared: usize,
}

/// The sizes at head dim `d`.
pub fn sizes(d: usize) -> Sizes {
    Sizes {
        chunk: CHUNK,
        scan_threads: SCAN_THREADS,
        // SCAN_STAGES buffers of a feature tile and a y tile, each [CHUNK, 64], bf16.
        scan_shared: 2 * (SCAN_STAGES * 2 * CHUNK * 64),
        threads: THREADS,
        // Two stages of two feature tiles [CHUNK, 2d] and 64 columns of v', 64 columns of the
        // state and a masked product [CHUNK, CHUNK], bf16.
        fwd_shared: 2 * (2 * (2 * CHUNK * 2 * d + CHUNK * 64) + 2 * d * 64 + CHUNK * CHUNK),
        // Two feature tiles [CHUNK, 2d], a state [2d, d], two tiles [CHUNK, d] and two masked
        // products [CHUNK, CHUNK], bf16.
        bwd_shared: 2 * (2 * CHUNK * 2 * d + 2 * d * d + 2 * CHUNK * d + 2 * CHUNK * CHUNK),
    }
}

/// What a launch needs, checked: the sizes (as u32 where a kernel takes them).
struct Checked {
    s: AttnShape,
    window: usize,
    t: u32,
    h: u32,
    hkv: u32,
    b: u32,
    group: u32,
    shift: u32,
    chunks: u32,
}

impl Checked {
    /// Query `s` reads the keys `r <= s - window`.
    fn new(op: &'static str, n: AttnShape, window: usize) -> Result<Checked, CudaError> {
        n.check(op)?;
        Ok(Checked {
            s: n,
            window,
            t: to_u32(op, "t", n.t)?,
            h: to_u32(op, "h", n.h)?,
            hkv: to_u32(op, "hkv", n.hkv)?,
            b: to_u32(op, "b", n.b)?,
            group: to_u32(op, "group", n.h / n.hkv)?,
            shift: to_u32(op, "window", window.min(n.t))?,
            chunks: to_u32(op, "chunks", n.t.div_ceil(CHUNK))?,
        })
    }

    /// Whether no query reads any key (every output and gradient is zero).
    fn empty(&self) -> bool {
        self.s.q_len() == 0 || self.window >= self.s.t
    }

    /// The chunk states (or their gradients) of every kv head: bf16 `[b, hkv, chunks, 2d, d]`.
    fn states(&self, dev: &Device) -> Result<Buffer, CudaError> {
        let AttnShape { b, t, hkv, d, .. } = self.s;
        dev.alloc(DType::BF16, b * hkv * t.div_ceil(CHUNK) * 2 * d * d)
    }

    /// The kernel of this head dim among its two instantiations (rla.cu's `_d64`, `_d128`).
    fn kernel(&self, [d64, d128]: [&'static str; 2]) -> &'static str {
        if self.s.d == 64 {
            d64
        } else {
            d128
        }
    }

    /// phi of every row of x (`[b, t, heads, d]`) into a new bf16 `[b, t, heads, 2d]`.
    fn features(&self, dev: &Device, x: &Buffer, heads: u32) -> Result<Buffer, CudaError> {
        let AttnShape { b, t, d, .. } = self.s;
        let rows = (b * t * heads as usize) as u64;
        let f = dev.alloc(DType::BF16, 2 * d * rows as usize)?;
        let per_block = u64::from(THREADS / 32);
        let name = self.kernel(["rla_phi_d64", "rla_phi_d128"]);
        // SAFETY: rla_phi_dD(const bf16* x, bf16* f, u64 rows); x holds rows * d elements
        // (checked by the callers: b*t*heads*d), f rows * 2d; a warp per row.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                Launch {
                    grid: (
                        to_u32("rla", "feature blocks", rows.div_ceil(per_block) as usize)?,
                        1,
                        1,
                    ),
                    block: (THREADS, 1, 1),
                    shared: 0,
                },
                &[x, &f, &rows],
            )?;
        }
        Ok(f)
    }

    /// The backward's chunk kernels: a block per (chunk, head, batch).
    fn chunk_launch(&self, heads: u32) -> Launch {
        let z = sizes(self.s.d);
        Launch {
            grid: (self.chunks, heads, self.b),
            block: (z.threads, 1, 1),
            shared: z.bwd_shared as u32,
        }
    }
}

/// Launches `rla_scan_{fwd,bwd}_dD` over the features x (`[b, t, heads, 2d]`) and y (`[b, t,
/// heads, d]`; `group` heads summed per kv head, rows read `shift` steps late) into `out` (from
/// [`Checked::states`]): the states (`reverse` false: sums over the chunks before each chunk)
/// or their gradients (`reverse`: over the chunks after it).
fn scan(
    dev: &Device,
    c: &Checked,
    reverse: bool,
    (x, y): (&Buffer, &Buffer),
    (heads, group, shift): (u32, u32, u32),
    out: &mut Buffer,
) -> Result<(), CudaError> {
    let name = if reverse {
        c.kernel(["rla_scan_bwd_d64", "rla_scan_bwd_d128"])
    } else {
        c.kernel(["rla_scan_fwd_d64", "rla_scan_fwd_d128"])
    };
    let z = sizes(c.s.d);
    let cfg = Launch {
        grid: (
            to_u32("rla", "state tiles", (2 * c.s.d / 64) * (c.s.d / 64))?,
            c.hkv,
            c.b,
        ),
        block: (z.scan_threads, 1, 1),
        shared: z.scan_shared as u32,
    };
    // SAFETY: rla_scan_*_dD(const bf16* x, const bf16* y, bf16* out, u32 t_len, u32 heads,
    // u32 group, u32 shift); x holds b*t*heads*2d (Checked::features), y b*t*heads*d (checked
    // by the callers), out b*hkv*chunks*2d*d; the grid's y extent is hkv and heads = hkv * group.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[x, y, out, &c.t, &heads, &group, &shift],
        )
    }
}

/// The forward: o (the operands' dtype).
pub(super) fn forward(
    x: &RlaIn<&Buffer>,
    s: AttnShape,
    window: usize,
) -> Result<CudaStorage, CudaError> {
    const OP: &str = "rla_forward";
    let dev = x.q.device();
    check_device(OP, dev, &[x.q, x.k, x.v])?;
    let c = Checked::new(OP, s, window)?;
    let (q, k, v) = (bf16(x.q)?, bf16(x.k)?, bf16(x.v)?);
    let (q, k, v) = (&*q, &*k, &*v);
    let mut o = dev.alloc(DType::BF16, s.q_len())?;
    s.check_io(OP, &[q, &o], &[k, v])?;
    if c.empty() {
        dev.memset_zero(&mut o)?;
        return as_dtype(o, x.q.dtype());
    }
    let (fq, fk) = (c.features(dev, q, c.h)?, c.features(dev, k, c.hkv)?);
    let name = c.kernel(["rla_fwd_d64", "rla_fwd_d128"]);
    let z = sizes(s.d);
    // SAFETY: rla_fwd_dD(const bf16* fq, const bf16* fk, const bf16* v, bf16* o, u32 t_len,
    // u32 heads, u32 kv_heads, u32 shift); sizes checked above, fq and fk from
    // Checked::features; a block per (64 columns, q head, batch).
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch {
                grid: ((s.d / 64) as u32, c.h, c.b),
                block: (z.threads, 1, 1),
                shared: z.fwd_shared as u32,
            },
            &[&fq, &fk, v, &o, &c.t, &c.h, &c.hkv, &c.shift],
        )?;
    }
    as_dtype(o, x.q.dtype())
}

/// The backward: dq, dk, dv (the operands' dtype; dk and dv summed over the q heads that share a
/// kv head) from the forward's inputs and the gradient of o.
pub(super) fn backward(
    x: &RlaBackward<&Buffer>,
    s: AttnShape,
    window: usize,
) -> Result<RlaGrads<CudaStorage>, CudaError> {
    const OP: &str = "rla_backward";
    let i = &x.input;
    let (dev, dtype) = (i.q.device(), i.q.dtype());
    check_device(OP, dev, &[i.q, i.k, i.v, x.dout])?;
    let c = Checked::new(OP, s, window)?;
    let (q, k, v, dout) = (bf16(i.q)?, bf16(i.k)?, bf16(i.v)?, bf16(x.dout)?);
    let (q, k, v, dout) = (&*q, &*k, &*v, &*dout);
    let mut dq = dev.alloc(DType::BF16, s.q_len())?;
    // Keys in the last `window` steps feed no query: their rows are never written.
    let dk = dev.alloc_zeros(DType::BF16, s.kv_len())?;
    let dv = dev.alloc_zeros(DType::BF16, s.kv_len())?;
    s.check_io(OP, &[q, dout, &dq], &[k, v, &dk, &dv])?;
    let grads = |dq: Buffer, dk: Buffer, dv: Buffer| -> Result<RlaGrads<CudaStorage>, CudaError> {
        Ok(SwaIn {
            q: as_dtype(dq, dtype)?,
            k: as_dtype(dk, dtype)?,
            v: as_dtype(dv, dtype)?,
        })
    };
    if c.empty() {
        dev.memset_zero(&mut dq)?;
        return grads(dq, dk, dv);
    }
    let (fq, fk) = (c.features(dev, q, c.h)?, c.features(dev, k, c.hkv)?);
    let mut states = c.states(dev)?;
    scan(dev, &c, false, (&fk, v), (c.hkv, 1, c.shift), &mut states)?;
    let mut dstates = c.states(dev)?;
    scan(dev, &c, true, (&fq, dout), (c.h, c.group, 0), &mut dstates)?;
    let dq_name = c.kernel(["rla_bwd_dq_d64", "rla_bwd_dq_d128"]);
    let dkdv_name = c.kernel(["rla_bwd_dkdv_d64", "rla_bwd_dkdv_d128"]);
    // SAFETY: rla_bwd_dq_dD(const bf16* fq, const bf16* fk, const bf16* v, const bf16* dout,
    // const bf16* states, bf16* dq, u32 t_len, u32 heads, u32 kv_heads, u32 shift); sizes
    // checked above; a block per (chunk, q head, batch).
    unsafe {
        launch(
            dev,
            &SOURCE,
            dq_name,
            c.chunk_launch(c.h),
            &[
                &fq, &fk, v, dout, &states, &dq, &c.t, &c.h, &c.hkv, &c.shift,
            ],
        )?;
    }
    drop(states);
    // SAFETY: rla_bwd_dkdv_dD(const bf16* fq, const bf16* fk, const bf16* v, const bf16* dout,
    // const bf16* dstates, bf16* dk, bf16* dv, u32 t_len, u32 heads, u32 kv_heads, u32 shift);
    // sizes checked above; a block per (chunk, kv head, batch).
    unsafe {
        launch(
            dev,
            &SOURCE,
            dkdv_name,
            c.chunk_launch(c.hkv),
            &[
                &fq, &fk, v, dout, &dstates, &dk, &dv, &c.t, &c.h, &c.hkv, &c.shift,
            ],
        )?;
    }
    grads(dq, dk, dv)
}
