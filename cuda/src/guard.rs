//! Surviving panics: a mutex lock that outlives a poisoned mutex, and a call into cudarc's
//! dynamic loader whose panic (a missing library or symbol) becomes an error value.

use crate::CudaError;
use std::sync::{Mutex, MutexGuard};

/// Locks a mutex even if a panicking thread poisoned it: the data behind our locks (free lists,
/// caches) is never left half-updated across a panic point.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f`, turning a panic inside cudarc's dynamic loader (a missing library or symbol) into
/// an error for `lib`.
pub(crate) fn guard_loader<T>(
    lib: &'static str,
    f: impl FnOnce() -> Result<T, CudaError> + std::panic::UnwindSafe,
) -> Result<T, CudaError> {
    std::panic::catch_unwind(f).unwrap_or_else(|p| {
        Err(CudaError::LibraryMissing {
            lib,
            reason: panic_message(p),
        })
    })
}
