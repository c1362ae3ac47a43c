//! RAttention's residual linear attention on CUDA, chunkwise on bf16 tensor cores, forward and
//! backward (`rla.cu`, after swax-cuda's `mma.cuh`, `wgmma.cuh` and `tma.cuh`; it says how the
//! kernels work; on Hopper the walks run on wgmma, their tiles loaded by TMA from tensor maps
//! made here). f32 operands are rounded to bf16 on the way in and the results widened back, as
//! SWA's (`attention::cuda`).
//!
//! The chunk states live only in the walks' registers: the forward makes the features phi(q),
//! phi(k) and walks the chunks once for o, returning the features; the backward reads them (or
//! makes them again) and walks them three times, for dq, dk (each sign of the features into its
//! half of a `[.., 2d]` buffer, then summed) and dv.
use super::{RlaBackward, RlaGrads, RlaIn};
use crate::mixers::attention::cuda::{as_dtype, bf16};
use crate::mixers::attention::SwaIn;
use swax_cuda::kernels::attention::AttnShape;
use swax_cuda::kernels::{
    check_device, launch, to_u32, KernelArg, Launch, MMA_CUH, TMA_CUH, WGMMA_CUH,
};
use swax_cuda::tma::TensorMap;
use swax_cuda::{Buffer, CudaDevice, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "rla",
    source: &[MMA_CUH, WGMMA_CUH, TMA_CUH, include_str!("rla.cu")],
};

/// The architecture whose walks are rla.cu's wgmma walk (NVRTC compiles it for sm_90a).
const HOPPER: (u32, u32) = (9, 0);

/// Time steps per chunk and threads per block of every kernel (`CH`, `THREADS` in rla.cu). The
/// caller's chunk size does not matter: every chunk size gives the same values.
const CHUNK: usize = 64;
const THREADS: u32 = 256;

/// What the kernels launch with at head dim `d` (their grids follow from the shape: see the
/// launches below): the chunk, the threads of every kernel, the shared bytes of the walks over
/// features (`rla_fwd`, `rla_bwd_dv`) and of those that carry a feature gradient back through
/// phi (`rla_bwd_dq`, `rla_bwd_dk`), and the rows of a block of `rla_phi` (d / 8 threads a
/// row). Public so that the kernels' CPU emulation (tests/tests/emulated_kernels.rs) launches
/// them as the wrappers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub chunk: usize,
    pub threads: u32,
    pub feature_shared: usize,
    pub grad_shared: usize,
    pub phi_rows: usize,
}

/// The sizes at head dim `d`, of the mma.sync walk or (`hopper`) the wgmma walk.
pub fn sizes(d: usize, hopper: bool) -> Sizes {
    let shared = |k, n, phi| {
        if hopper {
            walk_shared_wg(k, n, phi)
        } else {
            walk_shared(k, n, phi)
        }
    };
    Sizes {
        chunk: CHUNK,
        threads: THREADS,
        feature_shared: shared(2 * d, 64, false),
        grad_shared: shared(d, d, true),
        phi_rows: THREADS as usize / (d / 8),
    }
}

/// rla_walk_wg's shared bytes with rows of `k` and `n` columns: two stages of two [CHUNK, k]
/// tiles and one [CHUNK, n] tile (two with `phi`), two copies of the state [k, n], bf16; the
/// stages' two mbarriers; 1024 bytes to align the tiles as TMA writes them.
fn walk_shared_wg(k: usize, n: usize, phi: bool) -> usize {
    let tiles = if phi { 2 } else { 1 };
    2 * (2 * (2 * CHUNK * k + tiles * CHUNK * n) + 2 * k * n) + 2 * 8 + 1024
}

/// rla_walk's shared bytes with rows of `k` and `n` columns: two stages of two [CHUNK, k] tiles
/// and one [CHUNK, n] tile (two with `phi`), the state [k, n] and a masked product [CHUNK,
/// CHUNK], bf16; with `phi` two f32 row dots a row.
fn walk_shared(k: usize, n: usize, phi: bool) -> usize {
    let tiles = if phi { 2 } else { 1 };
    2 * (2 * (2 * CHUNK * k + tiles * CHUNK * n) + k * n + CHUNK * CHUNK)
        + if phi { 2 * CHUNK * 4 } else { 0 }
}

/// What a launch needs, checked: the sizes (as u32 where a kernel takes them).
struct Checked {
    s: AttnShape,
    window: usize,
    t: u32,
    h: u32,
    hkv: u32,
    b: u32,
    shift: u32,
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
            shift: to_u32(op, "window", window.min(n.t))?,
        })
    }

    /// Whether no query reads any key (every output and gradient is zero).
    fn empty(&self) -> bool {
        self.s.q_len() == 0 || self.window >= self.s.t
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
    fn features(&self, dev: &CudaDevice, x: &Buffer, heads: u32) -> Result<Buffer, CudaError> {
        let AttnShape { b, t, d, .. } = self.s;
        let rows = (b * t * heads as usize) as u64;
        let f = dev.alloc(DType::BF16, 2 * d * rows as usize)?;
        let per_block = sizes(d, false).phi_rows as u64;
        let name = self.kernel(["rla_phi_d64", "rla_phi_d128"]);
        let cfg = line_launch("feature blocks", rows.div_ceil(per_block) as usize)?;
        // SAFETY: rla_phi_dD(const bf16* x, bf16* f, u64 rows); x holds rows * d elements
        // (checked by the callers: b*t*heads*d), f rows * 2d; d / 8 threads a row.
        unsafe { launch(dev, &SOURCE, name, cfg, &[x, &f, &rows])? };
        Ok(f)
    }

    /// y (bf16 `[b, t, heads, d]`) = the sum of the two d-column halves of every row of x (`[..,
    /// 2d]`): a gradient from its two signs of features; zero at times from `limit` on, where x
    /// is not read (the rows no walk wrote).
    fn sum_halves(
        &self,
        dev: &CudaDevice,
        x: &Buffer,
        y: &Buffer,
        heads: u32,
        limit: u32,
    ) -> Result<(), CudaError> {
        let d = self.s.d;
        let rows = y.len() / d;
        let name = self.kernel(["rla_sum_halves_d64", "rla_sum_halves_d128"]);
        let cfg = line_launch("sum blocks", (rows * d / 8).div_ceil(THREADS as usize))?;
        // SAFETY: rla_sum_halves_dD(const bf16* x, bf16* y, u64 rows, u32 t_len, u32 heads, u32
        // limit); y holds rows * d elements, rows = b * t * heads, x rows * 2d (the callers' walk
        // outputs); a thread per 8 elements of y.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                cfg,
                &[x, y, &(rows as u64), &self.t, &heads, &limit],
            )
        }
    }

    /// The walks' operands as their kernels take them: pointers, or on Hopper (whose walks load
    /// their tiles by TMA) tensor maps with boxes of a chunk's rows by 64 columns. Each operand
    /// is a `[b, t, heads, width]` bf16 tensor.
    fn operands<'a>(
        &self,
        op: &'static str,
        hopper: bool,
        xs: &[(&'a Buffer, u32, usize)],
    ) -> Result<Operands<'a>, CudaError> {
        if !hopper {
            return Ok(Operands::Pointers(xs.iter().map(|x| x.0).collect()));
        }
        let AttnShape { b, t, .. } = self.s;
        xs.iter()
            .map(|&(x, heads, width)| {
                TensorMap::bf16_rows(op, x, &[b, t, heads as usize, width], 1, CHUNK)
            })
            .collect::<Result<_, _>>()
            .map(Operands::Maps)
    }

    /// A walk's launch: a block per (column block, head, batch).
    fn walk(&self, blocks: usize, heads: u32, shared: usize) -> Result<Launch, CudaError> {
        Ok(Launch {
            grid: (to_u32("rla", "column blocks", blocks)?, heads, self.b),
            block: (THREADS, 1, 1),
            shared: to_u32("rla", "shared bytes", shared)?,
        })
    }
}

/// The walks' operands as their kernels take them (see `Checked::operands`).
enum Operands<'a> {
    Pointers(Vec<&'a Buffer>),
    Maps(Vec<TensorMap>),
}

impl Operands<'_> {
    /// The kernel arguments of operands `which` (indices into the list they were made from).
    fn args(&self, which: &[usize]) -> Vec<&dyn KernelArg> {
        which
            .iter()
            .map(|&i| match self {
                Operands::Pointers(p) => p[i] as &dyn KernelArg,
                Operands::Maps(m) => &m[i] as &dyn KernelArg,
            })
            .collect()
    }
}

/// A launch of `blocks` blocks in a line (the feature and sum kernels).
fn line_launch(what: &'static str, blocks: usize) -> Result<Launch, CudaError> {
    Ok(Launch {
        grid: (to_u32("rla", what, blocks)?, 1, 1),
        block: (THREADS, 1, 1),
        shared: 0,
    })
}

/// The forward: o (the operands' dtype), and the features phi(q), phi(k) it made (none where
/// no query reads a key), which the backward can read instead of making them again.
pub(super) fn forward(
    x: &RlaIn<&Buffer>,
    s: AttnShape,
    window: usize,
) -> Result<(CudaStorage, Option<[Buffer; 2]>), CudaError> {
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
        return Ok((as_dtype(o, x.q.dtype())?, None));
    }
    let (fq, fk) = (c.features(dev, q, c.h)?, c.features(dev, k, c.hkv)?);
    let hopper = dev.compute_capability() == HOPPER;
    let (d, d2) = (s.d, 2 * s.d);
    {
        let ops = c.operands(
            OP,
            hopper,
            &[(&fq, c.h, d2), (&fk, c.hkv, d2), (v, c.hkv, d)],
        )?;
        let name = c.kernel(["rla_fwd_d64", "rla_fwd_d128"]);
        let cfg = c.walk(s.d / 64, c.h, sizes(s.d, hopper).feature_shared)?;
        let mut args = ops.args(&[0, 1, 2]);
        args.extend([&o as &dyn KernelArg, &c.t, &c.h, &c.hkv, &c.shift]);
        // SAFETY: rla_fwd_dD(fq, fk, v, bf16* o, u32 t_len, u32 heads, u32 kv_heads, u32 shift),
        // the operands as pointers or (Hopper) tensor maps of their buffers, made by
        // Checked::operands; sizes checked above, fq and fk from Checked::features; a block per
        // (64 columns, q head, batch).
        unsafe { launch(dev, &SOURCE, name, cfg, &args)? };
    }
    Ok((as_dtype(o, x.q.dtype())?, Some([fq, fk])))
}

/// The backward: dq, dk, dv (the operands' dtype; dk and dv summed over the q heads that share a
/// kv head) from the forward's inputs, its features if it kept them (bf16, checked by the
/// caller) and the gradient of o.
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
    let mut dk = dev.alloc(DType::BF16, s.kv_len())?;
    // Keys in the last `window` steps feed no query: their rows of dk and dv are never written.
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
        dev.memset_zero(&mut dk)?;
        return grads(dq, dk, dv);
    }
    let hopper = dev.compute_capability() == HOPPER;
    let z = sizes(s.d, hopper);
    // The walks for dq and dk write one sign of the features' gradient each, into its half of
    // every row of a [.., 2d] buffer (none into dk2's rows of the last `window` keys).
    let dq2 = dev.alloc(DType::BF16, 2 * s.q_len())?;
    let dk2 = dev.alloc(DType::BF16, 2 * s.kv_len())?;
    {
        // Features made here (the forward kept none) live for the walks only.
        let made;
        let (fq, fk) = match &x.features {
            Some(f) => (f.q, f.k),
            None => {
                made = [c.features(dev, q, c.h)?, c.features(dev, k, c.hkv)?];
                (&made[0], &made[1])
            }
        };
        let (d, d2) = (s.d, 2 * s.d);
        let ops = c.operands(
            OP,
            hopper,
            &[
                (fq, c.h, d2),
                (fk, c.hkv, d2),
                (v, c.hkv, d),
                (dout, c.h, d),
            ],
        )?;
        let args = |which: &[usize], out| {
            let mut args = ops.args(which);
            args.extend([out as &dyn KernelArg, &c.t, &c.h, &c.hkv, &c.shift]);
            args
        };
        // SAFETY: rla_bwd_{dq,dk}_dD(fq, fk, v, dout, bf16* out2, u32 t_len, u32 heads, u32
        // kv_heads, u32 shift) and rla_bwd_dv_dD(fq, fk, dout, bf16* dv, u32 t_len, u32 heads,
        // u32 kv_heads, u32 shift), the operands as pointers or (Hopper) tensor maps of their
        // buffers, made by Checked::operands; sizes checked above, fq and fk the forward's
        // (their shapes checked by kernel.rs) or from Checked::features, dq2 and dk2 twice dq's
        // and dk's; a block per (sign, q head, batch) for dq, (sign, kv head, batch) for dk, (64
        // columns, kv head, batch) for dv.
        unsafe {
            let cfg = c.walk(2, c.h, z.grad_shared)?;
            let name = c.kernel(["rla_bwd_dq_d64", "rla_bwd_dq_d128"]);
            launch(dev, &SOURCE, name, cfg, &args(&[0, 1, 2, 3], &dq2))?;
            let cfg = c.walk(2, c.hkv, z.grad_shared)?;
            let name = c.kernel(["rla_bwd_dk_d64", "rla_bwd_dk_d128"]);
            launch(dev, &SOURCE, name, cfg, &args(&[0, 1, 2, 3], &dk2))?;
            let cfg = c.walk(s.d / 64, c.hkv, z.feature_shared)?;
            let name = c.kernel(["rla_bwd_dv_d64", "rla_bwd_dv_d128"]);
            launch(dev, &SOURCE, name, cfg, &args(&[0, 1, 3], &dv))?;
        }
    }
    c.sum_halves(dev, &dq2, &dq, c.h, c.t)?;
    c.sum_halves(dev, &dk2, &dk, c.hkv, c.t - c.shift)?;
    grads(dq, dk, dv)
}
