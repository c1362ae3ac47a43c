//! The first training steps on the GPU (bf16 activations, f32 master weights, the reference
//! mixers where CUDA has no fused kernel yet) agree with the CPU's (f32, fused kernels) within
//! bf16 tolerance, for a model with every mixer. Skips without a GPU (fails under
//! SWAX_REQUIRE_CUDA=1), like every GPU test.
mod common;

use common::{losses, micro, run};
use swax_tensor::Device;

#[test]
fn first_steps_match_the_cpu() {
    let Some(gpu) = swax_tests::gpu() else { return };
    let cfg = micro("SMGRF", 4, &["train.recall_probes=4", "train.w_short=16"]);
    let (cpu_dir, gpu_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cpu = run(&cfg, cpu_dir.path(), Device::Cpu, false, None);
    let on_gpu = run(&cfg, gpu_dir.path(), gpu, false, None);
    assert_eq!(on_gpu.dtype, swax_tensor::DType::BF16);
    let (lc, lg) = (losses(cpu_dir.path()), losses(gpu_dir.path()));
    assert_eq!(lc.len(), 4);
    for ((step, c), (_, g)) in lc.iter().zip(&lg) {
        // bf16 keeps 8 bits of mantissa: a few parts in a thousand per op, compounding.
        let rel = (c - g).abs() / c.abs();
        assert!(
            rel < 2e-2,
            "step {step}: cpu {c}, gpu {g} (relative {rel:.2e})"
        );
    }
    let (vc, vg) = (cpu.val_loss.unwrap(), on_gpu.val_loss.unwrap());
    assert!((vc - vg).abs() / vc < 2e-2, "val loss cpu {vc}, gpu {vg}");
}

#[test]
fn a_gpu_run_resumes() {
    let Some(gpu) = swax_tests::gpu() else { return };
    let cfg = micro("SM", 4, &["train.recall_probes=0"]);
    let dir = tempfile::tempdir().unwrap();
    run(&cfg, dir.path(), gpu, false, Some(2));
    let done = run(&cfg, dir.path(), gpu, true, None);
    assert_eq!(done.steps, 4);
    let l = losses(dir.path());
    assert_eq!(
        l.iter().map(|p| p.0 as u64).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(l.iter().all(|p| p.1.is_finite()));
}
