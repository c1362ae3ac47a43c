//! Data-parallel training through NCCL on the GPU: one rank through NCCL takes the plain path's
//! steps; with two GPUs, two ranks (threads, one GPU each) follow one GPU at the same global
//! batch within bf16 tolerance, a rank that fails stops the other with an error instead of a
//! hang, and `swax train --gpus 2` trains with rank 0 alone writing. Ignored unless asked for
//! (`--include-ignored`); then skips without a GPU or without libnccl (see `swax_cuda::nccl`),
//! and `SWAX_REQUIRE_CUDA=1` makes either a failure.
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{losses, micro, options, paired_losses, run};
use swax_cuda::nccl::UniqueId;
use swax_hybrid::config::Config;
use swax_hybrid::train::nccl::NcclGroup;
use swax_hybrid::train::{self, Options};
use swax_tensor::Device;

/// The number of GPUs, held by one test at a time, when NCCL loads.
fn gpus() -> Option<(usize, MutexGuard<'static, ()>)> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    swax_tests::gpu()?;
    if let Err(e) = swax_cuda::nccl::load() {
        if std::env::var("SWAX_REQUIRE_CUDA").as_deref() == Ok("1") {
            panic!("SWAX_REQUIRE_CUDA=1 but NCCL does not load: {e}");
        }
        eprintln!("skipping: {e}");
        return None;
    }
    let n = swax_cuda::CudaDevice::count().expect("a driver");
    Some((n, ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())))
}

const TIMEOUT: Duration = Duration::from_secs(60);

/// Trains `cfg` as `outs.len()` ranks through NCCL, rank r on GPU r into `outs[r]`.
fn nccl_ranks(cfg: &Config, outs: &[PathBuf], resume: &[bool]) -> Vec<Result<(), String>> {
    let id = UniqueId::new().unwrap();
    let world = outs.len();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let (out, resume) = (&outs[rank], resume[rank]);
                s.spawn(move || {
                    let device = Device::Cuda(rank);
                    let mut group = NcclGroup::new(device, rank, world, &id, TIMEOUT)
                        .map_err(|e| e.to_string())?;
                    let opts = Options {
                        resume,
                        ..options(out, device)
                    };
                    train::train_in(cfg, &opts, &mut group)
                        .map(drop)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (cargo test -- --include-ignored)"]
fn one_rank_through_nccl_takes_the_plain_steps() {
    let Some((_, _one_at_a_time)) = gpus() else {
        return;
    };
    let cfg = micro("SM", 5, &["train.grad_accum=2"]);
    let base = tempfile::tempdir().unwrap();
    let (plain, nccl) = (base.path().join("plain"), base.path().join("nccl"));
    run(&cfg, &plain, Device::Cuda(0), false, None);
    for r in nccl_ranks(&cfg, std::slice::from_ref(&nccl), &[false]) {
        r.unwrap();
    }
    // One rank's sum is a copy: the same steps, up to the last bits that the kernels' atomic
    // additions (embedding, short convolution) leave to chance in any two runs.
    for (step, a, b) in paired_losses(&plain, &nccl, 5) {
        assert!(
            (a - b).abs() <= 1e-3 * a.abs(),
            "step {step}: plain {a}, nccl {b}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (cargo test -- --include-ignored)"]
fn two_ranks_follow_one_gpu_at_the_same_global_batch() {
    let Some((n, _one_at_a_time)) = gpus() else {
        return;
    };
    if n < 2 {
        eprintln!("skipping: {n} GPU, two ranks need two");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    for reduce in ["f32", "bf16"] {
        let cfg = micro(
            "SM",
            6,
            &[
                "train.grad_accum=2",
                &format!("train.reduce_dtype={reduce:?}"),
            ],
        );
        let one = base.path().join(format!("one-{reduce}"));
        run(&cfg, &one, Device::Cuda(0), false, None);
        let two = base.path().join(format!("two-{reduce}"));
        for r in nccl_ranks(&cfg, &[two.clone(), two.clone()], &[false, false]) {
            r.unwrap();
        }
        for (step, a, b) in paired_losses(&one, &two, 6) {
            let rel = (a - b).abs() / a.abs();
            assert!(rel < 2e-2, "{reduce}, step {step}: one GPU {a}, two {b}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (cargo test -- --include-ignored)"]
fn a_failing_rank_stops_the_other() {
    let Some((n, _one_at_a_time)) = gpus() else {
        return;
    };
    if n < 2 {
        eprintln!("skipping: {n} GPU, two ranks need two");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 3, &["train.grad_accum=2"]);
    // Rank 1 fails at its start (nothing to resume); rank 0 waits for it in the broadcast of
    // the parameters, and must stop with an error well before the timeout would end a hang.
    let start = Instant::now();
    let r = nccl_ranks(
        &cfg,
        &[base.path().join("a"), base.path().join("b")],
        &[false, true],
    );
    assert!(
        r[1].as_ref().is_err_and(|e| e.contains("no checkpoint")),
        "{r:?}"
    );
    assert!(r[0].is_err(), "{r:?}");
    assert!(start.elapsed() < 2 * TIMEOUT, "{r:?}");
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (cargo test -- --include-ignored)"]
fn swax_train_on_two_gpus() {
    let Some((n, _one_at_a_time)) = gpus() else {
        return;
    };
    if n < 2 {
        eprintln!("skipping: {n} GPU, two ranks need two");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let swax = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_swax"))
            .args(["train", "--gpus", "2", "--quiet", "--out"])
            .arg(&out)
            .args(["--set", "train.steps=4", "--set", "train.grad_accum=2"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    swax(&["--stop-at", "2"]);
    swax(&["--resume"]);
    // One line a step (rank 0's), across the resume.
    let l = losses(Path::new(&out));
    assert_eq!(
        l.iter().map(|p| p.0 as u64).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
}
