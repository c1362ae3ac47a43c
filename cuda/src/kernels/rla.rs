//! RAttention's residual linear attention, chunkwise on bf16 tensor cores with the feature map
//! fused in, forward and backward (`kernels/rla.cu`, which says how the kernels work).
//!
//! The chunk states live only for the call: the forward scans them, then reads them once; the
//! backward scans them again and their gradients backwards, then forms dq and (dk, dv).

use super::attention::Heads;
use super::{check_device, launch, to_u32, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, DType, Device};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "rla",
    source: concat!(
        include_str!("../../kernels/mma.cuh"),
        include_str!("../../kernels/rla.cu")
    ),
};

/// Time steps per chunk and threads per block of the chunk kernels (`CH`, `THREADS` in rla.cu).
/// The caller's chunk size does not matter: every chunk size gives the same values.
const CHUNK: usize = 64;
const THREADS: u32 = 256;

/// Sizes of a call: query `s` reads the keys `r <= s - window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rla {
    pub heads: Heads,
    pub window: usize,
}

/// What a launch needs, checked: the kernels' suffix and the sizes as u32.
struct Checked {
    suffix: usize,
    t: u32,
    h: u32,
    hkv: u32,
    b: u32,
    group: u32,
    shift: u32,
    chunks: u32,
}

impl Rla {
    fn check(&self, op: &'static str) -> Result<Checked, CudaError> {
        let n = self.heads;
        n.check(op)?;
        Ok(Checked {
            suffix: n.d,
            t: to_u32(op, "t", n.t)?,
            h: to_u32(op, "h", n.h)?,
            hkv: to_u32(op, "hkv", n.hkv)?,
            b: to_u32(op, "b", n.b)?,
            group: to_u32(op, "group", n.h / n.hkv)?,
            shift: to_u32(op, "window", self.window.min(n.t))?,
            chunks: to_u32(op, "chunks", n.t.div_ceil(CHUNK))?,
        })
    }

    /// Whether no query reads any key (every output and gradient is zero).
    fn empty(&self) -> bool {
        self.heads.q_len() == 0 || self.window >= self.heads.t
    }

    /// The chunk states (or their gradients) of every kv head: bf16 `[b, hkv, chunks, 2d, d]`.
    fn states(&self, dev: &Device) -> Result<Buffer, CudaError> {
        let Heads { b, t, hkv, d, .. } = self.heads;
        dev.alloc(DType::BF16, b * hkv * t.div_ceil(CHUNK) * 2 * d * d)
    }

    /// The backward's chunk kernels: a block per (chunk, head, batch); shared memory for two
    /// feature tiles `[CHUNK, 2d]`, a state `[2d, d]` and two tiles `[CHUNK, d]`, bf16.
    fn chunk_launch(&self, c: &Checked, heads: u32) -> Launch {
        let d = self.heads.d;
        Launch {
            grid: (c.chunks, heads, c.b),
            block: (THREADS, 1, 1),
            shared: (2 * (2 * CHUNK * 2 * d + 2 * d * d + 2 * CHUNK * d)) as u32,
        }
    }
}

/// Launches `rla_scan_{fwd,bwd}_dD` over x and y (`[b, t, heads, d]`, `group` heads summed per
/// kv head, rows read `shift` steps late) into `out` (from [`Rla::states`]): the states
/// (`reverse` false: sums over the chunks before each chunk) or their gradients (`reverse`: over
/// the chunks after it).
fn scan(
    dev: &Device,
    a: &Rla,
    c: &Checked,
    reverse: bool,
    (x, y): (&Buffer, &Buffer),
    (heads, group, shift): (u32, u32, u32),
    out: &mut Buffer,
) -> Result<(), CudaError> {
    let name = match (reverse, c.suffix) {
        (false, 64) => "rla_scan_fwd_d64",
        (false, _) => "rla_scan_fwd_d128",
        (true, 64) => "rla_scan_bwd_d64",
        (true, _) => "rla_scan_bwd_d128",
    };
    let cfg = Launch {
        grid: (
            to_u32("rla", "column tiles", 2 * a.heads.d / 64)?,
            c.hkv,
            c.b,
        ),
        block: (to_u32("rla", "threads", 2 * a.heads.d)?, 1, 1),
        // A feature tile [CHUNK, d] and two y tiles [CHUNK, 64], bf16.
        shared: (2 * (CHUNK * a.heads.d + 2 * CHUNK * 64)) as u32,
    };
    // SAFETY: rla_scan_*_dD(const bf16* x, const bf16* y, bf16* out, u32 t_len, u32 heads,
    // u32 group, u32 shift); x and y hold b*t*heads*d (checked by the callers), out
    // b*hkv*chunks*2d*d; the grid's y extent is hkv and heads = hkv * group.
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

/// Forward: `o` `[b, t, h, d]` bf16 from bf16 q, k, v.
pub fn rla_forward(
    dev: &Device,
    a: Rla,
    q: &Buffer,
    k: &Buffer,
    v: &Buffer,
    o: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "rla_forward";
    check_device(OP, dev, &[q, k, v, o])?;
    let c = a.check(OP)?;
    a.heads.check_io(OP, &[q, o], &[k, v])?;
    if a.empty() {
        return dev.memset_zero(o);
    }
    let mut states = a.states(dev)?;
    scan(dev, &a, &c, false, (k, v), (c.hkv, 1, c.shift), &mut states)?;
    let name = if c.suffix == 64 {
        "rla_fwd_d64"
    } else {
        "rla_fwd_d128"
    };
    // SAFETY: rla_fwd_dD(const bf16* q, const bf16* k, const bf16* v, const bf16* states,
    // bf16* o, u32 t_len, u32 heads, u32 kv_heads, u32 shift); sizes checked above, states from
    // Rla::states; a block per (chunk, q head and 64 columns, batch).
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch {
                grid: (c.chunks, c.h * (a.heads.d / 64) as u32, c.b),
                block: (THREADS, 1, 1),
                // Two feature tiles [CHUNK, 2d], 64 columns of v' and of the state, bf16.
                shared: (2 * (2 * CHUNK * 2 * a.heads.d + 2 * a.heads.d * 64 + CHUNK * 64)) as u32,
            },
            &[q, k, v, &states, o, &c.t, &c.h, &c.hkv, &c.shift],
        )
    }
}

/// Backward: dq, dk, dv (bf16; dk and dv summed over the q heads that share a kv head) from the
/// forward's inputs and `dout`.
#[allow(clippy::too_many_arguments)]
pub fn rla_backward(
    dev: &Device,
    a: Rla,
    (q, k, v, dout): (&Buffer, &Buffer, &Buffer, &Buffer),
    dq: &mut Buffer,
    dk: &mut Buffer,
    dv: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "rla_backward";
    check_device(OP, dev, &[q, k, v, dout, dq, dk, dv])?;
    let c = a.check(OP)?;
    a.heads.check_io(OP, &[q, dout, dq], &[k, v, dk, dv])?;
    // Keys in the last `window` steps feed no query: their rows are never written.
    dev.memset_zero(dk)?;
    dev.memset_zero(dv)?;
    if a.empty() {
        return dev.memset_zero(dq);
    }
    let mut states = a.states(dev)?;
    scan(dev, &a, &c, false, (k, v), (c.hkv, 1, c.shift), &mut states)?;
    let mut dstates = a.states(dev)?;
    scan(
        dev,
        &a,
        &c,
        true,
        (q, dout),
        (c.h, c.group, 0),
        &mut dstates,
    )?;
    let (dq_name, dkdv_name) = if c.suffix == 64 {
        ("rla_bwd_dq_d64", "rla_bwd_dkdv_d64")
    } else {
        ("rla_bwd_dq_d128", "rla_bwd_dkdv_d128")
    };
    // SAFETY: rla_bwd_dq_dD(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
    // const bf16* states, bf16* dq, u32 t_len, u32 heads, u32 kv_heads, u32 shift); sizes
    // checked above; a block per (chunk, q head, batch).
    unsafe {
        launch(
            dev,
            &SOURCE,
            dq_name,
            a.chunk_launch(&c, c.h),
            &[q, k, v, dout, &states, dq, &c.t, &c.h, &c.hkv, &c.shift],
        )?;
    }
    drop(states);
    // SAFETY: rla_bwd_dkdv_dD(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
    // const bf16* dstates, bf16* dk, bf16* dv, u32 t_len, u32 heads, u32 kv_heads, u32 shift);
    // sizes checked above; a block per (chunk, kv head, batch).
    unsafe {
        launch(
            dev,
            &SOURCE,
            dkdv_name,
            a.chunk_launch(&c, c.hkv),
            &[
                q, k, v, dout, &dstates, dk, dv, &c.t, &c.h, &c.hkv, &c.shift,
            ],
        )
    }
}
