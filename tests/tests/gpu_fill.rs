//! Filled tensors on the GPU. Alone in its test binary: the GPU counters are process-wide, so a
//! test running beside it would add its own uploads to what this one counts. Skips without a
//! GPU (see `swax_tests::gpu`).
use swax_tensor::{DType, Device, Tensor};
use swax_tests::gpu;

/// Filled tensors are made on the device: the values of the host's, in every dtype a GPU holds,
/// at an odd size, and nothing uploaded for them (built on the host and uploaded, the zeros of
/// the loss's f32 `[768, 50304]` accumulator and of the mixers' states held swax-small's training
/// step to 177k tokens/s on the H200; made on the device, 249k).
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn filled_tensors_are_made_on_the_device() {
    let Some(device) = gpu() else { return };
    for dtype in [DType::F32, DType::BF16] {
        for value in [0.0, 1.0, -2.75, 1e-3] {
            let before = swax_tensor::counters::counts();
            let t = Tensor::full(value, [3, 1001], dtype, device).unwrap();
            let uploads = swax_tensor::counters::counts().since(&before).uploads;
            assert_eq!(uploads, 0, "{dtype:?} {value}: filled through the host");
            let want = Tensor::full(value, [3, 1001], dtype, Device::Cpu).unwrap();
            assert_eq!(t.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        }
    }
    let ids = Tensor::full(7.0, [5], DType::U32, device).unwrap();
    assert_eq!(ids.to_f64_vec().unwrap(), vec![7.0; 5]);
}
