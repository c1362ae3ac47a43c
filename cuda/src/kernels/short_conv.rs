//! Causal depthwise convolution along time, forward and backward (`kernels/short_conv.cu`).

use super::chunk::check_operands;
use super::{float_kernel, launch, to_u32, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "short_conv",
    source: &[include_str!("../../kernels/short_conv.cu")],
};

/// Most taps (`MAX_TAPS` in short_conv.cu): a thread keeps its channels' weights, and in the
/// weight gradient one sum per tap, in registers.
pub const MAX_TAPS: usize = 8;
/// Steps of a thread's run (`CONV_STEPS`), and the block: `WG_X` channel groups by `WG_Y` runs.
const CONV_STEPS: u32 = 8;
const WG_X: u32 = 32;
const WG_Y: u32 = 8;
/// Blocks per SM the grids aim at (where there are enough runs): the weight gradient's fewer,
/// since each row of its blocks adds a partial sum of every weight for the finish to read.
const CONV_BLOCKS_PER_SM: u32 = 4;
const WEIGHT_GRAD_BLOCKS_PER_SM: u32 = 2;

/// Sizes of a causal depthwise convolution: x `[B, T, C]`, weights `[C, K]` (tap `K - 1` on the
/// current step), bias `[C]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvDims {
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub k: usize,
}

/// How a convolution's kernels are launched: vector or scalar variant, and the grid.
struct Plan {
    vec: bool,
    grid: (u32, u32, u32),
}

impl Plan {
    /// Channel groups of one 16-byte vector where C is a whole number of them and the `[B, T, C]`
    /// buffers are 16-byte aligned (pool blocks are), else of one channel; blocks of `WG_X`
    /// groups by `WG_Y` runs, with enough row splits for `per_sm` blocks per SM (fewer where
    /// there are not that many runs).
    fn new(dev: &CudaDevice, s: ConvDims, data: &[&Buffer], per_sm: u32) -> Plan {
        let per_vec = 16 / data[0].dtype().size_bytes();
        let vec =
            s.c.is_multiple_of(per_vec) && data.iter().all(|b| b.device_ptr().is_multiple_of(16));
        let groups = s.c / if vec { per_vec } else { 1 };
        let tiles = (groups as u32).div_ceil(WG_X);
        let runs = s.b as u64 * (s.t as u64).div_ceil(CONV_STEPS as u64);
        let splits = (dev.sm_count().max(1) * per_sm)
            .div_ceil(tiles)
            .min(runs.div_ceil(WG_Y as u64).min(65535) as u32)
            .max(1);
        Plan {
            vec,
            grid: (tiles, splits, 1),
        }
    }

    fn launch(&self) -> Launch {
        Launch {
            grid: self.grid,
            block: (WG_X, WG_Y, 1),
            shared: 0,
        }
    }
}

/// A short_conv.cu kernel's names for K = 1 ..= MAX_TAPS, of one dtype and variant.
macro_rules! by_taps {
    ($base:literal, $kind:literal) => {
        [
            concat!($base, $kind, "_k1"),
            concat!($base, $kind, "_k2"),
            concat!($base, $kind, "_k3"),
            concat!($base, $kind, "_k4"),
            concat!($base, $kind, "_k5"),
            concat!($base, $kind, "_k6"),
            concat!($base, $kind, "_k7"),
            concat!($base, $kind, "_k8"),
        ]
    };
}

/// The kernels `$base` by dtype and variant (f32, f32 scalar, bf16, bf16 scalar), then taps.
macro_rules! kernels {
    ($base:literal) => {
        [
            by_taps!($base, "_f32"),
            by_taps!($base, "_f32_scalar"),
            by_taps!($base, "_bf16"),
            by_taps!($base, "_bf16_scalar"),
        ]
    };
}

const FORWARD: [[&str; MAX_TAPS]; 4] = kernels!("short_conv_forward");
const BACKWARD_X: [[&str; MAX_TAPS]; 4] = kernels!("short_conv_backward_x");
const BACKWARD_W: [[&str; MAX_TAPS]; 4] = kernels!("short_conv_backward_w");

impl Plan {
    /// The kernel of `family` for this plan's variant, dtype `dt` and `k` taps (1 ..= MAX_TAPS,
    /// checked by `ConvDims::checked`).
    fn kernel(
        &self,
        op: &'static str,
        family: &[[&'static str; MAX_TAPS]; 4],
        dt: DType,
        k: usize,
    ) -> Result<&'static str, CudaError> {
        let at = match dt {
            DType::F32 => 0,
            DType::BF16 => 2,
            other => {
                return Err(CudaError::invalid(
                    op,
                    format!("needs f32 or bf16 data, got {other}"),
                ))
            }
        };
        Ok(family[at + usize::from(!self.vec)][k - 1])
    }
}

impl ConvDims {
    fn checked(&self, op: &'static str) -> Result<[u32; 4], CudaError> {
        if self.k == 0 || self.k > MAX_TAPS {
            return Err(CudaError::invalid(
                op,
                format!("needs 1 to {MAX_TAPS} taps, got {}", self.k),
            ));
        }
        Ok([
            to_u32(op, "B*T", self.b * self.t)?,
            to_u32(op, "T", self.t)?,
            to_u32(op, "C", self.c)?,
            self.k as u32,
        ])
    }
}

/// `y[b, t, c] = bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c]` (zeros before t = 0).
pub fn short_conv(
    dev: &CudaDevice,
    x: &Buffer,
    w: &Buffer,
    bias: &Buffer,
    s: ConvDims,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "short_conv";
    let [bt, t, c, _] = s.checked(OP)?;
    let dt = x.dtype();
    let n = s.b * s.t * s.c;
    check_operands(
        OP,
        dev,
        &[
            ("x", x, dt, n),
            ("w", w, dt, s.c * s.k),
            ("bias", bias, dt, s.c),
            ("y", y, dt, n),
        ],
    )?;
    if n == 0 {
        return Ok(());
    }
    let plan = Plan::new(dev, s, &[x, y], CONV_BLOCKS_PER_SM);
    let name = plan.kernel(OP, &FORWARD, dt, s.k)?;
    // SAFETY: short_conv_forward_T[_scalar]_kK(x, w, bias, y, bt, t, c); x and y hold bt * c
    // elements, 16-byte aligned with c a whole number of vectors in the vector variant (`Plan`),
    // w c * k, bias c (checked); the kernel is the one for k taps.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            plan.launch(),
            &[x, w, bias, y, &bt, &t, &c],
        )
    }
}

/// `(dx, dw, dbias)` of [`short_conv`] given x, the weights and dy.
pub fn short_conv_backward(
    dev: &CudaDevice,
    x: &Buffer,
    w: &Buffer,
    dy: &Buffer,
    s: ConvDims,
) -> Result<(Buffer, Buffer, Buffer), CudaError> {
    const OP: &str = "short_conv_backward";
    let [bt, t, c, k] = s.checked(OP)?;
    let dt = x.dtype();
    let n = s.b * s.t * s.c;
    check_operands(
        OP,
        dev,
        &[("x", x, dt, n), ("w", w, dt, s.c * s.k), ("dy", dy, dt, n)],
    )?;
    let dx = dev.alloc(dt, n)?;
    let dw = dev.alloc(dt, s.c * s.k)?;
    let db = dev.alloc(dt, s.c)?;
    if n == 0 {
        let (mut dw, mut db) = (dw, db);
        dev.memset_zero(&mut dw)?;
        dev.memset_zero(&mut db)?;
        return Ok((dx, dw, db));
    }
    let conv = Plan::new(dev, s, &[x, dy, &dx], CONV_BLOCKS_PER_SM);
    let sums = Plan::new(dev, s, &[x, dy, &dx], WEIGHT_GRAD_BLOCKS_PER_SM);
    let splits = sums.grid.1;
    let partial = dev.alloc(DType::F32, splits as usize * s.c * (s.k + 1))?;
    let names = (
        conv.kernel(OP, &BACKWARD_X, dt, s.k)?,
        sums.kernel(OP, &BACKWARD_W, dt, s.k)?,
        float_kernel!(OP, "short_conv_backward_finish", dt)?,
    );
    // SAFETY: short_conv_backward_x_T[_scalar]_kK(w, dy, dx, bt, t, c),
    // short_conv_backward_w_T[_scalar]_kK(x, dy, partial, bt, t, c) and
    // short_conv_backward_finish_T(partial, dw, db, splits, c, k); x, dy, dx hold bt * c
    // elements, 16-byte aligned with c a whole number of vectors in the vector variants
    // (`Plan`), w and dw c * k, db c, partial splits * c * (k + 1) f32, every one of which the
    // weight-gradient kernel's `splits` rows of blocks write before the finish reads it; the
    // kernels are the ones for k taps.
    unsafe {
        launch(
            dev,
            &SOURCE,
            names.0,
            conv.launch(),
            &[w, dy, &dx, &bt, &t, &c],
        )?;
        launch(
            dev,
            &SOURCE,
            names.1,
            sums.launch(),
            &[x, dy, &partial, &bt, &t, &c],
        )?;
        launch(
            dev,
            &SOURCE,
            names.2,
            Launch::elementwise(dev, (s.c * (s.k + 1)) as u64),
            &[&partial, &dw, &db, &splits, &c, &k],
        )?;
    }
    Ok((dx, dw, db))
}
