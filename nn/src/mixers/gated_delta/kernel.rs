//! The gated delta rule's fused chunkwise kernel as two ops, forward and backward, over named
//! operands: their checks, and the hand-off to the kernel of the device that holds the operands
//! (`cpu.rs`, `cuda.rs`) through `DeviceOp`.
use super::{cpu, cuda};
use crate::mixers::recurrent::{cuda_takes, RecurrentChecks};
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::cpu::CpuStorage;
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DType, Device, DeviceOp, Error, Result, Storage, Tensor};

/// The inputs: q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, beta and the log decay g `[B, T, H]` and
/// the initial state `[B, H, Dk, Dv]`. As `GatedDeltaGrads`, their gradients.
#[derive(Clone, Debug)]
pub struct GatedDeltaIn<T = Tensor> {
    pub q: T,
    pub k: T,
    pub v: T,
    pub beta: T,
    pub g: T,
    pub state: T,
}

/// The gradients of the inputs, named as the inputs.
pub type GatedDeltaGrads<T = Tensor> = GatedDeltaIn<T>;

/// The forward's results: o `[B, T, H, Dv]` and the state before each chunk and after the last
/// (`[B, H, N + 1, Dk, Dv]`, f32 for bf16 operands).
#[derive(Clone, Debug)]
pub struct GatedDeltaOut<T = Tensor> {
    pub o: T,
    pub boundary: T,
}

/// What the backward reads: the forward's inputs and boundary states, the gradient of o and
/// that of the final state (zeros where the final state is unused).
#[derive(Clone, Debug)]
pub struct GatedDeltaBackward<T = Tensor> {
    pub input: GatedDeltaIn<T>,
    pub boundary: T,
    pub d_out: T,
    pub d_final: T,
}

swax_tensor::operands!(GatedDeltaIn {
    q,
    k,
    v,
    beta,
    g,
    state
});
swax_tensor::operands!(GatedDeltaBackward {
    input: nested,
    boundary,
    d_out,
    d_final
});

impl<S: Into<Storage>> GatedDeltaIn<S> {
    /// A kernel's gradients as tensors shaped as the inputs.
    fn tensors(self, d: &RecurrentShape) -> Result<GatedDeltaGrads> {
        let (b, t, h) = (d.b, d.t, d.h);
        Ok(GatedDeltaIn {
            q: Tensor::from_storage(self.q, vec![b, t, h, d.dk])?,
            k: Tensor::from_storage(self.k, vec![b, t, h, d.dk])?,
            v: Tensor::from_storage(self.v, vec![b, t, h, d.dv])?,
            beta: Tensor::from_storage(self.beta, vec![b, t, h])?,
            g: Tensor::from_storage(self.g, vec![b, t, h])?,
            state: Tensor::from_storage(self.state, vec![b, h, d.dk, d.dv])?,
        })
    }
}

impl<S: Into<Storage>> GatedDeltaOut<S> {
    /// A kernel's results as tensors.
    fn tensors(self, d: &RecurrentShape) -> Result<GatedDeltaOut> {
        let nb = d.chunks() + 1;
        Ok(GatedDeltaOut {
            o: Tensor::from_storage(self.o, vec![d.b, d.t, d.h, d.dv])?,
            boundary: Tensor::from_storage(self.boundary, vec![d.b, d.h, nb, d.dk, d.dv])?,
        })
    }
}

/// Checks the inputs of either pass (the state, or its gradient, of the inputs' dtype); returns
/// the sizes.
fn check(op: &'static str, x: &GatedDeltaIn<&Tensor>, chunk: usize) -> Result<RecurrentShape> {
    let d = RecurrentShape::check(op, x.q, x.k, x.v, &[x.beta, x.g], chunk)?;
    d.check_state(op, x.q, x.state, &[d.dk, d.dv])?;
    Ok(d)
}

/// The chunkwise forward from `x.state`, `chunk` steps per chunk.
pub fn forward(x: &GatedDeltaIn<&Tensor>, chunk: usize) -> Result<GatedDeltaOut> {
    let dims = check(Forward::NAME, x, chunk)?;
    Tensor::apply(&Forward { dims }, x)
}

/// The gradients of `forward` from its saved inputs and boundary states and the gradients of
/// its output and final state.
pub fn backward(x: &GatedDeltaBackward<&Tensor>, chunk: usize) -> Result<GatedDeltaGrads> {
    let op = Backward::NAME;
    let dims = check(op, &x.input, chunk)?;
    check(
        op,
        &GatedDeltaIn {
            state: x.d_final,
            ..x.input.clone()
        },
        chunk,
    )?;
    dims.check_shape(op, x.boundary, &[dims.chunks() + 1, dims.dk, dims.dv])?;
    if x.d_out.shape() != x.input.v.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.input.v.shape().clone(),
            rhs: x.d_out.shape().clone(),
        });
    }
    Tensor::apply(&Backward { dims }, x)
}

/// Whether the fused kernel runs for queries `[B, T, H, Dk]` and values of head dim `dv` of
/// this dtype on this device: the CPU's takes every float dtype, the CUDA wrapper's own check
/// says for the GPU.
pub fn has_kernel(device: Device, dtype: DType, dk: usize, dv: usize) -> bool {
    match device {
        Device::Cpu => dtype.is_float(),
        Device::Cuda(_) => cuda_takes("gated_delta", dtype, dk, dv),
    }
}

struct Forward {
    dims: RecurrentShape,
}

impl DeviceOp for Forward {
    const NAME: &'static str = "gated_delta::forward";
    type In = GatedDeltaIn;
    type Out = GatedDeltaOut;

    fn cpu(&self, x: GatedDeltaIn<&CpuStorage>) -> Result<GatedDeltaOut> {
        cpu::forward(Self::NAME, &x, &self.dims)?.tensors(&self.dims)
    }

    fn cuda(&self, x: GatedDeltaIn<&CudaStorage>) -> Result<GatedDeltaOut> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::forward(&x, self.dims)?.tensors(&self.dims)
    }
}

struct Backward {
    dims: RecurrentShape,
}

impl DeviceOp for Backward {
    const NAME: &'static str = "gated_delta::backward";
    type In = GatedDeltaBackward;
    type Out = GatedDeltaGrads;

    fn cpu(&self, x: GatedDeltaBackward<&CpuStorage>) -> Result<GatedDeltaGrads> {
        cpu::backward(Self::NAME, &x, &self.dims)?.tensors(&self.dims)
    }

    fn cuda(&self, x: GatedDeltaBackward<&CudaStorage>) -> Result<GatedDeltaGrads> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::backward(&x, self.dims)?.tensors(&self.dims)
    }
}
