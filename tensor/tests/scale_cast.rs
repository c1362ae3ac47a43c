//! `Tensor::scale_cast` on the CPU: the same bits as the three passes it replaces (widen to the
//! scale's dtype, multiply, cast), for every dtype pair it accepts; every other pair, a scale of
//! more than one value, or integer values, an error that names the problem.
use swax_tensor::{DType, Device, Tensor};

fn randn(dims: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(dims.to_vec(), 3.0, seed, dtype, Device::Cpu).unwrap()
}

const PAIRS: [(DType, DType); 5] = [
    (DType::F64, DType::F64),
    (DType::F32, DType::F32),
    (DType::F32, DType::BF16),
    (DType::BF16, DType::F32),
    (DType::BF16, DType::BF16),
];

#[test]
fn equals_widen_multiply_cast() {
    for (from, to) in PAIRS {
        // Large enough for the parallel path; odd.
        let x = randn(&[7, 5003], 1, from);
        let acc = from.accumulator();
        for s in [-0.37, 1.0 / 3.0, 0.0] {
            let s = Tensor::scalar(s, acc, Device::Cpu).unwrap();
            let got = x.scale_cast(&s, to).unwrap();
            let want = x
                .to_dtype(acc)
                .unwrap()
                .mul(&s)
                .unwrap()
                .to_dtype(to)
                .unwrap();
            assert_eq!(got.dtype(), to, "{from} -> {to}");
            assert_eq!(got.dims(), x.dims(), "{from} -> {to}");
            assert_eq!(
                got.to_f64_vec().unwrap(),
                want.to_f64_vec().unwrap(),
                "{from} -> {to}"
            );
        }
    }
}

#[test]
fn bad_inputs_are_errors_that_name_the_problem() {
    let x = randn(&[3, 4], 1, DType::BF16);
    let f32_scale = Tensor::scalar(2.0, DType::F32, Device::Cpu).unwrap();
    let cases = [
        (
            x.clone(),
            Tensor::ones([2], DType::F32, Device::Cpu).unwrap(),
            DType::BF16,
            "[2], not one value",
        ),
        (
            x.clone(),
            Tensor::scalar(2.0, DType::BF16, Device::Cpu).unwrap(),
            DType::BF16,
            "scale bf16",
        ),
        (x.clone(), f32_scale.clone(), DType::F64, "output f64"),
        (x.clone(), f32_scale.clone(), DType::U32, "output u32"),
        (
            x.to_dtype(DType::F64).unwrap(),
            f32_scale.clone(),
            DType::F64,
            "scale f32",
        ),
    ];
    for (x, s, to, says) in cases {
        let err = x.scale_cast(&s, to).unwrap_err().to_string();
        assert!(
            err.contains("scale_cast") && err.contains(says),
            "{err:?} does not say {says:?}"
        );
    }
    let ids = Tensor::from_vec(vec![1u32; 4], [4], Device::Cpu).unwrap();
    let err = ids
        .scale_cast(&f32_scale, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("U32"), "{err}");
}
