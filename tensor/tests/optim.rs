//! The optimizer ops on the CPU: the multi-tensor AdamW step against its formula written out
//! in f64, the global norm, accumulation in place, and the errors: bad operands, and a buffer
//! shared with another tensor, which an in-place op must refuse rather than change both.
use swax_tensor::backend::AdamWStep;
use swax_tensor::{AdamWParam, DType, Device, Tensor};

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

fn wave(n: usize, k: f64) -> Vec<f64> {
    (0..n).map(|i| ((i as f64) * k).sin()).collect()
}

#[test]
fn adamw_matches_its_formula() {
    // One tensor above the parallel threshold and decayed, one small and not.
    for (n, decay) in [(70_000, true), (37, false)] {
        let (p, g, m) = (wave(n, 0.37), wave(n, 1.3), wave(n, 0.11));
        let v: Vec<f64> = wave(n, 0.7).iter().map(|x| x * x).collect();
        let norm = 8.0;
        let scale = 4.0 / (norm + 1e-6);
        let (mut tp, tg, mut tm, mut tv) = (t(&p), t(&g), t(&m), t(&v));
        let mut params = [AdamWParam {
            param: &mut tp,
            grad: &tg,
            m: &mut tm,
            v: &mut tv,
            decay,
        }];
        Tensor::adamw(&mut params, &t(&[norm]), Some(4.0), HP).unwrap();
        let (p2, m2, v2) = (
            tp.to_f64_vec().unwrap(),
            tm.to_f64_vec().unwrap(),
            tv.to_f64_vec().unwrap(),
        );
        let (b1, b2) = (HP.beta1, HP.beta2);
        let wd = if decay { HP.weight_decay } else { 0.0 };
        for i in (0..n).step_by(97) {
            let gi = g[i] * scale;
            let mi = b1 * m[i] + (1.0 - b1) * gi;
            let vi = b2 * v[i] + (1.0 - b2) * gi * gi;
            let mhat = mi / (1.0 - b1.powi(3));
            let vhat = vi / (1.0 - b2.powi(3));
            let pi = p[i] * (1.0 - HP.lr * wd) - HP.lr * mhat / (vhat.sqrt() + HP.eps);
            assert!((m2[i] - mi).abs() < 1e-6, "m at {i}");
            assert!((v2[i] - vi).abs() < 1e-6, "v at {i}");
            assert!((p2[i] - pi).abs() < 1e-5, "p at {i}: {} vs {pi}", p2[i]);
        }
    }
}

#[test]
fn global_norm_and_accumulation_in_place() {
    let (a, b) = (wave(100_000, 0.3), wave(5, 2.0));
    let want: f64 = a.iter().chain(&b).map(|v| v * v).sum::<f64>().sqrt();
    let got = Tensor::global_norm(&[&t(&a), &t(&b)])
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
    let (mut acc_a, mut acc_b) = (t(&a), t(&b));
    Tensor::add_in_place(&mut [&mut acc_a, &mut acc_b], &[&t(&a), &t(&b)]).unwrap();
    let twice = |x: &[f64]| {
        x.iter()
            .map(|v| (*v as f32 * 2.0) as f64)
            .collect::<Vec<_>>()
    };
    assert_eq!(acc_a.to_f64_vec().unwrap(), twice(&a));
    assert_eq!(acc_b.to_f64_vec().unwrap(), twice(&b));
}

#[test]
fn in_place_ops_refuse_shared_buffers() {
    let (mut p, g, mut m, mut v) = (t(&[1.0, 2.0]), t(&[0.5, 0.5]), t(&[0.0; 2]), t(&[0.0; 2]));
    let alias = p.clone();
    let mut params = [AdamWParam {
        param: &mut p,
        grad: &g,
        m: &mut m,
        v: &mut v,
        decay: true,
    }];
    let err = Tensor::adamw(&mut params, &t(&[1.0]), None, HP)
        .unwrap_err()
        .to_string();
    assert!(err.contains("shared"), "{err}");
    assert_eq!(alias.to_f64_vec().unwrap(), [1.0, 2.0]);
    let view = m.reshape(vec![1, 2]).unwrap();
    let err = Tensor::add_in_place(&mut [&mut m], &[&g])
        .unwrap_err()
        .to_string();
    assert!(err.contains("shared"), "{err}");
    assert_eq!(view.to_f64_vec().unwrap(), [0.0, 0.0]);
    // A unique copy may be written, and leaves the original alone.
    let mut own = alias.clone().into_unique().unwrap();
    assert!(!own.same_storage(&alias));
    Tensor::add_in_place(&mut [&mut own], &[&g]).unwrap();
    assert_eq!(own.to_f64_vec().unwrap(), [1.5, 2.5]);
    assert_eq!(alias.to_f64_vec().unwrap(), [1.0, 2.0]);
    drop(alias);
    let p_unique = p.into_unique().unwrap();
    assert_eq!(p_unique.to_f64_vec().unwrap(), [1.0, 2.0]);
}

#[test]
fn adamw_refuses_bad_operands() {
    let one = t(&[1.0]);
    let (mut p, short, mut m, mut v) = (t(&[1.0, 2.0]), t(&[1.0]), t(&[0.0; 2]), t(&[0.0; 2]));
    let mut run = |grad: &Tensor, norm: &Tensor, max: Option<f64>, hp: AdamWStep| {
        let mut params = [AdamWParam {
            param: &mut p,
            grad,
            m: &mut m,
            v: &mut v,
            decay: true,
        }];
        Tensor::adamw(&mut params, norm, max, hp)
            .unwrap_err()
            .to_string()
    };
    assert!(run(&short, &one, None, HP).contains("adamw"));
    let good = t(&[0.0, 0.0]);
    assert!(run(&good, &one, None, AdamWStep { step: 0, ..HP }).contains("from 1"));
    assert!(run(&good, &good, None, HP).contains("not one value"));
    assert!(run(&good, &one, Some(0.0), HP).contains("positive"));
    let f64g = Tensor::from_f64s(&[1.0, 2.0], vec![2], DType::F64, Device::Cpu).unwrap();
    assert!(run(&f64g, &one, None, HP).contains("F64"));
}
