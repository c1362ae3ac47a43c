//! Causal depthwise convolution along time, forward and backward (`kernels/short_conv.cu`).

use super::chunk::check_operands;
use super::{float_kernel, launch, to_u32, Launch};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaError, DType, Device};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "short_conv",
    source: &[include_str!("../../kernels/short_conv.cu")],
};

/// Most taps (`MAX_TAPS` in short_conv.cu): the weight gradient keeps one sum per tap in
/// registers.
pub const MAX_TAPS: usize = 8;
/// Block of the weight-gradient kernel (`WG_X` channels by `WG_Y` rows).
const WG_X: u32 = 32;
const WG_Y: u32 = 8;

/// Sizes of a causal depthwise convolution: x `[B, T, C]`, weights `[C, K]` (tap `K - 1` on the
/// current step), bias `[C]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvDims {
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub k: usize,
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
    dev: &Device,
    x: &Buffer,
    w: &Buffer,
    bias: &Buffer,
    s: ConvDims,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "short_conv";
    let [bt, t, c, k] = s.checked(OP)?;
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
    let name = float_kernel!(OP, "short_conv_forward", dt)?;
    // SAFETY: short_conv_forward_T(x, w, bias, y, bt, t, c, k); x and y hold bt * c elements,
    // w c * k, bias c (checked).
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n as u64),
            &[x, w, bias, y, &bt, &t, &c, &k],
        )
    }
}

/// `(dx, dw, dbias)` of [`short_conv`] given x, the weights and dy.
pub fn short_conv_backward(
    dev: &Device,
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
    let acc = dev.alloc_zeros(DType::F32, s.c * (s.k + 1))?;
    if n == 0 {
        let (mut dw, mut db) = (dw, db);
        dev.memset_zero(&mut dw)?;
        dev.memset_zero(&mut db)?;
        return Ok((dx, dw, db));
    }
    let tiles = c.div_ceil(WG_X);
    // Enough row splits for a few blocks per SM, each split still a few rows per thread.
    let splits = (dev.sm_count().max(1) * 4)
        .div_ceil(tiles)
        .min(bt.div_ceil(WG_Y * 8))
        .clamp(1, 65535);
    let names = (
        float_kernel!(OP, "short_conv_backward_x", dt)?,
        float_kernel!(OP, "short_conv_backward_w", dt)?,
        float_kernel!(OP, "short_conv_backward_finish", dt)?,
    );
    // SAFETY: short_conv_backward_x_T(w, dy, dx, bt, t, c, k), short_conv_backward_w_T(x, dy,
    // acc, bt, t, c, k) and short_conv_backward_finish_T(acc, dw, db, c, k); x, dy, dx hold
    // bt * c elements, w and dw c * k, db c, acc c * (k + 1) zeroed f32 (checked or allocated so).
    unsafe {
        launch(
            dev,
            &SOURCE,
            names.0,
            Launch::elementwise(dev, n as u64),
            &[w, dy, &dx, &bt, &t, &c, &k],
        )?;
        launch(
            dev,
            &SOURCE,
            names.1,
            Launch {
                grid: (tiles, splits, 1),
                block: (WG_X, WG_Y, 1),
                shared: 0,
            },
            &[x, dy, &acc, &bt, &t, &c, &k],
        )?;
        launch(
            dev,
            &SOURCE,
            names.2,
            Launch::elementwise(dev, (s.c * (s.k + 1)) as u64),
            &[&acc, &dw, &db, &c, &k],
        )?;
    }
    Ok((dx, dw, db))
}
