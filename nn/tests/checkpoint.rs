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
    // Token ids up to u32::MAX (the loader's ignored target).
    let ids = Tensor::from_vec(vec![0u32, 7, u32::MAX], vec![3], Device::Cpu).unwrap();
    let meta = HashMap::from([("k".to_string(), "v".to_string())]);
    save(
        &path,
        &[
            ("blocks.0.a".into(), a.clone()),
            ("b".into(), b.clone()),
            ("ids".into(), ids),
        ],
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
    assert_eq!(got["ids"].to_vec::<u32>().unwrap(), [0, 7, u32::MAX]);
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

#[test]
fn a_failed_atomic_write_names_the_file_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    // A non-empty folder under the final name: the rename over it fails.
    let target = dir.path().join("busy");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("x"), b"x").unwrap();
    let err = swax_nn::checkpoint::write_atomic(&target, b"bytes")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("busy") && !err.starts_with("checkpoint"),
        "{err}"
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["busy"]);
}

#[test]
fn temporary_files_are_told_from_others() {
    use swax_nn::checkpoint::is_temporary;
    assert!(is_temporary(".state.json.tmp-1234"));
    assert!(is_temporary(".model.safetensors.tmp-7"));
    for name in ["state.json", ".tmp-", "x.tmp-12", ".a.tmp-12x", ".a.tmp-"] {
        assert!(!is_temporary(name), "{name}");
    }
}
