//! What `twin-dump` writes for the PyTorch twin (`swax_bench::twin`), on a tiny model of every
//! mixer: the config reads back as it was; the weights are the model `swax train` starts from,
//! every parameter under its name with its shape; the rows are the trainer's batches and windows;
//! step 0's loss is the cross-entropy of its logits against the first batch's targets, and every
//! parameter has a gradient of its shape.
use std::path::Path;

use swax_bench::twin::dump;
use swax_hybrid::config::Config;
use swax_hybrid::model::Model;
use swax_hybrid::train::data::{self, Part};
use swax_hybrid::train::window_schedule;
use swax_nn::checkpoint::load;
use swax_tensor::{DType, Device};

/// Five layers, one of each mixer, grouped-query attention, two micro-batches a step and the
/// window drawn per step.
fn tiny() -> Config {
    let sets = [
        "model.pattern=\"SFMGR\"",
        "model.n_layers=5",
        "model.d_model=32",
        "model.n_heads=2",
        "model.n_kv_heads=1",
        "model.d_ff=64",
        "model.chunk=8",
        "data.seq_len=16",
        "data.batch_size=3",
        "data.mqar_pairs=2",
        "train.grad_accum=2",
        "train.w_short=4",
        "train.w_long=8",
        "train.p_short=0.5",
        "train.recall_probes=0",
        "train.dtype=\"f32\"",
    ];
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Config::resolve(Some("swax-tiny"), &sets).expect("a valid config")
}

fn mean_cross_entropy(logits: &[f64], targets: &[u32], v: usize) -> f64 {
    let (mut sum, mut count) = (0.0, 0usize);
    for (row, &t) in logits.chunks(v).zip(targets) {
        if t == swax_data::IGNORE {
            continue;
        }
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        sum += lse - row[t as usize];
        count += 1;
    }
    sum / count.max(1) as f64
}

#[test]
fn the_dump_holds_the_runs_start_its_rows_and_step_zero() {
    let cfg = tiny();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump");
    let steps = 3;
    dump(&cfg, steps, Device::Cpu, &out).unwrap();

    let path = out.join("config.toml");
    let back = Config::resolve(Some(path.to_str().unwrap()), &[]).unwrap();
    assert_eq!(back, cfg);

    let model = Model::new(&cfg.model, cfg.train.seed, Device::Cpu).unwrap();
    let (weights, meta) = load(&out.join("model.safetensors")).unwrap();
    assert_eq!(meta.get("format").map(String::as_str), Some("swax"));
    assert_eq!(weights.len(), model.params.len());
    for p in model.params.iter() {
        let w = weights
            .get(&p.name)
            .unwrap_or_else(|| panic!("{} missing", p.name));
        assert_eq!(w.dims(), p.value.dims(), "{}", p.name);
        assert_eq!(
            w.to_vec::<f32>().unwrap(),
            p.value.to_vec::<f32>().unwrap(),
            "{}",
            p.name
        );
    }

    let (rows, _) = load(&out.join("rows.safetensors")).unwrap();
    let (a, b, t) = (cfg.train.grad_accum, cfg.data.batch_size, cfg.data.seq_len);
    let mut loader = data::open(&cfg, None, Part::WHOLE).unwrap().train;
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for _ in 0..steps as usize * a {
        let batch = loader.next_batch().unwrap();
        inputs.extend(batch.inputs);
        targets.extend(batch.targets);
    }
    for (name, want) in [("inputs", &inputs), ("targets", &targets)] {
        assert_eq!(rows[name].dims(), [steps as usize, a, b, t], "{name}");
        assert_eq!(&rows[name].to_vec::<u32>().unwrap(), want, "{name}");
    }
    let windows: Vec<u32> = (0..steps)
        .map(|s| window_schedule(&cfg).window(s) as u32)
        .collect();
    assert_eq!(rows["windows"].to_vec::<u32>().unwrap(), windows);

    let (step0, meta) = load(&out.join("step0.safetensors")).unwrap();
    assert_eq!(meta["dtype"], "f32");
    assert_eq!(meta["window"], windows[0].to_string());
    let v = cfg.model.vocab_size;
    assert_eq!(step0["logits"].dims(), [b, t, v]);
    let logits = step0["logits"].to_f64_vec().unwrap();
    let loss = step0["loss"].to_scalar().unwrap();
    let want = mean_cross_entropy(&logits, &targets[..b * t], v);
    assert!(
        (loss - want).abs() < 1e-5 * want,
        "loss {loss}, the cross-entropy of the logits {want}"
    );
    assert_eq!(step0.len(), 2 + model.params.len());
    for p in model.params.iter() {
        let g = &step0[&format!("grad.{}", p.name)];
        assert_eq!(g.dims(), p.value.dims(), "{}", p.name);
        assert_eq!(g.dtype(), DType::F32);
        let g = g.to_f64_vec().unwrap();
        assert!(
            g.iter().all(|x| x.is_finite()) && g.iter().any(|&x| x != 0.0),
            "{}: the gradient is zero or not finite",
            p.name
        );
    }
}

#[test]
fn no_steps_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = dump(&tiny(), 0, Device::Cpu, Path::new(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--steps"), "{e}");
}
