//! Timing GPU work the way the benchmarks report it: CUDA events around each repetition, after
//! warm-up runs (module loads, NVRTC compiles, cuBLAS handle creation stay out), median taken.
use crate::{CudaDevice, CudaError};
use cudarc::driver::sys::CUevent_flags;

/// Median milliseconds of `f` over `reps` event-timed runs on `dev`'s stream, after `warmup`
/// untimed ones.
pub fn median_ms<E: From<CudaError>>(
    dev: &CudaDevice,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<f64, E> {
    let event = || {
        dev.context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| CudaError::driver("cuEventCreate", e))
    };
    let (start, end) = (event()?, event()?);
    for _ in 0..warmup {
        f()?;
    }
    dev.synchronize()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        start
            .record(dev.stream())
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        f()?;
        end.record(dev.stream())
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        crate::counters::event_wait();
        end.synchronize()
            .map_err(|e| CudaError::driver("cuEventSynchronize", e))?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
        times.push(ms as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
