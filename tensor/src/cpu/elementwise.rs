//! Elementwise kernels: unary maps and their derivatives, broadcasting binary ops, scaling by a
//! value held in a tensor, select.
use super::{Real, PAR_MIN};
use crate::backend::{BinaryOp, BroadcastLayout, UnaryOp};
use rayon::prelude::*;

/// Applies `f` to every index of a new vector, in parallel when it is large.
pub(crate) fn build<T: Real>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    if n >= PAR_MIN {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// `x · c` elementwise.
pub(crate) fn scale<T: Real>(x: &[T], c: T) -> Vec<T> {
    build(x.len(), |i| x[i] * c)
}

pub fn sigmoid<T: Real>(x: T) -> T {
    T::one() / (T::one() + (-x).exp())
}

/// log(1 + e^x) without overflow for large x or underflow for very negative x.
pub fn softplus<T: Real>(x: T) -> T {
    x.max(T::zero()) + (-x.abs()).exp().ln_1p()
}

fn apply<T: Real>(x: T, op: UnaryOp) -> T {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => x.sqrt().recip(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Softplus => softplus(x),
        UnaryOp::LogSigmoid => -softplus(-x),
        UnaryOp::Relu => x.max(T::zero()),
        UnaryOp::Square => x * x,
        UnaryOp::Scale(c) => x * T::of(c),
        UnaryOp::AddScalar(c) => x + T::of(c),
        UnaryOp::Clamp { lo, hi } => x.max(T::of(lo)).min(T::of(hi)),
    }
}

/// The derivative of `op` at x.
fn derivative<T: Real>(x: T, op: UnaryOp) -> T {
    let one = T::one();
    match op {
        UnaryOp::Neg => -one,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.recip(),
        UnaryOp::Sqrt => T::of(0.5) / x.sqrt(),
        UnaryOp::Rsqrt => T::of(-0.5) / (x * x.sqrt()),
        UnaryOp::Tanh => one - x.tanh().powi(2),
        UnaryOp::Sigmoid => sigmoid(x) * (one - sigmoid(x)),
        UnaryOp::Silu => {
            let s = sigmoid(x);
            s * (one + x * (one - s))
        }
        UnaryOp::Softplus => sigmoid(x),
        UnaryOp::LogSigmoid => sigmoid(-x),
        UnaryOp::Relu => {
            if x > T::zero() {
                one
            } else {
                T::zero()
            }
        }
        UnaryOp::Square => x + x,
        UnaryOp::Scale(c) => T::of(c),
        UnaryOp::AddScalar(_) => one,
        // Subgradient 1 on the boundary, like PyTorch.
        UnaryOp::Clamp { lo, hi } => {
            if x >= T::of(lo) && x <= T::of(hi) {
                one
            } else {
                T::zero()
            }
        }
    }
}

pub(crate) fn unary<T: Real>(x: &[T], op: UnaryOp) -> Vec<T> {
    build(x.len(), |i| apply(x[i], op))
}

pub(crate) fn unary_backward<T: Real>(x: &[T], dy: &[T], op: UnaryOp) -> Vec<T> {
    build(x.len(), |i| dy[i] * derivative(x[i], op))
}

fn combine<T: Real>(a: T, b: T, op: BinaryOp) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Maximum => a.max(b),
    }
}

pub(crate) fn binary<T: Real>(a: &[T], b: &[T], op: BinaryOp, layout: &BroadcastLayout) -> Vec<T> {
    let n: usize = layout.shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    if a.len() == n && b.len() == n {
        return build(n, |i| combine(a[i], b[i], op));
    }
    // Walk the output a row (last dim) at a time: decompose the row index into coordinates
    // once, then stride through the row.
    let rank = layout.shape.len();
    let last = layout.shape[rank - 1];
    let (sa, sb) = (layout.lhs_strides[rank - 1], layout.rhs_strides[rank - 1]);
    let mut out = vec![T::zero(); n];
    let fill_row = |(r, row): (usize, &mut [T])| {
        let (mut rest, mut ia, mut ib) = (r, 0, 0);
        for d in (0..rank - 1).rev() {
            let coord = rest % layout.shape[d];
            rest /= layout.shape[d];
            ia += coord * layout.lhs_strides[d];
            ib += coord * layout.rhs_strides[d];
        }
        for (j, o) in row.iter_mut().enumerate() {
            *o = combine(a[ia + j * sa], b[ib + j * sb], op);
        }
    };
    if n >= PAR_MIN {
        out.par_chunks_mut(last).enumerate().for_each(fill_row);
    } else {
        out.chunks_mut(last).enumerate().for_each(fill_row);
    }
    out
}

pub(crate) fn where_cond<T: Real>(cond: &[u32], a: &[T], b: &[T]) -> Vec<T> {
    build(cond.len(), |i| if cond[i] != 0 { a[i] } else { b[i] })
}
