//! The first training steps on the GPU (bf16 activations, f32 master weights, the reference
//! mixers where CUDA has no fused kernel yet) agree with the CPU's (f32, fused kernels) within
//! bf16 tolerance, for a model with every mixer; a GPU run resumes; evaluation in pieces on the
//! GPU gives one pass's logits. Ignored unless asked for (`--include-ignored`), like every GPU
//! test; then skips without a GPU, or fails under SWAX_REQUIRE_CUDA=1.
mod common;

use common::{losses, micro, paired_losses, run};
use std::sync::{Mutex, MutexGuard};
use swax_tensor::Device;

/// The GPU, held by one test at a time: the generation test reads the pool's bytes in use, which
/// a test allocating beside it on another thread would change.
fn gpu() -> Option<(Device, MutexGuard<'static, ()>)> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let gpu = swax_tests::gpu()?;
    Some((gpu, ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())))
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn first_steps_match_the_cpu() {
    let Some((gpu, _one_at_a_time)) = gpu() else {
        return;
    };
    let sets = [
        "train.recall_probes=4",
        "train.w_short=16",
        "data.seq_len=128",
        "data.corpus_max_doc_tokens=256",
    ];
    let cfg = micro("SMGRF", 4, &sets);
    let (cpu_dir, gpu_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cpu = run(&cfg, cpu_dir.path(), Device::Cpu, false, None);
    let on_gpu = run(&cfg, gpu_dir.path(), gpu, false, None);
    assert_eq!(on_gpu.dtype, swax_tensor::DType::BF16);
    for (step, c, g) in paired_losses(cpu_dir.path(), gpu_dir.path(), 4) {
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
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn a_gpu_run_resumes() {
    let Some((gpu, _one_at_a_time)) = gpu() else {
        return;
    };
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

/// Evaluation in pieces on the GPU (bf16, head dim 64 so every mixer has its fused kernel),
/// pieces that do not divide the sequence and a window shorter than a piece, against one pass
/// on the GPU and one pass on the CPU (f32), for a model with every mixer.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn evaluation_in_pieces_on_the_gpu_matches_one_pass() {
    use swax_hybrid::eval::run::{all_logits, InPieces, OneShot};
    use swax_hybrid::model::Model;
    use swax_tensor::DType;
    let Some((gpu, _one_at_a_time)) = gpu() else {
        return;
    };
    let sets = ["model.d_model=128", "model.n_heads=2", "model.d_ff=128"];
    let cfg = micro("SMGRF", 1, &sets);
    let on_cpu = Model::new(&cfg.model, 5, Device::Cpu).unwrap();
    let mut on_gpu = on_cpu.clone();
    for (i, p) in on_cpu.params.iter().enumerate() {
        on_gpu.params.set(i, p.value.to_device(gpu).unwrap());
    }
    let tokens: Vec<u32> = (0..700u32).map(|t| (t * 37 + 11) % 256).collect();
    let window = 100;
    let cpu = OneShot {
        model: &on_cpu,
        window,
        dtype: DType::F32,
        device: Device::Cpu,
    };
    let one = OneShot {
        model: &on_gpu,
        window,
        dtype: DType::BF16,
        device: gpu,
    };
    let pieces = InPieces {
        model: &on_gpu,
        window,
        piece: 256,
        dtype: DType::BF16,
        device: gpu,
    };
    let want = all_logits(&cpu, &tokens).unwrap();
    let one = all_logits(&one, &tokens)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let got = all_logits(&pieces, &tokens)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let to_cpu = |x: &swax_tensor::Tensor| x.to_device(Device::Cpu).unwrap();
    let (one, got) = (to_cpu(&one), to_cpu(&got));
    // bf16 activations through five layers: about a percent, the same as training's tolerance.
    let e_one = swax_tests::relative_error(&got, &one).unwrap();
    let e_cpu = swax_tests::relative_error(&got, &want).unwrap();
    assert!(
        e_one < 2e-2,
        "pieces against one pass on the GPU: {e_one:.2e}"
    );
    assert!(
        e_cpu < 2e-2,
        "pieces on the GPU against the CPU: {e_cpu:.2e}"
    );
}

/// Generation on the GPU (bf16, head dim 64 so every mixer has its fused kernel): greedy
/// decoding with the carried states picks, at every step, the argmax of one pass over the whole
/// sequence up to bf16's rounding; and the memory the pool holds stays flat step after step for
/// the bounded mixers, growing only for full attention.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn generation_on_the_gpu_matches_one_pass_and_holds_flat_memory() {
    use swax_hybrid::eval::run::{all_logits, OneShot};
    use swax_hybrid::generate::{generate, Decoder, Request, Sampling};
    use swax_hybrid::model::Model;
    use swax_tensor::DType;
    let Some((gpu, _one_at_a_time)) = gpu() else {
        return;
    };
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 255).collect();
    for pattern in ["S", "M", "G", "R", "F"] {
        let sets = ["model.d_model=128", "model.n_heads=2", "model.d_ff=128"];
        let cfg = micro(pattern, 1, &sets);
        let model = Model::new(&cfg.model, 7, gpu).unwrap();
        let req = Request {
            max_tokens: 16,
            sampling: Sampling::GREEDY,
            batch: 1,
            window: 16,
            piece: 24,
            stop: None,
        };
        let out = generate(&model, &prompt, &req, DType::BF16, gpu, &mut |_, _| {}).unwrap();
        let tokens: Vec<u32> = prompt.iter().chain(&out[0]).copied().collect();
        let one = OneShot {
            model: &model,
            window: req.window,
            dtype: DType::BF16,
            device: gpu,
        };
        let logits = all_logits(&one, &tokens[..tokens.len() - 1]).unwrap();
        let v = logits.dims()[1];
        let rows = logits
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (j, &t) in out[0].iter().enumerate() {
            let row = &rows[(prompt.len() - 1 + j) * v..(prompt.len() + j) * v];
            let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert!(
                row[t as usize] >= best - 2e-2 * best.abs().max(1.0),
                "{pattern}: step {j} chose {t} ({}), the full pass's best is {best}",
                row[t as usize]
            );
        }
        let mut dec = Decoder::new(&model, 16, DType::BF16, gpu, 4).unwrap();
        dec.prefill(&prompt, 24).unwrap();
        let in_use = || swax_tensor::cuda::device(0).unwrap().pool_stats().in_use;
        let mut held = Vec::new();
        for step in 0..48u32 {
            drop(dec.read(&[step + 1, 2, 3, 4]).unwrap());
            if step == 15 || step == 47 {
                held.push(in_use());
            }
        }
        match pattern {
            "F" => assert!(held[1] > held[0], "{pattern}: {held:?}"),
            _ => assert_eq!(
                held[0], held[1],
                "{pattern}: pool bytes in use grew: {held:?}"
            ),
        }
    }
}
