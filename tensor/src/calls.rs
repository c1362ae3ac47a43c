//! How many times each `Backend` method ran, on either device, and the bytes its operands held:
//! what lets a CPU test count the elementwise passes a training step makes (each backend call
//! is one pass over its operands, and on the GPU at least one launch), where swax-cuda's
//! launch counters need a GPU. Counted process-wide in `Storage`'s dispatch; a test that
//! asserts counts runs alone in its binary.
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Calls and operand bytes (self and the other storage operands, not the results) of one method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub calls: u64,
    pub bytes_read: u64,
}

static CALLS: Mutex<BTreeMap<&'static str, Calls>> = Mutex::new(BTreeMap::new());

pub(crate) fn count(op: &'static str, bytes_read: usize) {
    let mut calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let c = calls.entry(op).or_default();
    c.calls += 1;
    c.bytes_read += bytes_read as u64;
}

/// The counts so far, by method name (since the process started or the last [`reset`]).
pub fn calls() -> BTreeMap<&'static str, Calls> {
    CALLS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Zeroes every count.
pub fn reset() {
    CALLS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
