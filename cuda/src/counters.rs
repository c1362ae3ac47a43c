//! How often the host asks something of the GPU, counted process-wide: kernel launches (every
//! one goes through `kernels::launch`), cuBLAS calls, and the host's waits. A wait is a `sync`
//! when the host waits for everything queued on a stream (a stream synchronize, a device-to-host
//! copy, reading the kernels' error flags, the pool draining before it frees memory), and an
//! `event_wait` when it waits for a point recorded earlier while the work queued after it keeps
//! the device busy (collecting a [`crate::Readback`], timing with events). Host-to-device copies
//! are counted with their bytes (`uploads`, `upload_bytes`): a step should upload its batch and
//! little else, and a large upload from pageable memory costs the host its staging.
//!
//! Each count is one relaxed atomic add. Tests and profilers read [`counts`] before and after
//! some work and take the difference ([`Counts::since`]); the counts are process-wide, so the
//! difference includes what other threads asked meanwhile (a test that asserts counts runs
//! alone in its binary). [`reset`] zeroes them all.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static LAUNCHES: AtomicU64 = AtomicU64::new(0);
static BLAS_CALLS: AtomicU64 = AtomicU64::new(0);
static SYNCS: AtomicU64 = AtomicU64::new(0);
static EVENT_WAITS: AtomicU64 = AtomicU64::new(0);
static UPLOADS: AtomicU64 = AtomicU64::new(0);
static UPLOAD_BYTES: AtomicU64 = AtomicU64::new(0);

/// The counts at one moment, or the difference of two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub launches: u64,
    pub blas_calls: u64,
    pub syncs: u64,
    pub event_waits: u64,
    pub uploads: u64,
    pub upload_bytes: u64,
}

impl Counts {
    /// What was counted between `before` and `self`.
    pub fn since(&self, before: &Counts) -> Counts {
        Counts {
            launches: self.launches.wrapping_sub(before.launches),
            blas_calls: self.blas_calls.wrapping_sub(before.blas_calls),
            syncs: self.syncs.wrapping_sub(before.syncs),
            event_waits: self.event_waits.wrapping_sub(before.event_waits),
            uploads: self.uploads.wrapping_sub(before.uploads),
            upload_bytes: self.upload_bytes.wrapping_sub(before.upload_bytes),
        }
    }
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            launches: self.launches + o.launches,
            blas_calls: self.blas_calls + o.blas_calls,
            syncs: self.syncs + o.syncs,
            event_waits: self.event_waits + o.event_waits,
            uploads: self.uploads + o.uploads,
            upload_bytes: self.upload_bytes + o.upload_bytes,
        }
    }
}

/// The counts so far (since the process started or the last [`reset`]).
pub fn counts() -> Counts {
    Counts {
        launches: LAUNCHES.load(Relaxed),
        blas_calls: BLAS_CALLS.load(Relaxed),
        syncs: SYNCS.load(Relaxed),
        event_waits: EVENT_WAITS.load(Relaxed),
        uploads: UPLOADS.load(Relaxed),
        upload_bytes: UPLOAD_BYTES.load(Relaxed),
    }
}

/// Zeroes every count.
pub fn reset() {
    for c in [
        &LAUNCHES,
        &BLAS_CALLS,
        &SYNCS,
        &EVENT_WAITS,
        &UPLOADS,
        &UPLOAD_BYTES,
    ] {
        c.store(0, Relaxed);
    }
}

pub(crate) fn launch() {
    LAUNCHES.fetch_add(1, Relaxed);
}

pub(crate) fn blas_call() {
    BLAS_CALLS.fetch_add(1, Relaxed);
}

pub(crate) fn sync() {
    SYNCS.fetch_add(1, Relaxed);
}

pub(crate) fn event_wait() {
    EVENT_WAITS.fetch_add(1, Relaxed);
}

pub(crate) fn upload(bytes: usize) {
    UPLOADS.fetch_add(1, Relaxed);
    UPLOAD_BYTES.fetch_add(bytes as u64, Relaxed);
}
