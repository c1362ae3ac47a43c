//! The optimizer on the GPU against the CPU, the reference: AdamW steps over many parameters at
//! odd sizes (around the kernels' 4096-element chunks, one empty), decay on and off, clipping
//! on and off; the global norm; gradient accumulation in place; and a deferred read of the
//! gradient norm, collected while later work is queued. Skips without a GPU (see
//! `swax_tests::gpu`).
use swax_nn::optim::{AdamW, AdamWConfig};
use swax_nn::{Init, Params};
use swax_tensor::{DType, Device, Readback, Tensor};
use swax_tests::{gpu, relative_error};

const SHAPES: [&[usize]; 8] = [
    &[37, 129],
    &[3],
    &[4095],
    &[4097],
    &[0],
    &[1],
    &[3, 5, 7, 11],
    &[70_001],
];

fn grads(step: u64, device: Device) -> Vec<Tensor> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Tensor::randn(s.to_vec(), 0.4, 1000 * step + i as u64, DType::F32, device).unwrap()
        })
        .collect()
}

fn params(device: Device) -> Params {
    let mut p = Params::new(11, device);
    for (i, s) in SHAPES.iter().enumerate() {
        p.add(format!("p{i}"), s.to_vec(), Init::Normal(0.5))
            .unwrap();
    }
    p
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn adamw_steps_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    for max_grad_norm in [Some(1.0), None] {
        let cfg = AdamWConfig {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            max_grad_norm,
        };
        let (mut on_cpu, mut on_gpu) = (params(Device::Cpu), params(gpu));
        let (mut opt_cpu, mut opt_gpu) = (
            AdamW::new(&on_cpu, cfg).unwrap(),
            AdamW::new(&on_gpu, cfg).unwrap(),
        );
        for step in 1..=3 {
            let lr = 1e-2;
            let nc = opt_cpu
                .step(&mut on_cpu, &grads(step, Device::Cpu), lr)
                .unwrap();
            let ng = opt_gpu.step(&mut on_gpu, &grads(step, gpu), lr).unwrap();
            let what = format!("step {step}, clip {max_grad_norm:?}");
            let e = relative_error(&ng.grad_norm, &nc.grad_norm).unwrap();
            assert!(e < 1e-6, "global norm, {what}: relative error {e:.2e}");
            for (i, (c, g)) in on_cpu.iter().zip(on_gpu.iter()).enumerate() {
                for (name, want, got) in [
                    ("p", &c.value, &g.value),
                    ("m", &opt_cpu.m[i], &opt_gpu.m[i]),
                    ("v", &opt_cpu.v[i], &opt_gpu.v[i]),
                ] {
                    let e = relative_error(got, want).unwrap();
                    assert!(
                        e < 1e-5,
                        "{name} of parameter {i}, {what}: relative error {e:.2e}"
                    );
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn accumulation_in_place_and_a_deferred_read_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let on = |device: Device| {
        let mut acc = grads(1, device);
        let more = grads(2, device);
        let mut targets: Vec<&mut Tensor> = acc.iter_mut().collect();
        Tensor::add_in_place(&mut targets, &more.iter().collect::<Vec<_>>()).unwrap();
        let norm = Tensor::global_norm(&acc.iter().collect::<Vec<_>>()).unwrap();
        let mut read = Readback::new(device, 4).unwrap();
        read.start(&[&norm]).unwrap();
        // Work queued after the read: collecting must not need it done.
        let later = Tensor::global_norm(&more.iter().collect::<Vec<_>>()).unwrap();
        let value = read.finish().unwrap()[0][0];
        assert_eq!(value, norm.to_scalar().unwrap(), "{device}");
        drop(later);
        (acc, value)
    };
    let (cpu_acc, cpu_norm) = on(Device::Cpu);
    let (gpu_acc, gpu_norm) = on(gpu);
    for (i, (c, g)) in cpu_acc.iter().zip(&gpu_acc).enumerate() {
        assert_eq!(
            g.to_vec::<f32>().unwrap(),
            c.to_vec::<f32>().unwrap(),
            "sum {i}"
        );
    }
    assert!(
        ((gpu_norm - cpu_norm) / cpu_norm).abs() < 1e-6,
        "{gpu_norm} vs {cpu_norm}"
    );
    // A read must be collected before the next starts.
    let mut read = Readback::new(gpu, 1).unwrap();
    let one = Tensor::ones(vec![1], DType::F32, gpu).unwrap();
    read.start(&[&one]).unwrap();
    assert!(read.start(&[&one]).is_err());
    assert_eq!(read.finish().unwrap(), [[1.0]]);
    assert!(read.finish().is_err());
}
