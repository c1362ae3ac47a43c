//! The draw on CUDA (`sampling.cu`): one block of `SAMPLE_THREADS` per row, one launch.
use super::Cuts;
use swax_cuda::kernels::chunk::check_operands;
use swax_cuda::kernels::{float_kernel, launch, to_u32, Launch};
use swax_cuda::{Buffer, CudaError, DType, KernelSource};
use swax_tensor::cuda::CudaStorage;

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "sampling",
    source: &[include_str!("sampling.cu")],
};

/// Threads of a block (`SAMPLE_THREADS` in sampling.cu).
const SAMPLE_THREADS: u32 = 1024;

/// Each row's token of `logits` (`r.len()` rows of `v`, f32 or bf16) for its u32 of `r`.
pub(super) fn sample(
    logits: &Buffer,
    r: &Buffer,
    v: usize,
    cuts: &Cuts,
) -> Result<CudaStorage, CudaError> {
    const OP: &str = "sample";
    let rows = r.len();
    let dt = logits.dtype();
    check_operands(
        OP,
        logits.device(),
        &[("logits", logits, dt, rows * v), ("r", r, DType::U32, rows)],
    )?;
    let name = float_kernel!(OP, "sample", dt)?;
    let dev = logits.device();
    let out = dev.alloc(DType::U32, rows)?;
    let grid = Launch {
        grid: (to_u32(OP, "rows", rows)?, 1, 1),
        block: (SAMPLE_THREADS, 1, 1),
        shared: 0,
    };
    let (v, top_k) = (
        to_u32(OP, "V", v)?,
        cuts.top_k.min(u32::MAX as usize) as u32,
    );
    // SAFETY: sample_T(const T* logits, const u32* r, u32* out, u32 v, u32 top_k, float top_p,
    // float temperature): logits holds rows x v, r and out one per row (checked and allocated
    // above); a block per row.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            grid,
            &[logits, r, &out, &v, &top_k, &cuts.top_p, &cuts.temperature],
        )?;
    }
    Ok(out.into())
}
