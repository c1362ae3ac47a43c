//! AdamW with clipping and the learning-rate schedules: clipping bounds the update's gradient
//! norm, weight decay spares 1-D parameters, the schedules hit their landmarks.
use swax_nn::optim::adamw::{clip_factor, global_norm};
use swax_nn::optim::{AdamW, AdamWConfig, Schedule};
use swax_nn::{Init, Params};
use swax_tensor::{DType, Device, Tensor};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + b.abs())
}

#[test]
fn global_norm_and_clip_factor() {
    let g = [
        Tensor::from_f64s(&[3.0], vec![1], DType::F32, Device::Cpu).unwrap(),
        Tensor::from_f64s(&[4.0, 0.0], vec![2], DType::F32, Device::Cpu).unwrap(),
    ];
    let n = global_norm(&g).unwrap();
    assert!(close(n.to_scalar().unwrap(), 5.0));
    assert!(close(
        clip_factor(&n, 1.0).unwrap().to_scalar().unwrap(),
        1.0 / (5.0 + 1e-6)
    ));
    assert!(close(
        clip_factor(&n, 10.0).unwrap().to_scalar().unwrap(),
        1.0
    ));
}

#[test]
fn decay_spares_vectors_and_clipping_applies() {
    let mut p = Params::new(0, Device::Cpu);
    p.add("w".into(), vec![2, 2], Init::Const(1.0)).unwrap();
    p.add("norm".into(), vec![2], Init::Const(1.0)).unwrap();
    let cfg = AdamWConfig {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.5,
        max_grad_norm: Some(1.0),
    };
    let mut opt = AdamW::new(&p, cfg).unwrap();
    let zeros: Vec<Tensor> = p.iter().map(|x| x.value.zeros_like().unwrap()).collect();
    opt.step(&mut p, &zeros, 0.1).unwrap();
    let vals: Vec<Vec<f64>> = p.iter().map(|x| x.value.to_f64_vec().unwrap()).collect();
    assert!(
        vals[0].iter().all(|&v| close(v, 1.0 - 0.1 * 0.5)),
        "{vals:?}"
    );
    assert!(vals[1].iter().all(|&v| close(v, 1.0)), "{vals:?}");
    // A huge gradient is clipped to norm 1 before the moments see it.
    let big: Vec<Tensor> = p
        .iter()
        .map(|x| x.value.ones_like().unwrap().scale(1e6).unwrap())
        .collect();
    let stats = opt.step(&mut p, &big, 0.1).unwrap();
    assert!(close(
        stats.grad_norm.to_scalar().unwrap(),
        1e6 * 6f64.sqrt()
    ));
    let m = opt.m[1].to_f64_vec().unwrap()[0];
    assert!(
        close(m, 0.1 * 1e6 / (1e6 * 6f64.sqrt() + 1e-6) * 1e6 / 1e6),
        "m {m}"
    );
}

#[test]
fn schedules_hit_their_landmarks() {
    let cos = Schedule::Cosine {
        peak: 1.0,
        warmup: 10,
        total: 110,
        min_ratio: 0.1,
    };
    assert!(close(cos.lr(0), 0.1));
    assert!(close(cos.lr(9), 1.0));
    assert!(close(cos.lr(10), 1.0));
    assert!(close(cos.lr(60), 0.55));
    assert!(close(cos.lr(110), 0.1));
    let wsd = Schedule::Wsd {
        peak: 2.0,
        warmup: 10,
        total: 100,
        decay_fraction: 0.2,
        min_ratio: 0.0,
    };
    assert!(close(wsd.lr(50), 2.0));
    assert!(close(wsd.lr(79), 2.0));
    assert!(close(wsd.lr(90), 1.0));
    assert!(close(wsd.lr(100), 0.0));
}
