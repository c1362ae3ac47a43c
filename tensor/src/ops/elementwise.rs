//! Elementwise ops: unary maps, broadcasting binary ops, scalar arithmetic (by a host value, or
//! by a one-element tensor with a cast), select.
use crate::backend::{Backend, BinaryOp, BroadcastLayout, UnaryOp};
use crate::{DType, Error, Result, Shape, Tensor};

macro_rules! unary_ops {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(pub fn $name(&self) -> Result<Tensor> {
                self.unary(UnaryOp::$op)
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
        impl Tensor {
            $(pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                self.binary(rhs, BinaryOp::$op)
            })*
        }
    };
}

binary_ops!(add => Add, sub => Sub, mul => Mul, div => Div, maximum => Maximum);

impl Tensor {
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        self.float_only("unary")?;
        Ok(self.with_storage(self.storage().unary(op)?, self.shape().clone()))
    }

    /// `dy * f'(self)` for the unary op `op`: its backward, fused.
    pub fn unary_backward(&self, op: UnaryOp, dy: &Tensor) -> Result<Tensor> {
        self.same_dtype("unary_backward", dy)?;
        self.same_shape("unary_backward", dy)?;
        Ok(self.with_storage(
            self.storage().unary_backward(op, dy.storage())?,
            self.shape().clone(),
        ))
    }

    pub fn scale(&self, c: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Scale(c))
    }

    pub fn add_scalar(&self, c: f64) -> Result<Tensor> {
        self.unary(UnaryOp::AddScalar(c))
    }

    pub fn clamp(&self, lo: f64, hi: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Clamp { lo, hi })
    }

    /// `self · s` stored as `dtype`, `s` one value read where it lies (a scale computed on the
    /// GPU never passes through the host): a scale and a cast in one pass. The product is
    /// computed in `s`'s dtype, `self`'s accumulation dtype, which `dtype` must share: f64
    /// throughout, or an f32 `s` with `self` and the result each f32 or bf16.
    pub fn scale_cast(&self, s: &Tensor, dtype: DType) -> Result<Tensor> {
        const OP: &str = "scale_cast";
        self.float_only(OP)?;
        if s.numel() != 1 {
            return Err(Error::Invalid {
                op: OP,
                msg: format!("the scale is {}, not one value", s.shape()),
            });
        }
        let acc = self.dtype().accumulator();
        if s.dtype() != acc || !dtype.is_float() || dtype.accumulator() != acc {
            return Err(Error::Invalid {
                op: OP,
                msg: format!(
                    "{} values take a scale of dtype {acc} and an output computed in {acc}; got \
                     scale {} and output {dtype}",
                    self.dtype(),
                    s.dtype()
                ),
            });
        }
        let out = self.storage().scale_cast(s.storage(), dtype)?;
        Ok(self.with_storage(out, self.shape().clone()))
    }

    /// A binary op with numpy broadcasting between the operands.
    pub fn binary(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        self.same_dtype("binary", rhs)?;
        self.float_only("binary")?;
        let shape = Shape::broadcast("binary", self.shape(), rhs.shape())?;
        let layout = BroadcastLayout {
            lhs_strides: self.shape().broadcast_strides(&shape),
            rhs_strides: rhs.shape().broadcast_strides(&shape),
            shape: shape.dims().to_vec(),
        };
        Ok(self.with_storage(self.storage().binary(rhs.storage(), op, &layout)?, shape))
    }

    /// `cond != 0 ? on_true : on_false`; `self` is a U32 condition of the same shape.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        self.same_shape("where_cond", on_true)?;
        on_true.same_shape("where_cond", on_false)?;
        on_true.same_dtype("where_cond", on_false)?;
        let out = self
            .storage()
            .where_cond(on_true.storage(), on_false.storage())?;
        Ok(self.with_storage(out, self.shape().clone()))
    }
}
