//! The fused SwiGLU (`Tensor::swiglu`, `Tensor::swiglu_backward`) against the composition it
//! replaces (narrow gate and up, silu, multiply; backward: the silu's derivative, the products,
//! a concatenation), on the CPU in f64, f32 and bf16; and the shapes it refuses.
use swax_tensor::{DType, Device, Tensor, UnaryOp};

fn randn(dims: &[usize], seed: u64) -> Tensor {
    // Scaled by 3 so that gates reach both tails of the sigmoid.
    Tensor::randn(dims.to_vec(), 3.0, seed, DType::F64, Device::Cpu).unwrap()
}

/// `(h, dgu)` by the composition, in f64.
fn composed(gu: &Tensor, dh: &Tensor) -> (Vec<f64>, Vec<f64>) {
    let f = gu.dims()[1] / 2;
    let (gate, up) = (gu.narrow(1, 0, f).unwrap(), gu.narrow(1, f, f).unwrap());
    let h = gate.silu().unwrap().mul(&up).unwrap();
    let dgate = gate
        .unary_backward(UnaryOp::Silu, &dh.mul(&up).unwrap())
        .unwrap();
    let dup = dh.mul(&gate.silu().unwrap()).unwrap();
    let dgu = Tensor::concat(&[&dgate, &dup], 1).unwrap();
    (h.to_f64_vec().unwrap(), dgu.to_f64_vec().unwrap())
}

/// max |got − want| / (1 + |want|), naming the first element over `tol`.
fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}, element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn swiglu_matches_the_composition_in_every_dtype() {
    // F odd, a whole number of bf16 vectors, and neither; one row and several.
    for (n, f) in [(1, 1), (5, 7), (3, 8), (4, 24), (2, 37)] {
        let (gu, dh) = (randn(&[n, 2 * f], 1), randn(&[n, f], 2));
        // Against the composition in f64 on the same (rounded) inputs: f32 differs by its
        // arithmetic's rounding, bf16 by rounding each output to 8 bits (relative 2^-9).
        for (dtype, tol) in [(DType::F64, 1e-14), (DType::F32, 1e-5), (DType::BF16, 4e-3)] {
            let what = format!("[{n}, 2·{f}] {dtype:?}");
            let (gu, dh) = (gu.to_dtype(dtype).unwrap(), dh.to_dtype(dtype).unwrap());
            let f64s = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
            let (want_h, want_dgu) = composed(&f64s(&gu), &f64s(&dh));
            let h = gu.swiglu().unwrap();
            let (dgu, h_again) = gu.swiglu_backward(&dh).unwrap();
            assert_eq!(h.dims(), &[n, f], "{what}");
            assert_eq!(dgu.dims(), &[n, 2 * f], "{what}");
            assert_eq!(h.dtype(), dtype, "{what}");
            let h = h.to_f64_vec().unwrap();
            close(&format!("h {what}"), &h, &want_h, tol);
            close(
                &format!("dgu {what}"),
                &dgu.to_f64_vec().unwrap(),
                &want_dgu,
                tol,
            );
            assert_eq!(h_again.to_f64_vec().unwrap(), h, "{what}: the backward's h");
        }
    }
}

#[test]
fn swiglu_refuses_what_is_not_a_pre_activation() {
    let err = |t: Tensor| t.swiglu().unwrap_err().to_string();
    for dims in [vec![6], vec![2, 3, 4], vec![3, 5], vec![3, 0]] {
        let msg = err(Tensor::zeros(dims.clone(), DType::F32, Device::Cpu).unwrap());
        assert!(
            msg.contains("swiglu") && msg.contains("[N, 2F]"),
            "{dims:?}: {msg}"
        );
    }
    let ids = Tensor::from_vec(vec![0u32; 4], [2, 2], Device::Cpu).unwrap();
    assert!(err(ids).contains("U32"));

    let gu = Tensor::zeros([3, 8], DType::F32, Device::Cpu).unwrap();
    for dh in [
        Tensor::zeros([3, 8], DType::F32, Device::Cpu).unwrap(),
        Tensor::zeros([4, 4], DType::F32, Device::Cpu).unwrap(),
        Tensor::zeros([12], DType::F32, Device::Cpu).unwrap(),
    ] {
        let msg = gu.swiglu_backward(&dh).unwrap_err().to_string();
        assert!(msg.contains("swiglu_backward"), "{:?}: {msg}", dh.dims());
    }
    let dh = Tensor::zeros([3, 4], DType::F64, Device::Cpu).unwrap();
    let msg = gu.swiglu_backward(&dh).unwrap_err().to_string();
    assert!(msg.contains("F64"), "{msg}");
}
