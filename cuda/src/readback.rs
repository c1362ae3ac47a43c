//! `Readback`: device-to-host reads that the host collects later. The copies are queued on the
//! stream behind the work that produces the values, into page-locked host memory (an
//! asynchronous copy to pageable memory would wait for the stream), and an event is recorded
//! after them. Collecting waits for that event alone, so work queued after the copies keeps the
//! device busy; a `dtoh`, by contrast, waits until everything queued has run.
//!
//! One batch of copies is in flight at a time: the host memory is reused, so `start` refuses
//! while the last batch is uncollected.

use crate::{counters, Buffer, CudaDevice, CudaError, DType};
use cudarc::driver::{result, CudaEvent};

pub struct Readback {
    dev: CudaDevice,
    /// `capacity` bytes of page-locked host memory, owned by this value.
    host: *mut u8,
    capacity: usize,
    event: CudaEvent,
    /// The copies queued and not yet collected: each buffer's dtype, length and byte offset in
    /// `host`.
    queued: Vec<(DType, usize, usize)>,
}

// SAFETY: `host` is an allocation owned by this value alone, freed in `drop`.
unsafe impl Send for Readback {}

impl Readback {
    /// Room for `capacity` bytes of reads at a time.
    pub fn new(dev: &CudaDevice, capacity: usize) -> Result<Readback, CudaError> {
        dev.bind()?;
        let event = dev
            .context()
            .new_event(None)
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        // SAFETY: a plain page-locked allocation (flags 0: cached, read by the host), freed once
        // in `drop`.
        let host = unsafe { result::malloc_host(capacity.max(1), 0) }
            .map_err(|e| CudaError::driver("cuMemHostAlloc", e))? as *mut u8;
        Ok(Readback {
            dev: dev.clone(),
            host,
            capacity,
            event,
            queued: Vec::new(),
        })
    }

    /// Queues a copy of each buffer (f32, bf16 or u32) to the host, then the event.
    pub fn start(&mut self, bufs: &[&Buffer]) -> Result<(), CudaError> {
        const OP: &str = "Readback::start";
        if !self.queued.is_empty() {
            return Err(CudaError::invalid(
                OP,
                "the last reads are not collected yet (call finish first)",
            ));
        }
        let bytes: usize = bufs.iter().map(|b| b.size_bytes()).sum();
        if bytes > self.capacity {
            return Err(CudaError::invalid(
                OP,
                format!("{bytes} bytes asked, room for {}", self.capacity),
            ));
        }
        for b in bufs {
            self.dev.check_owner(OP, b)?;
            if !matches!(b.dtype(), DType::F32 | DType::BF16 | DType::U32) {
                return Err(CudaError::invalid(
                    OP,
                    format!("reads f32, bf16 or u32, got {}", b.dtype()),
                ));
            }
        }
        self.dev.bind()?;
        let stream = self.dev.stream().cu_stream();
        let mut at = 0;
        for b in bufs {
            if b.is_empty() {
                self.queued.push((b.dtype(), 0, at));
                continue;
            }
            // SAFETY: [at, at + size) lies inside the host allocation (checked against the
            // capacity above); the memory is not read or reused before `finish` has waited for
            // the event recorded after this copy (or `drop` has).
            let dst = unsafe { std::slice::from_raw_parts_mut(self.host.add(at), b.size_bytes()) };
            // SAFETY: the source is the whole of a live buffer of this device.
            unsafe { result::memcpy_dtoh_async(dst, b.device_ptr(), stream) }
                .map_err(|e| CudaError::driver("cuMemcpyDtoHAsync", e))?;
            self.queued.push((b.dtype(), b.len(), at));
            at += b.size_bytes();
        }
        self.event
            .record(self.dev.stream())
            .map_err(|e| CudaError::driver("cuEventRecord", e))
    }

    /// Waits for the copies `start` queued and returns each buffer's values as f64.
    pub fn finish(&mut self) -> Result<Vec<Vec<f64>>, CudaError> {
        if self.queued.is_empty() {
            return Err(CudaError::invalid(
                "Readback::finish",
                "no reads were started",
            ));
        }
        counters::event_wait();
        self.event
            .synchronize()
            .map_err(|e| CudaError::driver("cuEventSynchronize", e))?;
        let queued = std::mem::take(&mut self.queued);
        Ok(queued
            .into_iter()
            .map(|(dtype, len, at)| {
                let size = dtype.size_bytes();
                // SAFETY: the copy into [at, at + len * size) has completed (the event).
                let bytes = unsafe { std::slice::from_raw_parts(self.host.add(at), len * size) };
                bytes
                    .chunks_exact(size)
                    .map(|c| match dtype {
                        DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                        DType::BF16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
                        _ => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                    })
                    .collect()
            })
            .collect())
    }
}

impl Drop for Readback {
    fn drop(&mut self) {
        // Copies still in flight write into `host`: wait for them before freeing it.
        let _ = self.event.synchronize();
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed only here.
        let _ = unsafe { result::free_host(self.host as *mut std::ffi::c_void) };
    }
}

impl std::fmt::Debug for Readback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Readback({} bytes on cuda:{}, {} reads queued)",
            self.capacity,
            self.dev.ordinal(),
            self.queued.len()
        )
    }
}
