//! Timing GPU work the way the benchmarks report it: CUDA events around each repetition, after
//! warm-up runs (module loads, NVRTC compiles, cuBLAS handle creation stay out), median taken.
use crate::{CudaDevice, CudaError};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

/// A CUDA event of `dev`'s context, to record on its stream.
pub fn event(dev: &CudaDevice) -> Result<CudaEvent, CudaError> {
    dev.context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| CudaError::driver("cuEventCreate", e))
}

/// Records `e` on `dev`'s stream: it happens once the work queued before it has run.
pub fn record(dev: &CudaDevice, e: &CudaEvent) -> Result<(), CudaError> {
    e.record(dev.stream())
        .map_err(|e| CudaError::driver("cuEventRecord", e))
}

/// Milliseconds from `start` to `end` on the device, once `end` has happened (the host waits
/// for it).
pub fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f64, CudaError> {
    crate::counters::event_wait();
    end.synchronize()
        .map_err(|e| CudaError::driver("cuEventSynchronize", e))?;
    let ms = start
        .elapsed_ms(end)
        .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
    Ok(ms as f64)
}

/// Median milliseconds of `f` over `reps` event-timed runs on `dev`'s stream, after `warmup`
/// untimed ones.
pub fn median_ms<E: From<CudaError>>(
    dev: &CudaDevice,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<f64, E> {
    let (start, end) = (event(dev)?, event(dev)?);
    for _ in 0..warmup {
        f()?;
    }
    dev.synchronize()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        record(dev, &start)?;
        f()?;
        record(dev, &end)?;
        times.push(elapsed_ms(&start, &end)?);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
