//! The optimizer ops on the CPU: the AdamW step against its formula written out in f64, the
//! sum of squares, and the errors on bad operands.
use swax_tensor::backend::AdamWStep;
use swax_tensor::{DType, Device, Tensor};

const HP: AdamWStep = AdamWStep {
    lr: 1e-2,
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    weight_decay: 0.1,
    step: 3,
};

fn t(v: &[f64]) -> Tensor {
    Tensor::from_f64s(v, vec![v.len()], DType::F32, Device::Cpu).unwrap()
}

#[test]
fn adamw_matches_its_formula() {
    let n = 70_000; // above the parallel threshold
    let f = |k: f64| (0..n).map(|i| ((i as f64) * k).sin()).collect::<Vec<_>>();
    let (p, g, m) = (f(0.37), f(1.3), f(0.11));
    let v: Vec<f64> = f(0.7).iter().map(|x| x * x).collect();
    let scale = 0.5;
    let (p2, m2, v2) = t(&p)
        .adamw(&t(&g), &t(&m), &t(&v), &t(&[scale]), HP)
        .unwrap();
    let (p2, m2, v2) = (
        p2.to_f64_vec().unwrap(),
        m2.to_f64_vec().unwrap(),
        v2.to_f64_vec().unwrap(),
    );
    let (b1, b2) = (HP.beta1, HP.beta2);
    for i in (0..n).step_by(997) {
        let gi = g[i] * scale;
        let mi = b1 * m[i] + (1.0 - b1) * gi;
        let vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        let mhat = mi / (1.0 - b1.powi(3));
        let vhat = vi / (1.0 - b2.powi(3));
        let pi = p[i] * (1.0 - HP.lr * HP.weight_decay) - HP.lr * mhat / (vhat.sqrt() + HP.eps);
        assert!((m2[i] - mi).abs() < 1e-6, "m at {i}");
        assert!((v2[i] - vi).abs() < 1e-6, "v at {i}");
        assert!((p2[i] - pi).abs() < 1e-5, "p at {i}: {} vs {pi}", p2[i]);
    }
}

#[test]
fn sum_squares_sums_squares() {
    let x: Vec<f64> = (0..100_000).map(|i| (i % 7) as f64 - 3.0).collect();
    let want: f64 = x.iter().map(|v| v * v).sum();
    let got = t(&x).sum_squares().unwrap().to_scalar().unwrap();
    assert!((got - want).abs() / want < 1e-6);
    let bf = t(&x).to_dtype(DType::BF16).unwrap();
    assert!((bf.sum_squares().unwrap().to_scalar().unwrap() - want).abs() / want < 1e-6);
}

#[test]
fn adamw_refuses_bad_operands() {
    let p = t(&[1.0, 2.0]);
    let one = t(&[1.0]);
    let short = t(&[1.0]);
    let err = p.adamw(&short, &p, &p, &one, HP).unwrap_err().to_string();
    assert!(err.contains("adamw"), "{err}");
    let step0 = AdamWStep { step: 0, ..HP };
    assert!(p.adamw(&p, &p, &p, &one, step0).is_err());
    let f64p = Tensor::from_f64s(&[1.0, 2.0], vec![2], DType::F64, Device::Cpu).unwrap();
    assert!(f64p.adamw(&f64p, &f64p, &f64p, &one, HP).is_err());
}
