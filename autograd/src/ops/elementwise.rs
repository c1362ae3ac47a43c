//! Elementwise ops: unary maps (backward: dy·f'(x), fused), broadcasting binary ops (backward:
//! summed back to each operand's shape), select and casts.
use super::{grads, saved};
use crate::Tape;
use swax_tensor::{BinaryOp, DType, Result, Tensor, UnaryOp};

macro_rules! unary_ops {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tape {
            $(pub fn $name(&self, x: &Tensor) -> Result<Tensor> {
                self.unary(x, UnaryOp::$op)
            })*
        }
    };
}

unary_ops!(
    neg => Neg, exp => Exp, log => Log, sqrt => Sqrt, rsqrt => Rsqrt, tanh => Tanh,
    sigmoid => Sigmoid, silu => Silu, softplus => Softplus, log_sigmoid => LogSigmoid,
    relu => Relu, square => Square,
);

macro_rules! binary_ops {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tape {
            $(pub fn $name(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
                self.binary(a, b, BinaryOp::$op)
            })*
        }
    };
}

binary_ops!(add => Add, sub => Sub, mul => Mul, div => Div, maximum => Maximum);

impl Tape {
    pub fn unary(&self, x: &Tensor, op: UnaryOp) -> Result<Tensor> {
        let y = x.unary(op)?;
        // A map whose derivative is a constant keeps nothing.
        let saved = match op {
            UnaryOp::Neg | UnaryOp::Scale(_) | UnaryOp::AddScalar(_) => None,
            _ => Some(x.clone()),
        };
        Ok(self.record("unary", &[x], y, move |dy, _| {
            Ok(vec![Some(match (&saved, op) {
                (Some(x), _) => x.unary_backward(op, dy)?,
                (None, UnaryOp::Neg) => dy.neg()?,
                (None, UnaryOp::Scale(c)) => dy.scale(c)?,
                (None, _) => dy.clone(),
            })])
        }))
    }

    pub fn scale(&self, x: &Tensor, c: f64) -> Result<Tensor> {
        self.unary(x, UnaryOp::Scale(c))
    }

    pub fn add_scalar(&self, x: &Tensor, c: f64) -> Result<Tensor> {
        self.unary(x, UnaryOp::AddScalar(c))
    }

    pub fn clamp(&self, x: &Tensor, lo: f64, hi: f64) -> Result<Tensor> {
        self.unary(x, UnaryOp::Clamp { lo, hi })
    }

    /// Keeps only the operands its backward needs given which are tracked now: add and sub
    /// their shapes, mul each operand only for the other's gradient, div the divisor and (for
    /// the divisor's gradient) the dividend.
    pub fn binary(&self, a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
        let y = a.binary(b, op)?;
        let (sa, sb) = (a.shape().clone(), b.shape().clone());
        let (ta, tb) = (self.is_tracked(a), self.is_tracked(b));
        let keep = |x: &Tensor, need: bool| need.then(|| x.clone());
        let (ka, kb) = match op {
            BinaryOp::Add | BinaryOp::Sub => (None, None),
            BinaryOp::Mul => (keep(a, tb), keep(b, ta)),
            BinaryOp::Div => (keep(a, tb), Some(b.clone())),
            BinaryOp::Maximum => (Some(a.clone()), Some(b.clone())),
        };
        Ok(self.record("binary", &[a, b], y, move |dy, needs| {
            let (a, b) = (|| saved(&ka), || saved(&kb));
            match op {
                BinaryOp::Add => grads(needs, [&|| dy.sum_to_shape(&sa), &|| dy.sum_to_shape(&sb)]),
                BinaryOp::Sub => grads(
                    needs,
                    [&|| dy.sum_to_shape(&sa), &|| dy.neg()?.sum_to_shape(&sb)],
                ),
                BinaryOp::Mul => grads(
                    needs,
                    [&|| dy.mul(b()?)?.sum_to_shape(&sa), &|| {
                        dy.mul(a()?)?.sum_to_shape(&sb)
                    }],
                ),
                BinaryOp::Div => grads(
                    needs,
                    [&|| dy.div(b()?)?.sum_to_shape(&sa), &|| {
                        let b = b()?;
                        dy.mul(a()?)?.div(&b.square()?)?.neg()?.sum_to_shape(&sb)
                    }],
                ),
                // The gradient follows the larger operand (ties go to b); relu' of a − b is
                // exactly that indicator.
                BinaryOp::Maximum => {
                    let to_a = a()?.sub(b()?)?.unary_backward(UnaryOp::Relu, dy)?;
                    grads(
                        needs,
                        [&|| to_a.sum_to_shape(&sa), &|| {
                            dy.sub(&to_a)?.sum_to_shape(&sb)
                        }],
                    )
                }
            }
        }))
    }

    /// `cond != 0 ? a : b` (cond U32, same shape; it gets no gradient).
    pub fn where_cond(&self, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let y = cond.where_cond(a, b)?;
        let c = cond.clone();
        Ok(
            self.record("where_cond", &[cond, a, b], y, move |dy, needs| {
                let zero = dy.zeros_like()?;
                grads(
                    needs,
                    [&|| unreachable_grad(), &|| c.where_cond(dy, &zero), &|| {
                        c.where_cond(&zero, dy)
                    }],
                )
            }),
        )
    }

    /// A dtype cast; the gradient is cast back.
    pub fn to_dtype(&self, x: &Tensor, dtype: DType) -> Result<Tensor> {
        let y = x.to_dtype(dtype)?;
        let from = x.dtype();
        Ok(self.record("to_dtype", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.to_dtype(from)?)])
        }))
    }
}

/// Index and condition inputs are never tracked (they are integers), so this never runs.
pub(crate) fn unreachable_grad() -> Result<Tensor> {
    Err(swax_tensor::Error::Invalid {
        op: "backward",
        msg: "integer tensors have no gradient".into(),
    })
}
