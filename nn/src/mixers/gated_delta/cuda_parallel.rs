//! The gated delta rule at chunk 64 in bf16 as chunk-parallel kernels around two sequential
//! scans (`gated_delta_parallel.cu`, after swax-cuda's `mma.cuh` and `chunk.cuh`, and
//! `gated_delta.cuh`): what `cuda.rs` runs where a [`Plan`] exists, one block per chunk for the
//! factors and the gradients, one per (head, value tile) for the scans.
use super::{GatedDeltaBackward, GatedDeltaGrads, GatedDeltaIn, GatedDeltaOut};
use std::sync::OnceLock;
use swax_cuda::kernels::chunk::{RecArgs, RecurrentShape};
use swax_cuda::kernels::{launch, to_u32, Launch, CHUNK_CUH, MMA_CUH};
use swax_cuda::{Buffer, CudaDevice, CudaError, DType, KernelSource};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "gated_delta_parallel",
    source: &[
        MMA_CUH,
        CHUNK_CUH,
        include_str!("gated_delta.cuh"),
        include_str!("gated_delta_parallel.cu"),
    ],
};

/// Rows of a chunk (`GDN_L`), threads of a gdn_prep or gdn_grads block (`GDN_THREADS`) and the
/// value tile of gdn_grads (`GDN_BE`).
const L: usize = 64;
const THREADS: u32 = 256;
const BE: usize = 32;
/// The most blocks a grid's y dimension takes (the heads, in every kernel here).
const MAX_GRID_Y: usize = 65535;

/// What a call launches: the head dim, the value tile of the scans (`bv` columns), and each
/// kernel's threads and dynamic shared memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub d: usize,
    pub bv: usize,
    pub prep_threads: u32,
    pub prep_bytes: usize,
    pub scan_threads: u32,
    pub scan_fwd_bytes: usize,
    pub scan_bwd_bytes: usize,
    pub grads_threads: u32,
    pub grads_bytes: usize,
}

/// The sizes for a shape, if these kernels take it: bf16, chunk 64, Dk 32, 64 or 128, Dv a
/// multiple of 32, B·H within a grid dimension, and every kernel's shared memory within
/// `shared_limit` (a block's opt-in limit). The scans take the widest value tile of 128, 64 or
/// 32 columns (at most 2 Dk: wider ones spill at Dk 32) that divides Dv and fits: on the H200 at
/// Dk = Dv = 128, 128 columns make one block per head, 128 blocks in one wave on its 132 SMs.
/// gdn_grads takes value tiles of 32 columns, blocks of 8 warps that fit two an SM.
/// Public so that the kernels' CPU emulation (tests/tests/emulated_kernels.rs) launches them as
/// the wrappers do.
pub fn sizes(s: RecurrentShape, dtype: DType, shared_limit: usize) -> Option<Sizes> {
    let fits = dtype == DType::BF16
        && s.chunk == L
        && matches!(s.dk, 32 | 64 | 128)
        && s.dv.is_multiple_of(32)
        && s.heads() <= MAX_GRID_Y;
    if !fits {
        return None;
    }
    let bv = [128, 64, 32].into_iter().find(|&bv| {
        bv <= 2 * s.dk && s.dv.is_multiple_of(bv) && scan_bytes(s.dk, bv, true) <= shared_limit
    })?;
    let z = Sizes {
        d: s.dk,
        bv,
        prep_threads: THREADS,
        prep_bytes: prep_bytes(s.dk),
        scan_threads: 2 * s.dk as u32,
        scan_fwd_bytes: scan_bytes(s.dk, bv, true),
        scan_bwd_bytes: scan_bytes(s.dk, bv, false),
        grads_threads: THREADS,
        grads_bytes: grads_bytes(s.dk),
    };
    (z.prep_bytes.max(z.grads_bytes) <= shared_limit).then_some(z)
}

/// A call's sizes and kernel arguments.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    z: Sizes,
    args: RecArgs,
}

fn tile(n: usize) -> usize {
    n + 8
}

impl Plan {
    /// The plan for a shape on `dev`, if these kernels take it (see [`sizes`]).
    pub fn new(dev: &CudaDevice, s: RecurrentShape, dtype: DType, args: RecArgs) -> Option<Plan> {
        sizes(s, dtype, dev.max_shared_optin() as usize).map(|z| Plan { z, args })
    }
}

/// Shared memory of gdn_prep: f32 A [64, 64 + 4] and seven per-row vectors; bf16 q and k
/// [64, Dk] and T diag(beta γ) [64, 64] (first the inversion's scratch); bf16 rows padded by 8
/// elements.
fn prep_bytes(d: usize) -> usize {
    4 * (L * (L + 4) + 7 * L) + 2 * (2 * L * tile(d) + L * tile(L))
}

/// Shared memory of a scan: two sets of chunk tiles (three [64, Dk], P [64, 64], a value tile
/// [64, BV] and in the forward T diag(beta) [64, 64]), the state tile [Dk, BV] and a delta tile
/// [64, BV], all bf16.
fn scan_bytes(d: usize, bv: usize, forward: bool) -> usize {
    let tb = if forward { L * tile(L) } else { 0 };
    2 * (2 * (3 * L * tile(d) + L * tile(L) + L * tile(bv) + tb) + d * tile(bv) + L * tile(bv))
}

/// Shared memory of gdn_grads: 14 per-row f32 vectors and 32 floats of block-sum scratch; bf16
/// q and k [64, Dk], T and P [64, 64], the state tiles S0 and dS [Dk, BE] and seven value tiles
/// [64, BE] (where two more [64, 64] tiles go after the last value tile). At most 113,280 bytes
/// (Dk 128): two blocks fit an SM's 228 KiB.
fn grads_bytes(d: usize) -> usize {
    4 * (14 * L + 32)
        + 2 * (2 * L * tile(d) + 2 * L * tile(L) + 2 * d * tile(BE) + 7 * L * tile(BE))
}

/// The (Dk, tile columns) each kernel is instantiated at (the macros at the end of the .cu file):
/// gdn_prep and gdn_grads at each Dk (no tiles), the scans at value tiles BV.
const HEAD_DIMS: [(usize, usize); 3] = [(32, 0), (64, 0), (128, 0)];
const SCAN_TILES: [(usize, usize); 8] = [
    (32, 32),
    (32, 64),
    (64, 32),
    (64, 64),
    (64, 128),
    (128, 32),
    (128, 64),
    (128, 128),
];

/// The instantiation `<base>_<Dk>_<tile>` of a kernel (`<base>_<Dk>` for tile 0), its
/// name interned once (launches take static names).
fn kernel(op: &'static str, base: &str, d: usize, x: usize) -> Result<&'static str, CudaError> {
    type Name = (&'static str, usize, usize, &'static str);
    static NAMES: OnceLock<Vec<Name>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let kinds = [
            ("gdn_prep", &HEAD_DIMS[..]),
            ("gdn_grads", &HEAD_DIMS[..]),
            ("gdn_scan_fwd", &SCAN_TILES[..]),
            ("gdn_scan_bwd", &SCAN_TILES[..]),
        ];
        kinds
            .iter()
            .flat_map(|&(kind, tiles)| {
                tiles.iter().map(move |&(d, x)| {
                    let name = if x == 0 {
                        format!("{kind}_{d}")
                    } else {
                        format!("{kind}_{d}_{x}")
                    };
                    let name: &'static str = Box::leak(name.into_boxed_str());
                    (kind, d, x, name)
                })
            })
            .collect()
    });
    names
        .iter()
        .find(|n| n.0 == base && n.1 == d && n.2 == x)
        .map(|n| n.3)
        .ok_or_else(|| {
            CudaError::invalid(op, format!("no {base} kernel for Dk {d} with tiles of {x}"))
        })
}

/// A chunk's factors, chunk-major bf16 `[B·H, N, rows, cols]` (see the .cu file), and γ_L.
struct Factors {
    w: Buffer,
    kh: Buffer,
    qt: Buffer,
    p: Buffer,
    gl: Buffer,
    /// T diag(beta) in the forward, T in the backward.
    t: Buffer,
}

impl Plan {
    fn chunk_launch(
        op: &'static str,
        s: RecurrentShape,
        threads: u32,
        bytes: usize,
    ) -> Result<Launch, CudaError> {
        Ok(Launch {
            grid: (to_u32(op, "chunks", s.chunks())?, s.heads() as u32, 1),
            block: (threads, 1, 1),
            shared: bytes as u32,
        })
    }

    fn scan_launch(&self, s: RecurrentShape, forward: bool) -> Launch {
        let bytes = if forward {
            self.z.scan_fwd_bytes
        } else {
            self.z.scan_bwd_bytes
        };
        Launch {
            grid: ((s.dv / self.z.bv) as u32, s.heads() as u32, 1),
            block: (self.z.scan_threads, 1, 1),
            shared: bytes as u32,
        }
    }

    /// gdn_prep over every chunk: T diag(beta) (forward) or T (backward) beside the shared factors.
    fn factors(
        &self,
        op: &'static str,
        dev: &CudaDevice,
        x: &GatedDeltaIn<&Buffer>,
        s: RecurrentShape,
        forward: bool,
    ) -> Result<Factors, CudaError> {
        let rows = s.heads() * s.chunks() * L;
        let bf = |n: usize| dev.alloc(DType::BF16, n);
        let f = Factors {
            w: bf(rows * s.dk)?,
            kh: bf(rows * s.dk)?,
            qt: bf(rows * s.dk)?,
            p: bf(rows * L)?,
            gl: dev.alloc(DType::F32, s.heads() * s.chunks())?,
            t: bf(rows * L)?,
        };
        let (tb, tm) = if forward {
            (f.t.device_ptr(), 0u64)
        } else {
            (0u64, f.t.device_ptr())
        };
        let name = kernel(op, "gdn_prep", self.z.d, 0)?;
        let cfg = Self::chunk_launch(op, s, self.z.prep_threads, self.z.prep_bytes)?;
        // SAFETY: gdn_prep(q, k, beta, g, w, kh, qt, pm, tb, tm, gl, RecDims): the inputs were
        // checked at the shape in `args`, the outputs allocated at [B·H, N, 64, cols] (tb or tm
        // null where not wanted), and the shared memory is what the kernel carves at Dk.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                cfg,
                &[
                    x.q, x.k, x.beta, x.g, &f.w, &f.kh, &f.qt, &f.p, &tb, &tm, &f.gl, &self.args,
                ],
            )?;
        }
        Ok(f)
    }

    /// The forward from `x.state`: o and the f32 boundary states `[B, H, N + 1, Dk, Dv]`.
    pub fn forward(
        &self,
        dev: &CudaDevice,
        x: &GatedDeltaIn<&Buffer>,
        s: RecurrentShape,
    ) -> Result<GatedDeltaOut<Buffer>, CudaError> {
        const OP: &str = "gated_delta_forward";
        let f = self.factors(OP, dev, x, s, true)?;
        let s0 = x.state;
        let out = dev.alloc(DType::BF16, s.rows(s.dv))?;
        let states = dev.alloc(DType::F32, s.boundaries(s.dk * s.dv))?;
        let name = kernel(OP, "gdn_scan_fwd", self.z.d, self.z.bv)?;
        // SAFETY: gdn_scan_fwd(s0, w, kh, qt, tb, v, pm, gl, out, states, RecDims) over the
        // factors just made, s0 and v checked at their shapes, out and states allocated at
        // theirs, the shared memory what the kernel carves at (Dk, BV).
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                self.scan_launch(s, true),
                &[
                    s0, &f.w, &f.kh, &f.qt, &f.t, x.v, &f.p, &f.gl, &out, &states, &self.args,
                ],
            )?;
        }
        Ok(GatedDeltaOut {
            o: out,
            boundary: states,
        })
    }

    /// The gradients from the forward's boundary states.
    pub fn backward(
        &self,
        dev: &CudaDevice,
        x: &GatedDeltaBackward<&Buffer>,
        s: RecurrentShape,
    ) -> Result<GatedDeltaGrads<Buffer>, CudaError> {
        const OP: &str = "gated_delta_backward";
        let (xi, states, dout, ds) = (&x.input, x.boundary, x.d_out, x.d_final);
        let f = self.factors(OP, dev, xi, s, false)?;
        let rows = s.heads() * s.chunks() * L;
        let dug = dev.alloc(DType::BF16, rows * s.dv)?;
        let dsg = dev.alloc(DType::BF16, s.heads() * s.chunks() * s.dk * s.dv)?;
        let bf = |n: usize| dev.alloc(DType::BF16, n);
        let g = GatedDeltaIn {
            q: bf(s.rows(s.dk))?,
            k: bf(s.rows(s.dk))?,
            v: bf(s.rows(s.dv))?,
            beta: bf(s.rows(1))?,
            g: bf(s.rows(1))?,
            state: bf(s.heads() * s.dk * s.dv)?,
        };
        let scan = kernel(OP, "gdn_scan_bwd", self.z.d, self.z.bv)?;
        // SAFETY: gdn_scan_bwd(ds, dout, w, kh, qt, pm, gl, dug, dsg, ds0, RecDims): ds and dout
        // checked at their shapes, the factors from gdn_prep, dug [B·H, N, 64, Dv], dsg
        // [B·H, N, Dk, Dv] and ds0 [B, H, Dk, Dv] allocated; shared memory as carved.
        unsafe {
            launch(
                dev,
                &SOURCE,
                scan,
                self.scan_launch(s, false),
                &[
                    ds, dout, &f.w, &f.kh, &f.qt, &f.p, &f.gl, &dug, &dsg, &g.state, &self.args,
                ],
            )?;
        }
        let name = kernel(OP, "gdn_grads", self.z.d, 0)?;
        let cfg = Self::chunk_launch(OP, s, self.z.grads_threads, self.z.grads_bytes)?;
        // SAFETY: gdn_grads(q, k, v, beta, g, dout, states, dsg, dug, tm, pm, dq, dk, dv, dbeta,
        // dg, RecDims): inputs checked, states at [B, H, N + 1, Dk, Dv], the scan's and prep's
        // outputs just made, the gradients allocated at their inputs' sizes; shared memory as
        // carved at Dk.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                cfg,
                &[
                    xi.q, xi.k, xi.v, xi.beta, xi.g, dout, states, &dsg, &dug, &f.t, &f.p, &g.q,
                    &g.k, &g.v, &g.beta, &g.g, &self.args,
                ],
            )?;
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every gdn_grads block fits twice an SM of the H200 (228 KiB, less 1 KiB the runtime
    /// keeps a block), as its launch bounds tell the compiler.
    #[test]
    fn gradient_blocks_fit_two_an_sm() {
        const SM_SHARED: usize = 228 * 1024;
        const PER_BLOCK: usize = 1024;
        for (d, _) in HEAD_DIMS {
            let bytes = grads_bytes(d);
            assert!(
                2 * (bytes + PER_BLOCK) <= SM_SHARED,
                "Dk {d}: {bytes} bytes"
            );
        }
    }
}
