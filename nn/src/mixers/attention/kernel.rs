//! Sliding-window attention's fused kernel as two ops, forward and backward, over named
//! operands: their checks, and the hand-off to the kernel of the device that holds the operands
//! (`cpu.rs`, `cuda.rs`) through `DeviceOp`.
use super::{cpu, cuda, shape};
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::cpu::CpuStorage;
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DType, Device, DeviceOp, Error, Result, Storage, Tensor};

/// The inputs: q `[B, T, H, D]`, k and v `[B, T, Hkv, D]`. As `SwaGrads`, their gradients.
#[derive(Clone, Debug)]
pub struct SwaIn<T = Tensor> {
    pub q: T,
    pub k: T,
    pub v: T,
}

/// The gradients of the inputs, named as the inputs.
pub type SwaGrads<T = Tensor> = SwaIn<T>;

/// The forward's results: o `[B, T, H, D]` and each query row's log-sum-exp of its scaled
/// scores, lse `[B, H, T]` (f32 for bf16 operands).
#[derive(Clone, Debug)]
pub struct SwaOut<T = Tensor> {
    pub o: T,
    pub lse: T,
}

/// What the backward reads: the forward's inputs and results, and the gradient dout of o.
#[derive(Clone, Debug)]
pub struct SwaBackward<T = Tensor> {
    pub input: SwaIn<T>,
    pub out: SwaOut<T>,
    pub dout: T,
}

swax_tensor::operands!(SwaIn { q, k, v });
swax_tensor::operands!(SwaOut { o, lse });
swax_tensor::operands!(SwaBackward {
    input: nested,
    out: nested,
    dout
});

impl<S: Into<Storage>> SwaIn<S> {
    /// A kernel's q-, k- and v-shaped results as tensors.
    pub(crate) fn tensors(self, s: &AttnShape) -> Result<SwaIn> {
        let (q, kv) = (vec![s.b, s.t, s.h, s.d], vec![s.b, s.t, s.hkv, s.d]);
        Ok(SwaIn {
            q: Tensor::from_storage(self.q, q)?,
            k: Tensor::from_storage(self.k, kv.clone())?,
            v: Tensor::from_storage(self.v, kv)?,
        })
    }
}

impl<S: Into<Storage>> SwaOut<S> {
    /// A kernel's results as tensors.
    fn tensors(self, s: &AttnShape) -> Result<SwaOut> {
        Ok(SwaOut {
            o: Tensor::from_storage(self.o, vec![s.b, s.t, s.h, s.d])?,
            lse: Tensor::from_storage(self.lse, vec![s.b, s.h, s.t])?,
        })
    }
}

/// The forward with window `window` (query t sees keys `t - window < s <= t`), scores scaled by
/// `scale`.
pub fn forward(x: &SwaIn<&Tensor>, window: usize, scale: f64) -> Result<SwaOut> {
    let dims = shape(Forward::NAME, x.q, x.k, x.v, window)?;
    Tensor::apply(
        &Forward {
            dims,
            window,
            scale,
        },
        x,
    )
}

/// The gradients of `forward` from its saved inputs and results and the gradient of o.
pub fn backward(x: &SwaBackward<&Tensor>, window: usize, scale: f64) -> Result<SwaGrads> {
    let op = Backward::NAME;
    let i = &x.input;
    let dims = shape(op, i.q, i.k, i.v, window)?;
    for y in [x.out.o, x.dout] {
        if y.shape() != i.q.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: i.q.shape().clone(),
                rhs: y.shape().clone(),
            });
        }
    }
    if x.out.lse.dims() != [dims.b, dims.h, dims.t] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: i.q.shape().clone(),
            rhs: x.out.lse.shape().clone(),
        });
    }
    Tensor::apply(
        &Backward {
            dims,
            window,
            scale,
        },
        x,
    )
}

/// Whether the fused kernel runs for a query of head dim `d` of this dtype on this device: the
/// CPU's takes every float dtype; on the GPU, bf16 of the head dims the CUDA wrapper's own check
/// takes (the kernels would round f32 to bf16 inside, so an f32 model keeps the exact reference).
pub fn has_kernel(device: Device, dtype: DType, d: usize) -> bool {
    match device {
        Device::Cpu => dtype.is_float(),
        Device::Cuda(_) => {
            let one_head = AttnShape {
                b: 1,
                t: 1,
                h: 1,
                hkv: 1,
                d,
            };
            dtype == DType::BF16 && one_head.check("has_kernel").is_ok()
        }
    }
}

struct Forward {
    dims: AttnShape,
    window: usize,
    scale: f64,
}

impl DeviceOp for Forward {
    const NAME: &'static str = "swa::forward";
    type In = SwaIn;
    type Out = SwaOut;

    fn cpu(&self, x: SwaIn<&CpuStorage>) -> Result<SwaOut> {
        cpu::forward(Self::NAME, &x, &self.dims, self.window, self.scale)?.tensors(&self.dims)
    }

    fn cuda(&self, x: SwaIn<&CudaStorage>) -> Result<SwaOut> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::forward(&x, self.dims, self.window, self.scale)?.tensors(&self.dims)
    }
}

struct Backward {
    dims: AttnShape,
    window: usize,
    scale: f64,
}

impl DeviceOp for Backward {
    const NAME: &'static str = "swa::backward";
    type In = SwaBackward;
    type Out = SwaGrads;

    fn cpu(&self, x: SwaBackward<&CpuStorage>) -> Result<SwaGrads> {
        cpu::backward(Self::NAME, &x, &self.dims, self.window, self.scale)?.tensors(&self.dims)
    }

    fn cuda(&self, x: SwaBackward<&CudaStorage>) -> Result<SwaGrads> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::backward(&x, self.dims, self.window, self.scale)?.tensors(&self.dims)
    }
}
