//! Elementwise unary functions (`kernels/unary.cu`) and their fused backward.

use super::{check_device, check_like, float_kernel, launch, Launch, ELEMENTWISE_VEC};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "unary",
    source: &[include_str!("../../kernels/unary.cu")],
};

/// y = f(x), elementwise. Parameters are f64 for the CPU's f64 gradient checks; the kernels
/// take them as f32.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    /// x * sigmoid(x)
    Silu,
    /// log(1 + exp(x)), computed without overflow
    Softplus,
    /// log(sigmoid(x)) = -softplus(-x)
    LogSigmoid,
    Relu,
    Square,
    /// x * c
    Scale(f64),
    /// x + c
    AddScalar(f64),
    /// min(max(x, lo), hi); the gradient passes where lo <= x <= hi
    Clamp {
        lo: f64,
        hi: f64,
    },
}

impl UnaryOp {
    /// (op number in unary.cu, parameter a, parameter b)
    fn code(self) -> (i32, f32, f32) {
        match self {
            UnaryOp::Neg => (0, 0.0, 0.0),
            UnaryOp::Exp => (1, 0.0, 0.0),
            UnaryOp::Log => (2, 0.0, 0.0),
            UnaryOp::Sqrt => (3, 0.0, 0.0),
            UnaryOp::Rsqrt => (4, 0.0, 0.0),
            UnaryOp::Tanh => (5, 0.0, 0.0),
            UnaryOp::Sigmoid => (6, 0.0, 0.0),
            UnaryOp::Silu => (7, 0.0, 0.0),
            UnaryOp::Softplus => (8, 0.0, 0.0),
            UnaryOp::LogSigmoid => (9, 0.0, 0.0),
            UnaryOp::Relu => (10, 0.0, 0.0),
            UnaryOp::Square => (11, 0.0, 0.0),
            UnaryOp::Scale(c) => (12, c as f32, 0.0),
            UnaryOp::Clamp { lo, hi } => (13, lo as f32, hi as f32),
            UnaryOp::AddScalar(c) => (14, c as f32, 0.0),
        }
    }

    /// Whether f'(x) can be computed exactly from y = f(x) alone, so autograd may keep only the
    /// output. Not for silu and square (not invertible) nor clamp (y cannot tell x = lo from
    /// x < lo).
    pub fn derivative_from_output(self) -> bool {
        !matches!(
            self,
            UnaryOp::Silu | UnaryOp::Square | UnaryOp::Clamp { .. }
        )
    }
}

/// What the backward is given besides dy.
#[derive(Debug, Clone, Copy)]
pub enum Saved<'a> {
    /// The forward's input x.
    Input(&'a Buffer),
    /// The forward's output y (only where `UnaryOp::derivative_from_output`).
    Output(&'a Buffer),
}

/// `y = op(x)` elementwise; `x` and `y` f32 or bf16, same dtype and length.
pub fn unary(dev: &CudaDevice, op: UnaryOp, x: &Buffer, y: &mut Buffer) -> Result<(), CudaError> {
    const OP: &str = "unary";
    check_device(OP, dev, &[x, y])?;
    check_like(OP, "y", y, x)?;
    let name = float_kernel!(OP, "unary", x.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    let (code, a, b) = op.code();
    let n = x.len() as u64;
    // SAFETY: unary_T(const T* x, T* y, u64 n, int op, float a, float b); x and y hold n
    // elements of T.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n.div_ceil(ELEMENTWISE_VEC)),
            &[x, y, &n, &code, &a, &b],
        )
    }
}

/// `dx = dy * op'(x)` elementwise, with x or y = op(x) as `saved`; all buffers the same dtype
/// (f32 or bf16) and length.
pub fn unary_backward(
    dev: &CudaDevice,
    op: UnaryOp,
    saved: Saved<'_>,
    dy: &Buffer,
    dx: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "unary_backward";
    let (s, from_y) = match saved {
        Saved::Input(x) => (x, 0i32),
        Saved::Output(y) if op.derivative_from_output() => (y, 1),
        Saved::Output(_) => {
            return Err(CudaError::invalid(
                OP,
                format!("the derivative of {op:?} needs the input, not the output"),
            ))
        }
    };
    check_device(OP, dev, &[s, dy, dx])?;
    check_like(OP, "dy", dy, s)?;
    check_like(OP, "dx", dx, s)?;
    let name = float_kernel!(OP, "unary_bwd", s.dtype())?;
    if s.is_empty() {
        return Ok(());
    }
    let (code, a, b) = op.code();
    let n = s.len() as u64;
    // SAFETY: unary_bwd_T(const T* saved, const T* dy, T* dx, u64 n, int op, float a, float b,
    // int from_y); all three hold n elements of T.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::elementwise(dev, n.div_ceil(ELEMENTWISE_VEC)),
            &[s, dy, dx, &n, &code, &a, &b, &from_y],
        )
    }
}
