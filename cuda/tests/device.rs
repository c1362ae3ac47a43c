//! The CudaDevice handle, copies and kernel error flags; the no-GPU behaviour runs everywhere.

mod common;

use half::bf16;
use swax_cuda::{CudaDevice, CudaError, DType};

#[test]
fn device_new_returns_an_error_instead_of_panicking() {
    let first = std::panic::catch_unwind(|| CudaDevice::new(0));
    let first = first.expect("CudaDevice::new(0) panicked");
    let bad =
        std::panic::catch_unwind(|| CudaDevice::new(4096)).expect("CudaDevice::new(4096) panicked");
    match first {
        Ok(dev) => {
            eprintln!("found {dev:?}");
            assert!(CudaDevice::is_available());
            assert!(matches!(
                bad,
                Err(CudaError::BadOrdinal { ordinal: 4096, .. })
            ));
        }
        Err(err) => {
            eprintln!("no device, as expected without a GPU: {err}");
            assert!(!err.to_string().is_empty());
            assert!(bad.is_err());
            assert!(!CudaDevice::is_available());
            if std::env::var("SWAX_REQUIRE_CUDA").as_deref() == Ok("1") {
                panic!("SWAX_REQUIRE_CUDA=1 but no CUDA device: {err}");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn handles_are_shared_per_ordinal() {
    let dev = gpu!();
    let again = CudaDevice::new(0).unwrap();
    assert!(dev.same(&again));
    let (major, _) = dev.compute_capability();
    assert!(major >= 7, "{dev:?}");
    assert!(dev.sm_count() > 0);
    let (free, total) = dev.mem_info().unwrap();
    assert!(free <= total && total > 0);
    assert!(!dev.name().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn host_device_roundtrips() {
    let dev = gpu!();
    let f: Vec<f32> = (0..1001).map(|i| i as f32 * 0.37 - 100.0).collect();
    assert_eq!(dev.dtoh::<f32>(&dev.htod(&f).unwrap()).unwrap(), f);
    let h: Vec<bf16> = f.iter().map(|&x| bf16::from_f32(x)).collect();
    assert_eq!(dev.dtoh::<bf16>(&dev.htod(&h).unwrap()).unwrap(), h);
    let u: Vec<u32> = (0..777).map(|i| i * 2_654_435_761u32).collect();
    assert_eq!(dev.dtoh::<u32>(&dev.htod(&u).unwrap()).unwrap(), u);
    let b: Vec<u8> = (0..333).map(|i| (i * 7) as u8).collect();
    assert_eq!(dev.dtoh::<u8>(&dev.htod(&b).unwrap()).unwrap(), b);
    let empty = dev.htod::<f32>(&[]).unwrap();
    assert!(empty.is_empty() && dev.dtoh::<f32>(&empty).unwrap().is_empty());

    let src = dev.htod(&u).unwrap();
    let mut dst = dev.htod(&vec![0u32; u.len()]).unwrap();
    dev.copy(&src, &mut dst).unwrap();
    assert_eq!(dev.dtoh::<u32>(&dst).unwrap(), u);
    dev.memset_zero(&mut dst).unwrap();
    assert!(dev.dtoh::<u32>(&dst).unwrap().iter().all(|&x| x == 0));
    let z = dev.alloc_zeros(DType::F32, 513).unwrap();
    assert!(dev.dtoh::<f32>(&z).unwrap().iter().all(|&x| x == 0.0));
    dev.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn mismatches_are_errors() {
    let dev = gpu!();
    let f = dev.htod(&[1.0f32, 2.0]).unwrap();
    let err = dev.dtoh::<u32>(&f).unwrap_err();
    assert!(err.to_string().contains("holds f32"), "{err}");
    let mut short = dev.alloc(DType::F32, 1).unwrap();
    assert!(dev.copy(&f, &mut short).is_err());
}
