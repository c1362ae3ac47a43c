//! Data-parallel training on the CPU, ranks as threads (`distributed::Local`): the trainer's
//! path with N ranks, less NCCL. The batches dealt do not depend on the world size, N ranks
//! train as one rank accumulating the same micro-batches, only rank 0 writes, a run resumes at
//! another world size, and a failing rank stops the others; the launcher's environment and
//! `swax train --gpus` failing cleanly.
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{losses, micro, options};
use swax_hybrid::config::Config;
use swax_hybrid::train::data::{self, Part};
use swax_hybrid::train::distributed::{micro_batches, Local};
use swax_hybrid::train::nccl::Place;
use swax_hybrid::train::{self, Options, Summary};
use swax_tensor::Device;

/// Trains `cfg` as `outs.len()` ranks, rank r into `outs[r]`.
fn ranks(
    cfg: &Config,
    outs: &[PathBuf],
    resume: &[bool],
    stop_at: Option<u64>,
) -> Vec<Result<Summary, String>> {
    let groups = Local::group(outs.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .zip(outs)
            .zip(resume)
            .map(|((mut group, out), &resume)| {
                s.spawn(move || {
                    let opts = Options {
                        resume,
                        stop_at,
                        ..options(out, Device::Cpu)
                    };
                    train::train_in(cfg, &opts, &mut group).map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// `world` ranks sharing the run folder `out`, all succeeding.
fn shared(cfg: &Config, out: &Path, world: usize, resume: bool, stop_at: Option<u64>) {
    let outs = vec![out.to_path_buf(); world];
    for (rank, r) in ranks(cfg, &outs, &vec![resume; world], stop_at)
        .into_iter()
        .enumerate()
    {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

/// The final checkpoint's weights, by name.
fn weights(run: &Path) -> Vec<(String, Vec<f64>)> {
    let dir = train::checkpoint::latest(run).expect("a checkpoint");
    let (w, _) = swax_nn::checkpoint::load(&dir.join("model.safetensors")).unwrap();
    let mut w: Vec<(String, Vec<f64>)> = w
        .into_iter()
        .map(|(k, t)| (k, t.to_f64_vec().unwrap()))
        .collect();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

fn close(a: &[(f64, f64)], b: &[(f64, f64)], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} against {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.0, y.0);
        assert!(
            (x.1 - y.1).abs() <= tol * x.1.abs(),
            "step {}: {} against {}",
            x.0,
            x.1,
            y.1
        );
    }
}

#[test]
fn the_global_batches_do_not_depend_on_the_world_size() {
    for source in ["corpus", "mqar"] {
        let cfg = micro(
            "SM",
            1,
            &[
                &format!("data.source={source:?}"),
                "data.batch_size=2",
                "model.vocab_size=512",
            ],
        );
        // Four micro-batches a step, two steps: rank r's k-th batch is global micro-batch
        // k * world + r.
        let global = |world: usize| -> Vec<Vec<u32>> {
            let mut loaders: Vec<_> = (0..world)
                .map(|rank| data::open(&cfg, None, Part { rank, world }).unwrap().train)
                .collect();
            let mut out = Vec::new();
            for _ in 0..8 / world {
                for l in loaders.iter_mut() {
                    out.push(l.next_batch().unwrap().inputs);
                }
            }
            let states: Vec<_> = loaders.iter().map(|l| l.state()).collect();
            assert!(
                states.windows(2).all(|s| s[0] == s[1]),
                "{source}: {states:?}"
            );
            out
        };
        let one = global(1);
        assert_eq!(one.len(), 8);
        assert_ne!(one[0], one[1]);
        for world in [2, 4] {
            assert_eq!(global(world), one, "{source}, {world} ranks");
        }
    }
}

#[test]
fn n_ranks_train_as_one_rank_accumulating_their_micro_batches() {
    let base = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 5, &["train.grad_accum=4", "data.batch_size=2"]);
    let one = base.path().join("one");
    common::run(&cfg, &one, Device::Cpu, false, None);
    // Four ranks of one micro-batch each add the gradients in the order one rank does: the
    // same bits. Two ranks of two add them in another order: the same to rounding.
    let four = base.path().join("four");
    shared(&cfg, &four, 4, false, None);
    assert_eq!(losses(&four), losses(&one));
    assert_eq!(weights(&four), weights(&one));
    let two = base.path().join("two");
    shared(&cfg, &two, 2, false, None);
    close(&losses(&two), &losses(&one), 1e-5);
    for ((name, a), (_, b)) in weights(&two).iter().zip(&weights(&one)) {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-4, "{name}: differs by {worst}");
    }
}

#[test]
fn only_rank_0_writes() {
    let base = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 3, &["train.grad_accum=2", "train.save_every=1"]);
    let outs = [base.path().join("rank0"), base.path().join("rank1")];
    for r in ranks(&cfg, &outs, &[false, false], None) {
        r.unwrap();
    }
    assert_eq!(losses(&outs[0]).len(), 3);
    assert!(train::checkpoint::latest(&outs[0]).is_some());
    assert!(!outs[1].exists(), "rank 1 wrote into its run folder");
}

#[test]
fn a_run_resumes_exactly_at_another_world_size() {
    let base = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 6, &["train.grad_accum=2", "data.batch_size=2"]);
    let whole = base.path().join("whole");
    common::run(&cfg, &whole, Device::Cpu, false, None);
    // Two ranks to step 3, then one rank to the end: one micro-batch a rank adds as one rank
    // does, so the losses are the uninterrupted run's bit for bit.
    let split = base.path().join("split");
    shared(&cfg, &split, 2, false, Some(3));
    assert_eq!(losses(&split).len(), 3);
    common::run(&cfg, &split, Device::Cpu, true, None);
    assert_eq!(losses(&split), losses(&whole));
    // One rank to step 3, then two ranks.
    let back = base.path().join("back");
    common::run(&cfg, &back, Device::Cpu, false, Some(3));
    shared(&cfg, &back, 2, true, None);
    assert_eq!(losses(&back), losses(&whole));
}

#[test]
fn a_failing_rank_stops_the_others_with_its_reason() {
    let base = tempfile::tempdir().unwrap();
    let cfg = micro("SM", 3, &["train.grad_accum=2"]);
    // Rank 1 is told to resume a run its folder does not hold: it fails at the start, while
    // rank 0 waits for it to share the parameters.
    let outs = [base.path().join("rank0"), base.path().join("rank1")];
    let r = ranks(&cfg, &outs, &[false, true], None);
    let (e0, e1) = (r[0].as_ref().unwrap_err(), r[1].as_ref().unwrap_err());
    assert!(e1.contains("no checkpoint to resume from"), "{e1}");
    assert!(
        e0.contains("rank 1 stopped") && e0.contains("no checkpoint to resume from"),
        "{e0}"
    );
}

#[test]
fn a_world_size_must_divide_the_micro_batches() {
    assert_eq!(micro_batches(8, 4).unwrap(), 2);
    let e = micro_batches(6, 4).unwrap_err().to_string();
    assert!(e.contains("1, 2, 3, 6"), "{e}");
    let cfg = micro("SM", 1, &["train.grad_accum=3"]);
    let dir = tempfile::tempdir().unwrap();
    let r = ranks(
        &cfg,
        &[dir.path().join("a"), dir.path().join("b")],
        &[false; 2],
        None,
    );
    assert!(r.iter().all(|r| r
        .as_ref()
        .is_err_and(|e| e.contains("cannot share train.grad_accum = 3"))));
}

#[test]
fn the_launchers_environment_gives_each_process_its_place() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
    };
    assert_eq!(Place::from_env(env(&[])).unwrap(), None);
    assert_eq!(Place::from_env(env(&[("WORLD_SIZE", "1")])).unwrap(), None);
    let torchrun = Place::from_env(env(&[
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(
        (torchrun.rank, torchrun.world, torchrun.local_rank),
        (5, 8, 1)
    );
    assert_eq!(torchrun.master, "node0:29500");
    let agent = Place::from_env(env(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_USE_AGENT_STORE", "True"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(
        agent.master, "node0:29501",
        "torchrun's agent holds MASTER_PORT"
    );
    assert_eq!(torchrun.device(), Device::Cuda(1));
    let slurm = Place::from_env(env(&[
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "3"),
        ("MASTER_ADDR", "n1"),
        ("MASTER_PORT", "1234"),
        ("SWAX_NCCL_TIMEOUT", "30"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((slurm.rank, slurm.world, slurm.local_rank), (3, 4, 3));
    assert_eq!(slurm.timeout, Duration::from_secs(30));
    for (pairs, why) in [
        (
            &[("WORLD_SIZE", "2"), ("RANK", "0"), ("MASTER_PORT", "1")][..],
            "MASTER_ADDR",
        ),
        (&[("WORLD_SIZE", "2")][..], "RANK"),
        (&[("WORLD_SIZE", "2"), ("RANK", "2")][..], "not below"),
        (&[("WORLD_SIZE", "two")][..], "not a number"),
    ] {
        let pairs: &'static [(&str, &str)] = Box::leak(pairs.to_vec().into_boxed_slice());
        let e = Place::from_env(env(pairs)).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn rank_0_hands_the_id_to_the_others() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let place = |rank| Place {
        rank,
        world: 3,
        local_rank: rank,
        master: format!("127.0.0.1:{port}"),
        timeout: Duration::from_secs(20),
    };
    let id = swax_cuda::nccl::UniqueId([7; 128]);
    let got: Vec<_> = std::thread::scope(|s| {
        let others: Vec<_> = (1..3)
            .map(|r| {
                s.spawn(move || train::nccl::rendezvous(&place(r), None).map_err(|e| e.to_string()))
            })
            .collect();
        train::nccl::rendezvous(&place(0), Some(id)).unwrap();
        others.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for g in got {
        assert_eq!(g.unwrap(), id);
    }
    // Nobody listening: a clear error once the timeout has passed, not a hang.
    let lonely = Place {
        timeout: Duration::from_millis(300),
        ..place(1)
    };
    let e = train::nccl::rendezvous(&lonely, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 0 was not listening"), "{e}");
}

/// `swax train --gpus 2` where the ranks cannot all train (no GPU, no NCCL, one GPU): the
/// launcher names the rank that failed and stops the other, which would otherwise wait for it.
/// Where two GPUs and NCCL exist the run trains instead, and the test says so.
#[test]
fn the_launcher_stops_every_rank_when_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_swax"))
        .args(["train", "--gpus", "2", "--quiet", "--out"])
        .arg(dir.path().join("run"))
        .args(["--set", "train.steps=2", "--set", "train.grad_accum=2"])
        .env("SWAX_NCCL_TIMEOUT", "120")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        eprintln!("two ranks trained here (two GPUs and NCCL): nothing failed to stop");
        return;
    }
    assert!(
        err.contains("of 2 failed") && err.contains("every rank was stopped"),
        "{err}"
    );
    // The other rank was stopped (SIGTERM, then SIGKILL after 10 s), not left to time out.
    assert!(start.elapsed() < Duration::from_secs(60), "{err}");
}
