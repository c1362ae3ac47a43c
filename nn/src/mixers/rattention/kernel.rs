//! The linear branch's fused chunkwise kernel as two ops, forward and backward, over named
//! operands (SWA's, `attention::SwaIn`: the two branches read the same q, k, v): their checks,
//! and the hand-off to the kernel of the device that holds the operands (`cpu.rs`, `cuda.rs`)
//! through `DeviceOp`.
use super::{cpu, cuda};
use crate::mixers::attention::{self, shape, SwaIn};
use swax_cuda::kernels::attention::AttnShape;
use swax_tensor::cpu::CpuStorage;
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DType, Device, DeviceOp, Error, Result, Tensor};

/// The inputs: q `[B, T, H, D]`, k and v `[B, T, Hkv, D]`.
pub type RlaIn<T = Tensor> = SwaIn<T>;

/// The gradients of the inputs, named as the inputs.
pub type RlaGrads<T = Tensor> = SwaIn<T>;

/// What the backward reads: the forward's inputs and the gradient dout of its output (nothing
/// saved: the chunk states are recomputed).
#[derive(Clone, Debug)]
pub struct RlaBackward<T = Tensor> {
    pub input: RlaIn<T>,
    pub dout: T,
}

impl<T> RlaBackward<T> {
    /// Each operand through `f`.
    pub fn try_map<'a, U>(
        &'a self,
        mut f: impl FnMut(&'a T) -> Result<U>,
    ) -> Result<RlaBackward<U>> {
        Ok(RlaBackward {
            input: self.input.try_map(&mut f)?,
            dout: f(&self.dout)?,
        })
    }
}

/// Checks the inputs and the chunk; returns the sizes.
fn check(op: &'static str, x: &RlaIn<&Tensor>, window: usize, chunk: usize) -> Result<AttnShape> {
    let s = shape(op, x.q, x.k, x.v, window)?;
    if chunk == 0 {
        return Err(Error::Invalid {
            op,
            msg: "chunk size 0".into(),
        });
    }
    Ok(s)
}

/// `o_t = phi(q_t) · sum_{s <= t - window} phi(k_s)^T v_s`, `[B, T, H, D]`, computed `chunk`
/// steps at a time on the CPU (the CUDA kernels run chunks of their own; every chunk size gives
/// the same values).
pub fn forward(x: &RlaIn<&Tensor>, window: usize, chunk: usize) -> Result<Tensor> {
    let dims = check(Forward::NAME, x, window, chunk)?;
    Tensor::apply(
        &Forward {
            dims,
            window,
            chunk,
        },
        x,
    )
}

/// The gradients of `forward` from its inputs and the gradient of its output.
pub fn backward(x: &RlaBackward<&Tensor>, window: usize, chunk: usize) -> Result<RlaGrads> {
    let op = Backward::NAME;
    let dims = check(op, &x.input, window, chunk)?;
    if x.dout.shape() != x.input.q.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.input.q.shape().clone(),
            rhs: x.dout.shape().clone(),
        });
    }
    Tensor::apply(
        &Backward {
            dims,
            window,
            chunk,
        },
        x,
    )
}

/// Whether the fused RAttention (both branches) runs for a query of head dim `d` of this dtype
/// on this device: the linear branch's CUDA kernels take what SWA's take (the same
/// `AttnShape::check`).
pub fn has_kernel(device: Device, dtype: DType, d: usize) -> bool {
    attention::has_kernel(device, dtype, d)
}

struct Forward {
    dims: AttnShape,
    window: usize,
    chunk: usize,
}

impl DeviceOp for Forward {
    const NAME: &'static str = "rla::forward";
    type In<T> = RlaIn<T>;
    type Out = Tensor;

    fn map_in<'a, A: 'a, B>(
        x: &'a RlaIn<A>,
        f: impl FnMut(&'a A) -> Result<B>,
    ) -> Result<RlaIn<B>> {
        x.try_map(f)
    }

    fn cpu(&self, x: RlaIn<&CpuStorage>) -> Result<Tensor> {
        let o = cpu::forward(Self::NAME, &x, &self.dims, self.window, self.chunk)?;
        Tensor::from_storage(o, q_shape(&self.dims))
    }

    fn cuda(&self, _device: Device, x: RlaIn<&CudaStorage>) -> Result<Tensor> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        Tensor::from_storage(
            cuda::forward(&x, self.dims, self.window)?,
            q_shape(&self.dims),
        )
    }
}

/// The shape of q and of the output.
fn q_shape(s: &AttnShape) -> Vec<usize> {
    vec![s.b, s.t, s.h, s.d]
}

struct Backward {
    dims: AttnShape,
    window: usize,
    chunk: usize,
}

impl DeviceOp for Backward {
    const NAME: &'static str = "rla::backward";
    type In<T> = RlaBackward<T>;
    type Out = RlaGrads;

    fn map_in<'a, A: 'a, B>(
        x: &'a RlaBackward<A>,
        f: impl FnMut(&'a A) -> Result<B>,
    ) -> Result<RlaBackward<B>> {
        x.try_map(f)
    }

    fn cpu(&self, x: RlaBackward<&CpuStorage>) -> Result<RlaGrads> {
        cpu::backward(Self::NAME, &x, &self.dims, self.window, self.chunk)?.tensors(&self.dims)
    }

    fn cuda(&self, _device: Device, x: RlaBackward<&CudaStorage>) -> Result<RlaGrads> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::backward(&x, self.dims, self.window)?.tensors(&self.dims)
    }
}
