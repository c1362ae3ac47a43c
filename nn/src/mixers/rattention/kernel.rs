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

/// The feature maps the forward made, phi(q) `[B, T, H, 2D]` and phi(k) `[B, T, Hkv, 2D]`
/// (bf16), where its device's backward reads them (CUDA's) rather than making them again.
#[derive(Clone, Debug)]
pub struct Features<T = Tensor> {
    pub q: T,
    pub k: T,
}

/// What the backward reads: the forward's inputs, the gradient dout of its output, and the
/// features if the forward kept them (the chunk states are recomputed; the CPU's backward
/// makes its own features).
#[derive(Clone, Debug)]
pub struct RlaBackward<T = Tensor> {
    pub input: RlaIn<T>,
    pub dout: T,
    pub features: Option<Features<T>>,
}

swax_tensor::operands!(Features { q, k });
swax_tensor::operands!(RlaBackward {
    input: nested,
    dout,
    features: optional
});

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
    Ok(forward_keeping_features(x, window, chunk)?.0)
}

/// `forward`, and the features it made where its device's backward reads them (to pass on in
/// `RlaBackward::features`).
pub fn forward_keeping_features(
    x: &RlaIn<&Tensor>,
    window: usize,
    chunk: usize,
) -> Result<(Tensor, Option<Features>)> {
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
    if let Some(f) = &x.features {
        for (name, feature, input) in [("q", &f.q, x.input.q), ("k", &f.k, x.input.k)] {
            let mut want = input.dims().to_vec();
            want[3] *= 2;
            if feature.dims() != want || feature.dtype() != DType::BF16 {
                let msg = format!(
                    "features of {name}: {:?} {:?}, want bf16 {want:?} (the forward's)",
                    feature.dtype(),
                    feature.dims()
                );
                return Err(Error::Invalid { op, msg });
            }
        }
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
    type In = RlaIn;
    type Out = (Tensor, Option<Features>);

    fn cpu(&self, x: RlaIn<&CpuStorage>) -> Result<Self::Out> {
        let o = cpu::forward(Self::NAME, &x, &self.dims, self.window, self.chunk)?;
        Ok((Tensor::from_storage(o, q_shape(&self.dims))?, None))
    }

    fn cuda(&self, x: RlaIn<&CudaStorage>) -> Result<Self::Out> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        let s = &self.dims;
        let (o, features) = cuda::forward(&x, *s, self.window)?;
        let features = match features {
            Some([q, k]) => Some(Features {
                q: Tensor::from_storage(CudaStorage::from(q), vec![s.b, s.t, s.h, 2 * s.d])?,
                k: Tensor::from_storage(CudaStorage::from(k), vec![s.b, s.t, s.hkv, 2 * s.d])?,
            }),
            None => None,
        };
        Ok((Tensor::from_storage(o, q_shape(s))?, features))
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
    type In = RlaBackward;
    type Out = RlaGrads;

    fn cpu(&self, x: RlaBackward<&CpuStorage>) -> Result<RlaGrads> {
        cpu::backward(Self::NAME, &x, &self.dims, self.window, self.chunk)?.tensors(&self.dims)
    }

    fn cuda(&self, x: RlaBackward<&CudaStorage>) -> Result<RlaGrads> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        cuda::backward(&x, self.dims, self.window)?.tensors(&self.dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_rejects_features_not_the_forwards() -> Result<()> {
        let x = |heads, d| Tensor::zeros(vec![1, 8, heads, d], DType::BF16, Device::Cpu);
        let (q, k, v, dout) = (x(2, 64)?, x(1, 64)?, x(1, 64)?, x(2, 64)?);
        let input = SwaIn {
            q: &q,
            k: &k,
            v: &v,
        };
        let good = (x(2, 128)?, x(1, 128)?);
        let wide = x(2, 256)?;
        let f32_k = Tensor::zeros(vec![1, 8, 1, 128], DType::F32, Device::Cpu)?;
        let run = |fq: &Tensor, fk: &Tensor| {
            let b = RlaBackward {
                input: input.clone(),
                dout: &dout,
                features: Some(Features { q: fq, k: fk }),
            };
            backward(&b, 2, 4)
        };
        run(&good.0, &good.1)?;
        for (fq, fk, what) in [
            (&wide, &good.1, "features of q"),
            (&good.0, &f32_k, "features of k"),
        ] {
            match run(fq, fk) {
                Err(Error::Invalid { msg, .. }) => assert!(msg.contains(what), "{msg}"),
                other => panic!("{what}: want an error, got {other:?}"),
            }
        }
        Ok(())
    }
}
