//! `Tensor::scale_cast` on the GPU (one kernel, the scale read on the device) against the CPU,
//! bit for bit: both multiply in f32 and round to bf16 to nearest even. Skips without a GPU (see
//! `swax_tests::gpu`).
use swax_tensor::{DType, Device, Error, Tensor};
use swax_tests::gpu;

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn matches_the_cpu_bit_for_bit() {
    let Some(device) = gpu() else { return };
    for from in [DType::F32, DType::BF16] {
        let x = Tensor::randn([3, 10007], 3.0, 1, DType::F32, Device::Cpu)
            .unwrap()
            .to_dtype(from)
            .unwrap();
        let s = Tensor::scalar(-0.37, DType::F32, Device::Cpu).unwrap();
        let (gx, gs) = (x.to_device(device).unwrap(), s.to_device(device).unwrap());
        for to in [DType::F32, DType::BF16] {
            let got = gx.scale_cast(&gs, to).unwrap();
            let want = x.scale_cast(&s, to).unwrap();
            assert_eq!(got.dtype(), to);
            assert_eq!(
                got.to_f64_vec().unwrap(),
                want.to_f64_vec().unwrap(),
                "{from} -> {to}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn a_scale_on_another_device_is_an_error() {
    let Some(device) = gpu() else { return };
    let x = Tensor::ones([5], DType::BF16, device).unwrap();
    let s = Tensor::scalar(2.0, DType::F32, Device::Cpu).unwrap();
    assert!(matches!(
        x.scale_cast(&s, DType::BF16),
        Err(Error::DeviceMismatch { .. })
    ));
}
