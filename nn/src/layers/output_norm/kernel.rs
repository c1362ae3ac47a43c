//! xLSTM's gated head norm as two ops, forward and backward, over named operands: their shape
//! checks, and the hand-off to the kernel of the device that holds the operands (`cpu.rs`,
//! `cuda.rs`) through `DeviceOp`.
use super::{cpu, cuda};
use swax_tensor::cpu::CpuStorage;
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DeviceOp, Error, Result, Shape, Tensor};

/// The inputs: x and the gate's preactivation o `[.., H, D]`, the weight `[H, D]`. As
/// `GatedHeadNormGrads`, their gradients.
#[derive(Clone, Debug)]
pub struct GatedHeadNormIn<T = Tensor> {
    pub x: T,
    pub o: T,
    pub weight: T,
}

/// The gradients of the inputs, named as the inputs.
pub type GatedHeadNormGrads<T = Tensor> = GatedHeadNormIn<T>;

/// What the backward reads: the forward's inputs (the row statistics are recomputed from x)
/// and the gradient dy of y.
#[derive(Clone, Debug)]
pub struct GatedHeadNormBackward<T = Tensor> {
    pub input: GatedHeadNormIn<T>,
    pub dy: T,
}

swax_tensor::operands!(GatedHeadNormIn { x, o, weight });
swax_tensor::operands!(GatedHeadNormBackward { input: nested, dy });

/// The sizes the kernels take: x's shape, its heads H and its row length D.
struct Dims {
    x: Shape,
    heads: usize,
    n: usize,
}

impl Dims {
    fn weight(&self) -> Vec<usize> {
        vec![self.heads, self.n]
    }
}

/// The same dtype and device as x.
fn like_x(op: &'static str, x: &Tensor, other: &Tensor) -> Result<()> {
    if other.dtype() != x.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: x.dtype(),
            rhs: other.dtype(),
        });
    }
    if other.device() != x.device() {
        return Err(Error::DeviceMismatch {
            op,
            lhs: x.device(),
            rhs: other.device(),
        });
    }
    Ok(())
}

/// Checks the inputs: x of a float dtype, o of x's shape, the weight `[H, D]` for x
/// `[.., H, D]`, all of one dtype and device; returns the sizes.
fn check(op: &'static str, x: &GatedHeadNormIn<&Tensor>) -> Result<Dims> {
    let t = x.x;
    if !t.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: t.dtype(),
        });
    }
    let mismatch = |other: &Tensor| Error::ShapeMismatch {
        op,
        lhs: t.shape().clone(),
        rhs: other.shape().clone(),
    };
    if x.o.shape() != t.shape() {
        return Err(mismatch(x.o));
    }
    like_x(op, t, x.o)?;
    like_x(op, t, x.weight)?;
    let r = t.rank();
    if r < 2 || x.weight.dims() != &t.dims()[r - 2..] {
        return Err(mismatch(x.weight));
    }
    Ok(Dims {
        x: t.shape().clone(),
        heads: t.dims()[r - 2],
        n: t.dims()[r - 1],
    })
}

/// `LayerNorm_D(x) · weight[h] · sigmoid(o)` (the equations: `mod.rs`).
pub fn gated_head_norm(x: &GatedHeadNormIn<&Tensor>, eps: f64) -> Result<Tensor> {
    let dims = check(Forward::NAME, x)?;
    Tensor::apply(&Forward { dims, eps }, x)
}

/// The gradients of x, o and the weight given dy, the row statistics recomputed from x.
pub fn gated_head_norm_backward(
    x: &GatedHeadNormBackward<&Tensor>,
    eps: f64,
) -> Result<GatedHeadNormGrads> {
    let op = Backward::NAME;
    let dims = check(op, &x.input)?;
    if x.dy.shape() != x.input.x.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.input.x.shape().clone(),
            rhs: x.dy.shape().clone(),
        });
    }
    like_x(op, x.input.x, x.dy)?;
    Tensor::apply(&Backward { dims, eps }, x)
}

struct Forward {
    dims: Dims,
    eps: f64,
}

impl DeviceOp for Forward {
    const NAME: &'static str = "gated_head_norm";
    type In = GatedHeadNormIn;
    type Out = Tensor;

    fn cpu(&self, x: GatedHeadNormIn<&CpuStorage>) -> Result<Tensor> {
        let (d, eps) = (&self.dims, self.eps);
        Tensor::from_storage(cpu::forward(Self::NAME, &x, d.heads, d.n, eps)?, &d.x)
    }

    fn cuda(&self, x: GatedHeadNormIn<&CudaStorage>) -> Result<Tensor> {
        let d = &self.dims;
        let x = x.try_map(|s| Ok(s.buffer()))?;
        Tensor::from_storage(cuda::forward(&x, d.heads, d.n, self.eps as f32)?, &d.x)
    }
}

struct Backward {
    dims: Dims,
    eps: f64,
}

impl Backward {
    /// A kernel's gradients as tensors shaped as the inputs.
    fn tensors<S: Into<swax_tensor::Storage>>(
        &self,
        g: GatedHeadNormGrads<S>,
    ) -> Result<GatedHeadNormGrads> {
        Ok(GatedHeadNormIn {
            x: Tensor::from_storage(g.x, &self.dims.x)?,
            o: Tensor::from_storage(g.o, &self.dims.x)?,
            weight: Tensor::from_storage(g.weight, self.dims.weight())?,
        })
    }
}

impl DeviceOp for Backward {
    const NAME: &'static str = "gated_head_norm_backward";
    type In = GatedHeadNormBackward;
    type Out = GatedHeadNormGrads;

    fn cpu(&self, x: GatedHeadNormBackward<&CpuStorage>) -> Result<GatedHeadNormGrads> {
        let d = &self.dims;
        self.tensors(cpu::backward(Self::NAME, &x, d.heads, d.n, self.eps)?)
    }

    fn cuda(&self, x: GatedHeadNormBackward<&CudaStorage>) -> Result<GatedHeadNormGrads> {
        let d = &self.dims;
        let x = x.try_map(|s| Ok(s.buffer()))?;
        self.tensors(cuda::backward(&x, d.heads, d.n, self.eps as f32)?)
    }
}
