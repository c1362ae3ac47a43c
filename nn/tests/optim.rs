//! AdamW with clipping and the learning-rate schedules: the multi-tensor step in place equals
//! the per-tensor step it replaced bit for bit, a shared parameter is refused, clipping bounds
//! the update's gradient norm, weight decay spares 1-D parameters, the schedules hit their
//! landmarks.
use swax_nn::optim::{AdamW, AdamWConfig, Schedule};
use swax_nn::{Init, Params};
use swax_tensor::{DType, Device, Tensor};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + b.abs())
}

/// The global norm the optimizer used before it was one call: each gradient's sum of squares
/// (f64 chunks of 2^15, rounded to f32), added in f32, the square root in f32.
fn per_tensor_norm(grads: &[Tensor]) -> f32 {
    let mut total = 0f32;
    for g in grads {
        let v = g.to_vec::<f32>().unwrap();
        let chunks = v
            .chunks(1 << 15)
            .map(|c| c.iter().map(|&x| x as f64 * x as f64).sum::<f64>());
        total += chunks.sum::<f64>() as f32;
    }
    total.sqrt()
}

/// The per-tensor AdamW kernel the multi-tensor one replaced, its arithmetic as it was (f32,
/// bias corrections in f64), with the clipping factor from the old tensor ops' f32 arithmetic.
#[allow(clippy::manual_clamp)] // the old tensor ops' clamp: max, then min (NaN gives 0)
fn per_tensor_step(
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    (lr, step, wd, norm, max_norm): (f64, i32, f64, f32, Option<f64>),
    cfg: &AdamWConfig,
) {
    let scale = max_norm.map_or(1.0, |max| {
        (max as f32 / (norm + 1e-6f64 as f32)).max(0.0).min(1.0)
    });
    let bc1 = (1.0 - cfg.beta1.powi(step)) as f32;
    let bc2 = (1.0 - cfg.beta2.powi(step)) as f32;
    let (lr, b1, b2) = (lr as f32, cfg.beta1 as f32, cfg.beta2 as f32);
    let (eps, wd) = (cfg.eps as f32, wd as f32);
    for i in 0..p.len() {
        let g = g[i] * scale;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        p[i] = p[i] * (1.0 - lr * wd) - lr * (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps);
    }
}

/// A parameter's values, its two moments, and whether it decays.
type Moments = (Vec<f32>, Vec<f32>, Vec<f32>, bool);

fn random(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    Tensor::randn(shape.to_vec(), scale, seed, DType::F32, Device::Cpu).unwrap()
}

/// Many parameters at odd sizes (one past the parallel threshold), decay on and off, clipping
/// on and off, three steps: the multi-tensor AdamW in place equals the per-tensor kernel bit
/// for bit, and its global norm the old per-tensor sum.
#[test]
fn multi_tensor_adamw_equals_the_per_tensor_step_bit_for_bit() {
    let shapes: [&[usize]; 6] = [&[37, 129], &[3], &[70_001], &[1], &[5, 7, 11], &[4096]];
    for max_grad_norm in [Some(0.5), None] {
        let cfg = AdamWConfig {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            max_grad_norm,
        };
        let mut params = Params::new(7, Device::Cpu);
        for (i, s) in shapes.iter().enumerate() {
            params
                .add(format!("p{i}"), s.to_vec(), Init::Normal(0.5))
                .unwrap();
        }
        let mut opt = AdamW::new(&params, cfg).unwrap();
        let mut want: Vec<Moments> = params
            .iter()
            .map(|p| {
                let n = p.value.numel();
                (
                    p.value.to_vec::<f32>().unwrap(),
                    vec![0.0; n],
                    vec![0.0; n],
                    p.decay,
                )
            })
            .collect();
        for step in 1..=3 {
            let grads: Vec<Tensor> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| random(s, 100 * step + i as u64, 0.3))
                .collect();
            let lr = 1e-2 / step as f64;
            let stats = opt.step(&mut params, &grads, lr).unwrap();
            let old_norm = per_tensor_norm(&grads);
            let norm = stats.grad_norm.to_vec::<f32>().unwrap()[0];
            assert!(
                ((norm - old_norm) / old_norm).abs() < 1e-6,
                "step {step}: norm {norm}, per tensor {old_norm}"
            );
            for ((p, m, v, decay), g) in want.iter_mut().zip(&grads) {
                let wd = if *decay { cfg.weight_decay } else { 0.0 };
                let g = g.to_vec::<f32>().unwrap();
                per_tensor_step(
                    p,
                    &g,
                    m,
                    v,
                    (lr, step as i32, wd, norm, max_grad_norm),
                    &cfg,
                );
            }
            for (i, (got, (p, m, v, _))) in params.iter().zip(&want).enumerate() {
                let tensors = [
                    ("p", &got.value, p),
                    ("m", &opt.m[i], m),
                    ("v", &opt.v[i], v),
                ];
                for (name, got, want) in tensors {
                    let got = got.to_vec::<f32>().unwrap();
                    let differ = got
                        .iter()
                        .zip(want.iter())
                        .position(|(a, b)| a.to_bits() != b.to_bits());
                    assert!(
                        differ.is_none(),
                        "{name} of parameter {i}, step {step}, clip {max_grad_norm:?}: element \
                         {differ:?} is {:?}, the per-tensor step gives {:?}",
                        differ.map(|j| got[j]),
                        differ.map(|j| want[j])
                    );
                }
            }
        }
    }
}

#[test]
fn a_shared_parameter_is_refused_and_left_alone() {
    let mut p = Params::new(0, Device::Cpu);
    p.add("w".into(), vec![2, 2], Init::Const(1.0)).unwrap();
    let cfg = AdamWConfig {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.5,
        max_grad_norm: None,
    };
    let mut opt = AdamW::new(&p, cfg).unwrap();
    let copy = p.clone();
    let ones: Vec<Tensor> = p.iter().map(|x| x.value.ones_like().unwrap()).collect();
    let err = opt.step(&mut p, &ones, 0.1).unwrap_err().to_string();
    assert!(err.contains("shared"), "{err}");
    assert_eq!(opt.step, 0);
    let w = |p: &Params| p.iter().next().unwrap().value.to_f64_vec().unwrap();
    assert_eq!(w(&copy), [1.0; 4]);
    drop(copy);
    opt.step(&mut p, &ones, 0.1).unwrap();
    assert!(w(&p).iter().all(|&x| x < 1.0));
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
