//! A timeline of the kernels and cuBLAS calls queued on a device's stream: where a short piece
//! of GPU work (a decoding step) spends its device time, without a profiler. While one is being
//! recorded, an event follows every launch and every cuBLAS call, and [`Timeline::finish`] gives
//! each its device time, from the event before it to its own.
//!
//! The times are the device's alone only where the work is queued faster than the device runs
//! it: keep the device busy before [`Timeline::start`] (bench-generate queues large products
//! first), else a kernel's span also holds the device waiting for the host. Each event costs the
//! device a little, so a recorded step runs a little slower than one that is not. One timeline
//! at a time, process-wide, on the device it started on.
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use cudarc::driver::CudaEvent;

use crate::timing::{event, record};
use crate::{CudaDevice, CudaError};

static RECORDING: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<(String, CudaEvent)>> = Mutex::new(Vec::new());

/// One launch or cuBLAS call of a timeline and its device time.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The kernel's name with its grid and block, or `gemm MxNxK` with the batch.
    pub label: String,
    pub ms: f64,
}

/// A timeline being recorded; [`Timeline::finish`] ends it.
pub struct Timeline {
    start: CudaEvent,
}

impl Timeline {
    /// Starts recording every launch and cuBLAS call queued on `dev` from now. An error if a
    /// timeline is already being recorded.
    pub fn start(dev: &CudaDevice) -> Result<Timeline, CudaError> {
        if RECORDING.swap(true, Relaxed) {
            return Err(CudaError::invalid(
                "timeline",
                "a timeline is already being recorded",
            ));
        }
        MARKS.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let start = event(dev).and_then(|e| record(dev, &e).map(|_| e));
        if start.is_err() {
            RECORDING.store(false, Relaxed);
        }
        Ok(Timeline { start: start? })
    }

    /// Stops recording, waits for the last recorded work and returns each launch and cuBLAS call
    /// in the order they were queued, with its device time.
    pub fn finish(self) -> Result<Vec<Span>, CudaError> {
        RECORDING.store(false, Relaxed);
        let marks = std::mem::take(&mut *MARKS.lock().unwrap_or_else(|p| p.into_inner()));
        let mut before = &self.start;
        let mut spans = Vec::with_capacity(marks.len());
        for (label, e) in &marks {
            spans.push(Span {
                label: label.clone(),
                ms: crate::timing::elapsed_ms(before, e)?,
            });
            before = e;
        }
        Ok(spans)
    }
}

/// Spans of the same label together: (label, calls, total ms), the largest total first.
pub fn by_label(spans: &[Span]) -> Vec<(String, usize, f64)> {
    let mut out: Vec<(String, usize, f64)> = Vec::new();
    for s in spans {
        match out.iter_mut().find(|(l, _, _)| *l == s.label) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += s.ms;
            }
            None => out.push((s.label.clone(), 1, s.ms)),
        }
    }
    out.sort_by(|a, b| b.2.total_cmp(&a.2));
    out
}

/// Called after each launch and cuBLAS call: while a timeline is being recorded, an event
/// after it, named by `label`.
pub(crate) fn mark(dev: &CudaDevice, label: impl FnOnce() -> String) -> Result<(), CudaError> {
    if !RECORDING.load(Relaxed) {
        return Ok(());
    }
    let e = event(dev)?;
    record(dev, &e)?;
    MARKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((label(), e));
    Ok(())
}
