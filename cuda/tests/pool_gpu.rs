//! The caching pool on a real device. One test in its own binary: nothing else allocates in
//! this process, so cache hits and driver calls can be counted exactly.

mod common;

use swax_cuda::{CudaError, DType};

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn pool_reuses_blocks_and_reports_out_of_memory() {
    let dev = gpu!();
    let before = dev.pool_stats();

    let a = dev.alloc(DType::F32, 3_000_001).unwrap();
    let ptr = a.device_ptr();
    assert_eq!(ptr % 512, 0);
    drop(a);
    let b = dev.alloc(DType::F32, 3_000_000).unwrap();
    assert_eq!(b.device_ptr(), ptr, "the freed block is reused");
    let s = dev.pool_stats();
    assert_eq!(s.driver_allocs, before.driver_allocs + 1);
    assert_eq!(s.cache_hits, before.cache_hits + 1);
    assert!(s.in_use >= 12_000_000 && s.peak_in_use >= s.in_use);

    let small: Vec<_> = (0..100)
        .map(|i| dev.alloc(DType::U8, 100 + i).unwrap())
        .collect();
    assert_eq!(
        dev.pool_stats().driver_allocs,
        before.driver_allocs + 2,
        "one 2 MiB segment"
    );
    drop(small);

    // Far more than the device has: an error naming the sizes, and nothing else disturbed.
    let (_, total) = dev.mem_info().unwrap();
    let err = dev.alloc(DType::U8, total * 2).unwrap_err();
    assert!(matches!(err, CudaError::OutOfMemory { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("requested {} bytes", total * 2)),
        "{msg}"
    );
    assert_eq!(dev.dtoh::<f32>(&b).unwrap().len(), 3_000_000);

    drop(b);
    assert!(dev.empty_cache().unwrap() > 0);
    assert_eq!(dev.pool_stats().in_use, before.in_use);
}
