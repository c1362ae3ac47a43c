//! Causal sliding-window attention (full causal with a window >= T), flash style, forward and
//! backward on bf16 tensor cores (`kernels/attention.cu`, which says how the kernels work).

use super::{check_device, check_dtype, check_len, launch, to_u32, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, DType, Device};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "attention",
    source: concat!(
        include_str!("../../kernels/mma.cuh"),
        include_str!("../../kernels/wgmma.cuh"),
        include_str!("../../kernels/attention.cu")
    ),
};

/// Rows of a query or key tile (the backward's keys per block), the forward's query rows per
/// block, and threads per block (the `#define`s of attention.cu).
const TILE: usize = 64;
const FWD_ROWS: usize = 128;
const FWD_THREADS: u32 = 128;
const BWD_THREADS: u32 = 128;
/// Rows of `swa_bwd_delta` per block, a warp each.
const DELTA_ROWS: u32 = 8;

/// The head layout that the attention kernels (SWA here, RAttention's linear branch in `rla`)
/// share: q `[b, t, h, d]`, k and v `[b, t, hkv, d]`, bf16; q head `i` reads kv head
/// `i / (h / hkv)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
}

impl Heads {
    /// A head dim the kernels exist for, and whole groups of q heads per kv head.
    pub fn check(&self, op: &'static str) -> Result<(), CudaError> {
        if !matches!(self.d, 64 | 128) {
            return Err(CudaError::invalid(
                op,
                format!("head dim {}: kernels exist for 64 and 128", self.d),
            ));
        }
        if self.hkv == 0 || !self.h.is_multiple_of(self.hkv) {
            return Err(CudaError::invalid(
                op,
                format!("{self:?}: h must be a multiple of hkv"),
            ));
        }
        Ok(())
    }

    pub(crate) fn q_len(&self) -> usize {
        self.b * self.t * self.h * self.d
    }

    pub(crate) fn kv_len(&self) -> usize {
        self.b * self.t * self.hkv * self.d
    }

    /// Each of `q` (q-shaped) and `kv` (kv-shaped) bf16 and of its length.
    pub(crate) fn check_io(
        &self,
        op: &'static str,
        q: &[&Buffer],
        kv: &[&Buffer],
    ) -> Result<(), CudaError> {
        for (i, buf) in q.iter().enumerate() {
            check_dtype(op, &format!("q-shaped operand {i}"), buf, DType::BF16)?;
            check_len(op, &format!("q-shaped operand {i}"), buf, self.q_len())?;
        }
        for (i, buf) in kv.iter().enumerate() {
            check_dtype(op, &format!("kv-shaped operand {i}"), buf, DType::BF16)?;
            check_len(op, &format!("kv-shaped operand {i}"), buf, self.kv_len())?;
        }
        Ok(())
    }
}

/// Sizes of an attention call: query `s` sees keys `s - window < r <= s`; scores scaled by
/// `scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attn {
    pub heads: Heads,
    pub window: usize,
    pub scale: f64,
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

impl Attn {
    fn check(&self, op: &'static str) -> Result<Checked, CudaError> {
        let n = self.heads;
        n.check(op)?;
        if self.window == 0 {
            return Err(CudaError::invalid(op, "the window must be at least 1"));
        }
        let (fwd, bwd) = match n.d {
            64 => ("swa_fwd_d64", "swa_bwd_d64"),
            _ => ("swa_fwd_d128", "swa_bwd_d128"),
        };
        Ok(Checked {
            fwd,
            bwd,
            t: to_u32(op, "t", n.t)?,
            h: to_u32(op, "h", n.h)?,
            hkv: to_u32(op, "hkv", n.hkv)?,
            window: to_u32(op, "window", self.window.min(n.t.max(1)))?,
            b: to_u32(op, "b", n.b)?,
        })
    }

    /// Query rows over all heads: the length of lse.
    fn rows(&self) -> usize {
        self.heads.b * self.heads.h * self.heads.t
    }

    /// Blocks of `rows` positions over (time, `heads`, batch), `shared` bytes each.
    fn grid(
        &self,
        c: &Checked,
        rows: usize,
        heads: u32,
        threads: u32,
        shared: usize,
    ) -> Result<Launch, CudaError> {
        Ok(Launch {
            grid: (
                to_u32("attention", "blocks", self.heads.t.div_ceil(rows))?,
                heads,
                c.b,
            ),
            block: (threads, 1, 1),
            shared: to_u32("attention", "shared", shared)?,
        })
    }
}

/// Forward: `o` `[b, t, h, d]` (bf16) and each query row's natural log-sum-exp of its scaled
/// scores, `lse` f32 `[b, h, t]`. q, k, v bf16.
#[allow(clippy::too_many_arguments)]
pub fn swa_forward(
    dev: &Device,
    a: Attn,
    q: &Buffer,
    k: &Buffer,
    v: &Buffer,
    o: &mut Buffer,
    lse: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "swa_forward";
    check_device(OP, dev, &[q, k, v, o, lse])?;
    let c = a.check(OP)?;
    a.heads.check_io(OP, &[q, o], &[k, v])?;
    check_dtype(OP, "lse", lse, DType::F32)?;
    check_len(OP, "lse", lse, a.rows())?;
    if a.rows() == 0 {
        return Ok(());
    }
    let scale_log2 = (a.scale * std::f64::consts::LOG2_E) as f32;
    // The block's Q rows and double-buffered K and V tiles, bf16; 1024 bytes to align the tiles
    // as wgmma reads them.
    let shared = (FWD_ROWS + 4 * TILE) * a.heads.d * 2 + 1024;
    let cfg = a.grid(&c, FWD_ROWS, c.h, FWD_THREADS, shared)?;
    // SAFETY: swa_fwd_dD(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse,
    // u32 t_len, u32 heads, u32 kv_heads, u32 window, float scale_log2); q and o hold b*t*h*d,
    // k and v b*t*hkv*d, lse b*h*t (checked above); the grid covers exactly those.
    unsafe {
        launch(
            dev,
            &SOURCE,
            c.fwd,
            cfg,
            &[q, k, v, o, lse, &c.t, &c.h, &c.hkv, &c.window, &scale_log2],
        )
    }
}

/// What the backward reads: the forward's inputs, its outputs `o` and `lse`, and `dout`.
pub struct Saved<'a> {
    pub q: &'a Buffer,
    pub k: &'a Buffer,
    pub v: &'a Buffer,
    pub o: &'a Buffer,
    pub lse: &'a Buffer,
    pub dout: &'a Buffer,
}

/// Backward: dq (f32 or bf16, accumulated in f32), dk and dv (bf16, summed over the q heads
/// that share a kv head).
pub fn swa_backward(
    dev: &Device,
    a: Attn,
    s: Saved<'_>,
    dq: &mut Buffer,
    dk: &mut Buffer,
    dv: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "swa_backward";
    check_device(OP, dev, &[s.q, s.k, s.v, s.o, s.lse, s.dout, dq, dk, dv])?;
    let c = a.check(OP)?;
    a.heads
        .check_io(OP, &[s.q, s.o, s.dout], &[s.k, s.v, dk, dv])?;
    check_dtype(OP, "lse", s.lse, DType::F32)?;
    check_len(OP, "lse", s.lse, a.rows())?;
    check_len(OP, "dq", dq, a.heads.q_len())?;
    if a.rows() == 0 {
        return Ok(());
    }
    let rows = to_u32(OP, "rows", a.rows())?;
    let d = to_u32(OP, "d", a.heads.d)?;
    let delta = dev.alloc(DType::F32, a.rows())?;
    // SAFETY: swa_bwd_delta(const bf16* o, const bf16* dout, float* delta, u32 rows, u32 t_len,
    // u32 heads, u32 d); o and dout hold rows * d, delta rows; a warp per row.
    unsafe {
        launch(
            dev,
            &SOURCE,
            "swa_bwd_delta",
            Launch {
                grid: (rows.div_ceil(DELTA_ROWS), 1, 1),
                block: (32 * DELTA_ROWS, 1, 1),
                shared: 0,
            },
            &[s.o, s.dout, &delta, &rows, &c.t, &c.h, &d],
        )?;
    }
    let mut acc = match dq.dtype() {
        DType::F32 => None,
        DType::BF16 => Some(dev.alloc(DType::F32, a.heads.q_len())?),
        other => {
            return Err(CudaError::invalid(
                OP,
                format!("dq must be f32 or bf16, got {other}"),
            ))
        }
    };
    let dq_acc = acc.as_mut().unwrap_or(dq);
    dev.memset_zero(dq_acc)?;
    let scale = a.scale as f32;
    // K and V tiles, double-buffered Q and dO tiles, a dS tile (bf16); lse and delta of two query
    // tiles (f32); 1024 bytes to align the tiles as wgmma reads them.
    let shared = (6 * TILE * a.heads.d + TILE * TILE) * 2 + 4 * TILE * 4 + 1024;
    let cfg = a.grid(&c, TILE, c.hkv, BWD_THREADS, shared)?;
    // SAFETY: swa_bwd_dD(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
    // const float* lse, const float* delta, float* dq_acc, bf16* dk, bf16* dv, u32 t_len,
    // u32 heads, u32 kv_heads, u32 window, float scale); sizes checked above, dq_acc holds
    // b*t*h*d f32, delta b*h*t.
    unsafe {
        launch(
            dev,
            &SOURCE,
            c.bwd,
            cfg,
            &[
                s.q, s.k, s.v, s.dout, s.lse, &delta, dq_acc, dk, dv, &c.t, &c.h, &c.hkv,
                &c.window, &scale,
            ],
        )?;
    }
    if let Some(acc) = acc {
        super::cast::cast(dev, &acc, dq)?;
    }
    Ok(())
}
