//! The trainer on the CPU: a micro model's loss falls, a resumed run repeats the uninterrupted
//! one bit for bit, every mixer pattern trains, and a run refuses to overwrite another.
mod common;

use common::{losses, micro, run};
use swax_tensor::Device;

#[test]
fn loss_falls() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro(
        "SM",
        40,
        &[
            "optim.lr=0.01",
            "data.seq_len=128",
            "data.corpus_max_doc_tokens=256",
            "train.recall_probes=1",
        ],
    );
    let summary = run(&cfg, dir.path(), Device::Cpu, false, None);
    let l = losses(dir.path());
    assert_eq!(l.len(), 40);
    let first: f64 = l[..5].iter().map(|p| p.1).sum::<f64>() / 5.0;
    let last: f64 = l[35..].iter().map(|p| p.1).sum::<f64>() / 5.0;
    assert!(last < first - 1.0, "loss {first} -> {last}");
    assert!(summary.val_loss.is_some_and(|v| v < first));
    assert!(!summary.recall_after.is_empty() && !summary.recall_before.is_empty());
    for f in ["config.toml", "metrics.jsonl", "loss.svg", "summary.txt"] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
}

#[test]
fn resume_is_exact() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // grad_accum 2 and a stochastic window: everything a step depends on must come back.
    let cfg = micro("SM", 8, &["train.grad_accum=2", "train.recall_probes=0"]);
    run(&cfg, a.path(), Device::Cpu, false, None);
    let stopped = run(&cfg, b.path(), Device::Cpu, false, Some(3));
    assert_eq!(stopped.steps, 3);
    run(&cfg, b.path(), Device::Cpu, true, None);
    let (la, lb) = (losses(a.path()), losses(b.path()));
    assert_eq!(la.len(), 8);
    assert_eq!(la, lb, "resumed losses differ from the uninterrupted run's");
}

/// `train.checkpoints=false` (what bench-train sets) trains and logs every step and writes no
/// checkpoint, not even at the end; the default writes the last one.
#[test]
fn checkpoints_can_be_turned_off() {
    let (off, on) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(
        &micro("S", 3, &["train.checkpoints=false"]),
        off.path(),
        Device::Cpu,
        false,
        None,
    );
    assert_eq!(losses(off.path()).len(), 3);
    assert_eq!(swax_hybrid::train::checkpoint::latest(off.path()), None);
    run(&micro("S", 3, &[]), on.path(), Device::Cpu, false, None);
    assert!(swax_hybrid::train::checkpoint::latest(on.path()).is_some());
}

#[test]
fn every_mixer_pattern_trains() {
    for pattern in ["SG", "RRRF", "F", "SF"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = micro(pattern, 3, &["train.recall_probes=0"]);
        run(&cfg, dir.path(), Device::Cpu, false, None);
        let l = losses(dir.path());
        assert_eq!(l.len(), 3, "{pattern}");
        assert!(l.iter().all(|p| p.1.is_finite()), "{pattern}: {l:?}");
    }
}

#[test]
fn refuses_to_overwrite_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 1, &["train.recall_probes=0"]);
    run(&cfg, dir.path(), Device::Cpu, false, None);
    let err = swax_hybrid::train::train(&cfg, &common::options(dir.path(), Device::Cpu))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--resume"), "{err}");
}

/// Every file of a checkpoint folder, by name, with its bytes.
fn files(dir: &std::path::Path) -> Vec<(std::ffi::OsString, Vec<u8>)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    all.sort();
    all
}

/// The loss is read a step late: a NaN at a step that is not saved is found after the next
/// step is queued (save_every 2), and one at a step that is saved (save_every 1) is found
/// before the save. Either way the run stops and the last checkpoint stays byte for byte the
/// good one.
#[test]
fn nan_loss_stops_and_keeps_the_last_checkpoint() {
    for save_every in [2, 1] {
        let dir = tempfile::tempdir().unwrap();
        let every = format!("train.save_every={save_every}");
        let cfg = micro("SM", 6, &["train.recall_probes=0", &every]);
        run(&cfg, dir.path(), Device::Cpu, false, Some(2));
        // Poison the saved weights: the resumed run's first loss is NaN.
        let ckpt = swax_hybrid::train::checkpoint::latest(dir.path()).unwrap();
        let file = ckpt.join("model.safetensors");
        let (mut weights, meta) = swax_nn::checkpoint::load(&file).unwrap();
        let embed = &weights["embed.weight"];
        let nan =
            swax_tensor::Tensor::full(f64::NAN, embed.dims().to_vec(), embed.dtype(), Device::Cpu);
        weights.insert("embed.weight".into(), nan.unwrap());
        let named: Vec<(String, swax_tensor::Tensor)> = weights.into_iter().collect();
        swax_nn::checkpoint::save(&file, &named, meta).unwrap();
        let kept = files(&ckpt);
        let opts = swax_hybrid::train::Options {
            resume: true,
            ..common::options(dir.path(), Device::Cpu)
        };
        let err = swax_hybrid::train::train(&cfg, &opts)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the loss is NaN at step 2"), "{err}");
        assert!(err.contains("step-0000002"), "{err}");
        assert_eq!(
            swax_hybrid::train::checkpoint::latest(dir.path()).unwrap(),
            ckpt
        );
        assert_eq!(files(&ckpt), kept, "save_every {save_every}");
        // Nothing was logged for the NaN step or after it.
        let logged: Vec<f64> = losses(dir.path()).iter().map(|p| p.0).collect();
        assert_eq!(logged, [1.0, 2.0], "save_every {save_every}");
    }
}

#[test]
fn a_profiled_run_says_where_the_step_time_went() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 3, &["train.recall_probes=0"]);
    let opts = swax_hybrid::train::Options {
        profile: true,
        ..common::options(dir.path(), Device::Cpu)
    };
    let summary = swax_hybrid::train::train(&cfg, &opts).unwrap();
    let p = summary.profile.expect("a profiled run has a profile");
    // Every phase does real work on every step; the forward and backward dominate a CPU step.
    assert!(
        p.data > 0.0 && p.forward > 0.0 && p.backward > 0.0 && p.optimizer > 0.0,
        "{p:?}"
    );
    assert!(p.forward + p.backward > p.data + p.optimizer, "{p:?}");
    assert_eq!(p.steps, 3);
    let report = summary.report();
    assert!(report.contains("backward"), "{report}");
    assert!(
        report.contains("none (the CPU runs no kernels)"),
        "{report}"
    );
    assert!(run(
        &micro("SM", 1, &["train.recall_probes=0"]),
        tempfile::tempdir().unwrap().path(),
        Device::Cpu,
        false,
        None
    )
    .profile
    .is_none());
}

#[test]
fn samples_are_logged_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let sets = ["train.eval_every=2", "train.sample_every=2"];
    let cfg = micro("MS", 4, &sets);
    run(&cfg, dir.path(), Device::Cpu, false, None);
    let samples = swax_hybrid::train::metrics::series(&dir.path().join("metrics.jsonl"), "step");
    let text = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("\"sample\"")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains('|'), "prompt|continuation: {}", lines[0]);
    assert!(!samples.is_empty());
    // Off by default.
    let quiet = tempfile::tempdir().unwrap();
    run(
        &micro("MS", 2, &["train.eval_every=1"]),
        quiet.path(),
        Device::Cpu,
        false,
        None,
    );
    let text = std::fs::read_to_string(quiet.path().join("metrics.jsonl")).unwrap();
    assert!(!text.contains("\"sample\""));
}

#[test]
fn recomputed_layers_train_to_the_same_losses() {
    // Every recurrent and attention kind, some layers recomputed in the backward: the same
    // gradients, so the same losses, bit for bit.
    let losses_with = |recompute: &str| {
        let dir = tempfile::tempdir().unwrap();
        let set = format!("model.recompute={recompute}");
        let cfg = micro("SMGRF", 3, &["train.recall_probes=0", &set]);
        run(&cfg, dir.path(), Device::Cpu, false, None);
        losses(dir.path())
    };
    let plain = losses_with("none");
    assert_eq!(plain.len(), 3);
    assert_eq!(losses_with("every:2"), plain);
    assert_eq!(losses_with("all"), plain);
}
