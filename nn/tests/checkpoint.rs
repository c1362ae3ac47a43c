//! Checkpoint files: tensors and metadata come back exactly; the file is plain safetensors
//! (an 8-byte header length, a JSON header naming dtype, shape and offsets).
use std::collections::HashMap;
use swax_nn::checkpoint::{load, save};
use swax_tensor::{DType, Device, Tensor};

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let a = Tensor::randn(vec![3, 5], 1.0, 7, DType::F32, Device::Cpu).unwrap();
    let b = Tensor::randn(vec![4], 1.0, 8, DType::BF16, Device::Cpu).unwrap();
    let meta = HashMap::from([("k".to_string(), "v".to_string())]);
    save(
        &path,
        &[("blocks.0.a".into(), a.clone()), ("b".into(), b.clone())],
        meta.clone(),
    )
    .unwrap();
    let (got, got_meta) = load(&path).unwrap();
    assert_eq!(got_meta, meta);
    assert_eq!(got["blocks.0.a"].dims(), [3, 5]);
    assert_eq!(
        got["blocks.0.a"].to_vec::<f32>().unwrap(),
        a.to_vec::<f32>().unwrap()
    );
    assert_eq!(got["b"].dtype(), DType::BF16);
    assert_eq!(got["b"].to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    assert!(
        header.contains("\"dtype\":\"F32\"") && header.contains("\"shape\":[3,5]"),
        "{header}"
    );
    // No temporary file is left beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let e = load("/nonexistent/x.safetensors".as_ref())
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/x.safetensors"), "{e}");
}
