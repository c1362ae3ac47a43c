//! `Tensor::matmul_acc_into` on the GPU (cuBLAS with beta = 1 into an f32 accumulator) against
//! the CPU: f32 and bf16 operands, every transpose, batched with and without a shared operand,
//! sizes no tile divides, three products into one accumulator; and an accumulator on another
//! device is an error. Skips without a GPU (see `swax_tests::gpu`).
use swax_tensor::{DType, Device, Error, Tensor};
use swax_tests::{gpu, relative_error};

/// Both devices multiply the same f32 or bf16 values exactly and sum in f32, in different
/// orders; a product rounded to bf16 on its way into the sum would be off by ~2^-9 = 2e-3.
const TOLERANCE: f64 = 1e-5;

fn randn(dims: Vec<usize>, seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(dims, 1.0, seed, dtype, Device::Cpu).unwrap()
}

/// Three products of `[lhs] · [rhs]` (as transposed) into one accumulator on `gpu` and on the
/// CPU, compared after each.
fn matches_the_cpu(gpu: Device, dtype: DType, lhs: &[usize], rhs: &[usize], t: (bool, bool)) {
    let what = format!("{dtype:?} {lhs:?} · {rhs:?} transposed {t:?}");
    let mut cpu_acc: Option<Tensor> = None;
    let mut gpu_acc: Option<Tensor> = None;
    for call in 0..3u64 {
        let a = randn(lhs.to_vec(), 10 + call, dtype);
        let b = randn(rhs.to_vec(), 20 + call, dtype);
        let product = a.matmul_t(&b, t.0, t.1).unwrap();
        let cpu = cpu_acc.get_or_insert_with(|| randn(product.dims().to_vec(), 1, DType::F32));
        let on_gpu = gpu_acc.get_or_insert_with(|| cpu.to_device(gpu).unwrap());
        a.matmul_acc_into(&b, t.0, t.1, cpu).unwrap();
        let (ga, gb) = (a.to_device(gpu).unwrap(), b.to_device(gpu).unwrap());
        ga.matmul_acc_into(&gb, t.0, t.1, on_gpu).unwrap();
        assert_eq!(on_gpu.dtype(), DType::F32, "{what}");
        let e = relative_error(on_gpu, cpu).unwrap();
        assert!(
            e <= TOLERANCE,
            "{what}, call {call}: relative error {e:.3e}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn accumulates_like_the_cpu() {
    let Some(device) = gpu() else { return };
    let (m, n, k) = (67, 129, 301);
    for dtype in [DType::F32, DType::BF16] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let lhs = |batch: &[usize]| [batch, &if ta { [k, m] } else { [m, k] }[..]].concat();
            let rhs = |batch: &[usize]| [batch, &if tb { [n, k] } else { [k, n] }[..]].concat();
            let t = (ta, tb);
            matches_the_cpu(device, dtype, &lhs(&[]), &rhs(&[]), t);
            matches_the_cpu(device, dtype, &lhs(&[3]), &rhs(&[3]), t);
            matches_the_cpu(device, dtype, &lhs(&[3]), &rhs(&[]), t);
            matches_the_cpu(device, dtype, &lhs(&[]), &rhs(&[3]), t);
        }
        // The loss's shape: x^T [d, rows] · dlogits [rows, V] into dW's sums [d, V].
        matches_the_cpu(device, dtype, &[300, 96], &[300, 5003], (true, false));
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn an_accumulator_on_another_device_is_an_error() {
    let Some(device) = gpu() else { return };
    let a = randn(vec![4, 5], 1, DType::BF16).to_device(device).unwrap();
    let b = randn(vec![5, 6], 2, DType::BF16).to_device(device).unwrap();
    let mut acc = Tensor::zeros([4, 6], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(
        a.matmul_acc_into(&b, false, false, &mut acc),
        Err(Error::DeviceMismatch { .. })
    ));
    assert!(acc.to_f64_vec().unwrap().iter().all(|&v| v == 0.0));
}
