//! Elementwise add, sub, mul, div, maximum with numpy broadcasting (`kernels/binary.cu`).

use super::layout::{contiguous_strides, Operand, TwoStrided};
use super::{check_device, check_dtype, check_len, float_kernel, launch, Launch, ELEMENTWISE_VEC};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "binary",
    source: &[include_str!("../../kernels/binary.cu")],
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// The larger of the two; a NaN loses to a number (as `f32::max`).
    Maximum,
}

impl BinaryOp {
    fn code(self) -> i32 {
        match self {
            BinaryOp::Add => 0,
            BinaryOp::Sub => 1,
            BinaryOp::Mul => 2,
            BinaryOp::Div => 3,
            BinaryOp::Maximum => 4,
        }
    }
}

/// `y = a (op) b` over the output shape `dims` (rank <= 6), `y` contiguous.
///
/// `a_strides` and `b_strides` are each operand's element strides over `dims`: its contiguous
/// strides on the dimensions it has, 0 where it is broadcast (including leading dimensions it
/// lacks). Same-shape contiguous operands take a vectorised fast path, and so do broadcasts
/// whose innermost dimension each operand walks or is broadcast along, when it is a whole number
/// of 16-byte vectors (`TwoStrided::grouped`). All three buffers share one dtype, f32 or bf16.
pub fn binary(
    dev: &CudaDevice,
    op: BinaryOp,
    dims: &[usize],
    a: &Buffer,
    a_strides: &[usize],
    b: &Buffer,
    b_strides: &[usize],
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "binary";
    check_device(OP, dev, &[a, b, y])?;
    check_dtype(OP, "b", b, a.dtype())?;
    check_dtype(OP, "y", y, a.dtype())?;
    let p = TwoStrided::new(
        OP,
        dims,
        Operand::of("a", a, a_strides, 0),
        Operand::of("b", b, b_strides, 0),
    )?;
    check_len(OP, "y", y, p.len() as usize)?;
    let code = op.code();
    let n = p.len();
    if n == 0 {
        return Ok(());
    }
    if p.both_contiguous() {
        let name = float_kernel!(OP, "binary", a.dtype())?;
        // SAFETY: binary_T(const T* a, const T* b, T* y, u64 n, int op); all hold n elements
        // (a and b walk 0..n contiguously).
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                Launch::elementwise(dev, n.div_ceil(ELEMENTWISE_VEC)),
                &[a, b, y, &n, &code],
            )
        }
    } else if let Some(g) = grouped(&p, a, b, y) {
        let name = float_kernel!(OP, "binary_grouped", a.dtype())?;
        // SAFETY: binary_grouped_T(const T* a, const T* b, T* y, TwoStrided g, int op);
        // `TwoStrided::new` checked that both operands stay in bounds and `grouped` only groups
        // whole innermost rows of that range; every vector read or written starts at a multiple
        // of 16 bytes (checked there); y holds n = g.len() * 16 / size elements.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                Launch::elementwise(dev, g.len()),
                &[a, b, y, &g, &code],
            )
        }
    } else {
        let name = float_kernel!(OP, "binary_strided", a.dtype())?;
        // SAFETY: binary_strided_T(const T* a, const T* b, T* y, TwoStrided p, int op);
        // `TwoStrided::new` checked that both operands stay in bounds, y holds n elements.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                Launch::elementwise(dev, n),
                &[a, b, y, &p, &code],
            )
        }
    }
}

/// The layout over 16-byte groups of y for `binary_grouped`, where the broadcast allows it and
/// the three buffers are 16-byte aligned (pool blocks are).
fn grouped(p: &TwoStrided, a: &Buffer, b: &Buffer, y: &Buffer) -> Option<TwoStrided> {
    let aligned = [a, b, y].iter().all(|x| x.device_ptr().is_multiple_of(16));
    p.grouped(16 / a.dtype().size_bytes() as u64)
        .filter(|_| aligned)
}

/// [`binary`] for operands of the same shape, all contiguous.
pub fn binary_same_shape(
    dev: &CudaDevice,
    op: BinaryOp,
    a: &Buffer,
    b: &Buffer,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    let dims = [a.len()];
    let s = contiguous_strides(&dims);
    binary(dev, op, &dims, a, &s, b, &s, y)
}
