//! The mLSTM's fused chunkwise kernel as two ops, forward and backward, over named operands:
//! their checks, and the hand-off to the kernel of the device that holds the operands (`cpu.rs`,
//! `cuda.rs`) through `DeviceOp`.
use super::{cpu, cuda, MlstmState};
use crate::mixers::recurrent::{cuda_takes, RecurrentChecks};
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::cpu::CpuStorage;
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DType, Device, DeviceOp, Error, Result, Storage, Tensor};

/// The inputs: q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]`, the gate preactivations i, f `[B, T, H]`
/// and the initial state. As `MlstmGrads`, their gradients.
#[derive(Clone, Debug)]
pub struct MlstmIn<T = Tensor> {
    pub q: T,
    pub k: T,
    pub v: T,
    pub i: T,
    pub f: T,
    pub state: MlstmState<T>,
}

/// The gradients of the inputs, named as the inputs.
pub type MlstmGrads<T = Tensor> = MlstmIn<T>;

/// The forward's results: h `[B, T, H, Dv]`, the state before each chunk and after the last
/// (`[B, H, N + 1, ..]`, f32 for bf16 operands), and per step the two parts of h's denominator
/// `max(|q_t^T n_t|, exp(-m_t))`: `den` `[B, H, 2, T]` (f32 for bf16 operands) holds each head's
/// `q_t^T n_t` (signed) then its `m_t`, which the CUDA backward reads instead of recomputing each
/// chunk's scores.
#[derive(Clone, Debug)]
pub struct MlstmOut<T = Tensor> {
    pub h: T,
    pub boundary: MlstmState<T>,
    pub den: T,
}

/// What the backward reads: the forward's inputs and results, the gradient dh of h and that of
/// the final state (zeros where the final state is unused).
#[derive(Clone, Debug)]
pub struct MlstmBackward<T = Tensor> {
    pub input: MlstmIn<T>,
    pub out: MlstmOut<T>,
    pub dh: T,
    pub d_final: MlstmState<T>,
}

swax_tensor::operands!(MlstmIn {
    q,
    k,
    v,
    i,
    f,
    state: nested
});
swax_tensor::operands!(MlstmOut {
    h,
    boundary: nested,
    den
});
swax_tensor::operands!(MlstmBackward {
    input: nested,
    out: nested,
    dh,
    d_final: nested
});

impl<S: Into<Storage>> MlstmIn<S> {
    /// A kernel's gradients as tensors shaped as the inputs.
    fn tensors(self, d: &RecurrentShape) -> Result<MlstmGrads> {
        let (b, t, h) = (d.b, d.t, d.h);
        Ok(MlstmIn {
            q: Tensor::from_storage(self.q, vec![b, t, h, d.dk])?,
            k: Tensor::from_storage(self.k, vec![b, t, h, d.dk])?,
            v: Tensor::from_storage(self.v, vec![b, t, h, d.dv])?,
            i: Tensor::from_storage(self.i, vec![b, t, h])?,
            f: Tensor::from_storage(self.f, vec![b, t, h])?,
            state: MlstmState {
                c: Tensor::from_storage(self.state.c, vec![b, h, d.dk, d.dv])?,
                n: Tensor::from_storage(self.state.n, vec![b, h, d.dk])?,
                m: Tensor::from_storage(self.state.m, vec![b, h])?,
            },
        })
    }
}

impl<S: Into<Storage>> MlstmOut<S> {
    /// A kernel's results as tensors.
    fn tensors(self, d: &RecurrentShape) -> Result<MlstmOut> {
        let (b, h, nb) = (d.b, d.h, d.chunks() + 1);
        Ok(MlstmOut {
            h: Tensor::from_storage(self.h, vec![b, d.t, h, d.dv])?,
            boundary: MlstmState {
                c: Tensor::from_storage(self.boundary.c, vec![b, h, nb, d.dk, d.dv])?,
                n: Tensor::from_storage(self.boundary.n, vec![b, h, nb, d.dk])?,
                m: Tensor::from_storage(self.boundary.m, vec![b, h, nb])?,
            },
            den: Tensor::from_storage(self.den, vec![b, h, 2, d.t])?,
        })
    }
}

/// Checks the inputs of either pass (states, or state gradients, of the inputs' dtype); returns
/// the sizes.
fn check(op: &'static str, x: &MlstmIn<&Tensor>, chunk: usize) -> Result<RecurrentShape> {
    let d = RecurrentShape::check(op, x.q, x.k, x.v, &[x.i, x.f], chunk)?;
    d.check_state(op, x.q, x.state.c, &[d.dk, d.dv])?;
    d.check_state(op, x.q, x.state.n, &[d.dk])?;
    d.check_state(op, x.q, x.state.m, &[])?;
    Ok(d)
}

/// The chunkwise forward from `x.state`, `chunk` steps per chunk.
pub fn forward(x: &MlstmIn<&Tensor>, chunk: usize, eps: f64) -> Result<MlstmOut> {
    let dims = check(Forward::NAME, x, chunk)?;
    Tensor::apply(&Forward { dims, eps }, x)
}

/// The gradients of `forward` from its saved inputs and results and the gradients of its
/// output and final state.
pub fn backward(x: &MlstmBackward<&Tensor>, chunk: usize, eps: f64) -> Result<MlstmGrads> {
    let op = Backward::NAME;
    let dims = check(op, &x.input, chunk)?;
    check(
        op,
        &MlstmIn {
            state: x.d_final.clone(),
            ..x.input.clone()
        },
        chunk,
    )?;
    let nb = dims.chunks() + 1;
    dims.check_shape(op, x.out.boundary.c, &[nb, dims.dk, dims.dv])?;
    dims.check_shape(op, x.out.boundary.n, &[nb, dims.dk])?;
    dims.check_shape(op, x.out.boundary.m, &[nb])?;
    dims.check_shape(op, x.out.den, &[2, dims.t])?;
    for y in [x.out.h, x.dh] {
        if y.shape() != x.input.v.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: x.input.v.shape().clone(),
                rhs: y.shape().clone(),
            });
        }
    }
    Tensor::apply(&Backward { dims, eps }, x)
}

/// Whether the fused kernel runs for queries `[B, T, H, Dk]` and values of head dim `dv` of
/// this dtype on this device: the CPU's takes every float dtype, the CUDA wrapper's own check
/// says for the GPU.
pub fn has_kernel(device: Device, dtype: DType, dk: usize, dv: usize) -> bool {
    match device {
        Device::Cpu => dtype.is_float(),
        Device::Cuda(_) => cuda_takes("mlstm", dtype, dk, dv),
    }
}

struct Forward {
    dims: RecurrentShape,
    eps: f64,
}

impl DeviceOp for Forward {
    const NAME: &'static str = "mlstm::forward";
    type In = MlstmIn;
    type Out = MlstmOut;

    fn cpu(&self, x: MlstmIn<&CpuStorage>) -> Result<MlstmOut> {
        cpu::forward(Self::NAME, &x, &self.dims, self.eps)?.tensors(&self.dims)
    }

    fn cuda(&self, x: MlstmIn<&CudaStorage>) -> Result<MlstmOut> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::forward(&x, self.dims, self.eps as f32)?.tensors(&self.dims)
    }
}

struct Backward {
    dims: RecurrentShape,
    eps: f64,
}

impl DeviceOp for Backward {
    const NAME: &'static str = "mlstm::backward";
    type In = MlstmBackward;
    type Out = MlstmGrads;

    fn cpu(&self, x: MlstmBackward<&CpuStorage>) -> Result<MlstmGrads> {
        cpu::backward(Self::NAME, &x, &self.dims, self.eps)?.tensors(&self.dims)
    }

    fn cuda(&self, x: MlstmBackward<&CudaStorage>) -> Result<MlstmGrads> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::backward(&x, self.dims, self.eps as f32)?.tensors(&self.dims)
    }
}
