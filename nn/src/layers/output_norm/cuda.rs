//! xLSTM's gated head norm on CUDA, forward and backward: swax-cuda's row kernels
//! (`kernels::norm`, source `norm.cu`). The forward reads the weight as `norm::forward_weights`
//! says; the backward reads it in f32 and sums its gradient in f32, cast back to the weight's
//! dtype here.
use super::{GatedHeadNormBackward, GatedHeadNormGrads, GatedHeadNormIn};
use swax_cuda::kernels::{cast, norm};
use swax_cuda::{Buffer, CudaDevice, CudaError, DType};
use swax_tensor::cuda::CudaStorage;

/// `b` cast to `dtype` in a new buffer, or None when it already is `dtype` (the caller then
/// reads `b` itself).
fn converted(dev: &CudaDevice, b: &Buffer, dtype: DType) -> Result<Option<Buffer>, CudaError> {
    if b.dtype() == dtype {
        return Ok(None);
    }
    let mut y = dev.alloc(dtype, b.len())?;
    cast::cast(dev, b, &mut y)?;
    Ok(Some(y))
}

/// y, of x's dtype.
pub(super) fn forward(
    x: &GatedHeadNormIn<&Buffer>,
    heads: usize,
    n: usize,
    eps: f32,
) -> Result<CudaStorage, CudaError> {
    let dev = x.x.device();
    let cast = norm::forward_weights(dev, x.x, x.weight)?;
    let w = cast.as_ref().unwrap_or(x.weight);
    let mut y = dev.alloc(x.x.dtype(), x.x.len())?;
    norm::gated_head_norm(dev, x.x, x.o, w, heads, n, eps, &mut y)?;
    Ok(y.into())
}

/// dx and do of x's dtype, dweight of the weight's.
pub(super) fn backward(
    x: &GatedHeadNormBackward<&Buffer>,
    heads: usize,
    n: usize,
    eps: f32,
) -> Result<GatedHeadNormGrads<CudaStorage>, CudaError> {
    let i = &x.input;
    let dev = i.x.device();
    let w32 = converted(dev, i.weight, DType::F32)?;
    let w = w32.as_ref().unwrap_or(i.weight);
    let mut dx = dev.alloc(i.x.dtype(), i.x.len())?;
    let mut d_o = dev.alloc(i.x.dtype(), i.x.len())?;
    let mut dw = dev.alloc(DType::F32, heads * n)?;
    norm::gated_head_norm_backward(
        dev, i.x, i.o, w, x.dy, heads, n, eps, &mut dx, &mut d_o, &mut dw,
    )?;
    let dw = converted(dev, &dw, i.weight.dtype())?.unwrap_or(dw);
    Ok(GatedHeadNormIn {
        x: dx.into(),
        o: d_o.into(),
        weight: dw.into(),
    })
}
