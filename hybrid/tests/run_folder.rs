//! The run folder as a user meets it through `swax train`, `eval` and `report`:
//! nothing in it changes before a command is known to be able to run; one process at a time
//! writes into it; a resume continues the run exactly, with only the config changes that keep
//! its meaning (recorded), on the data it was trained on; what a killed process left is
//! cleared; pruning keeps what `latest` names; evaluations are kept by checkpoint step; errors
//! name the file, the key and the sizes. Each input class (paths, numbers, names that become
//! paths) is tried with its odd forms.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use swax_hybrid::train::checkpoint;
use swax_tensor::Device;

use common::{swax, text};

/// A micro run: a couple of layers of width 16 on a small corpus, a step in milliseconds.
const MICRO: [&str; 17] = [
    "model.n_layers=2",
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_kv_heads=1",
    "model.d_ff=32",
    "model.chunk=16",
    "data.seq_len=32",
    "data.batch_size=2",
    "data.corpus_train_tokens=8000",
    "data.corpus_val_tokens=1024",
    "train.steps=3",
    "train.w_short=8",
    "train.w_long=16",
    "train.eval_every=0",
    "train.eval_batches=1",
    "train.save_every=0",
    "train.recall_probes=0",
];

/// The arguments of `swax train` of the micro run into `out`, then `extra` (later `--set`s win).
fn train_args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["train", "--device", "cpu", "--quiet", "--out"]
        .map(String::from)
        .to_vec();
    args.push(out.display().to_string());
    for s in MICRO {
        args.extend(["--set".into(), s.into()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn train(out: &Path, extra: &[&str]) -> Output {
    swax(&train_args(out, extra))
}

/// Resumes the run in `out` with only `extra` (no micro settings: the run's config stands).
fn resume(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--device", "cpu", "--quiet", "--resume", "--out"];
    let out = out.display().to_string();
    args.push(&out);
    args.extend(extra);
    swax(&args)
}

#[track_caller]
fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

/// Checks that the command failed with an error (not a panic or an abort) saying each of
/// `needles`; returns its message.
#[track_caller]
fn fails(out: Output, needles: &[&str]) -> String {
    let log = text(&out);
    // 1: an error the command reports; 2: one clap reports (a malformed argument).
    assert!(matches!(out.status.code(), Some(1 | 2)), "{log}");
    for n in needles {
        assert!(log.contains(n), "{n:?} not in: {log}");
    }
    log
}

/// Every file under `dir` with its bytes, but the lock file (it holds the last holder's id).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name() != Some(swax_data::lock::LOCK_FILE.as_ref()) {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn latest_step(run: &Path) -> u64 {
    let name = std::fs::read_to_string(run.join("checkpoints/latest")).unwrap();
    name.trim().trim_start_matches("step-").parse().unwrap()
}

/// `swax prepare` of `text` (bytes tokenizer and a tenth held out unless `extra` says) into
/// `out`.
fn prepare(dir: &Path, out: &Path, text: &str, extra: &[&str]) {
    let input = dir.join(format!(
        "{}.txt",
        out.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&input, text).unwrap();
    let mut args = vec!["prepare".to_string(), input.display().to_string()];
    args.extend(["--out".into(), out.display().to_string()]);
    if !extra.contains(&"--val-fraction") {
        args.extend(["--val-fraction".into(), "0.1".into()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    ok(swax(&args));
}

/// Documents enough for the micro run, each `letter` repeated in words.
fn corpus(letter: char) -> String {
    let doc = |i: usize| format!("{i:03} {}", format!("{letter}{letter}{letter} ").repeat(40));
    (0..60).map(doc).collect::<Vec<_>>().join("<|endoftext|>")
}

#[test]
fn a_failed_resume_changes_nothing_and_allowed_changes_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let before = snapshot(&run);
    for (set, key) in [
        ("model.d_model=64", "model.d_model (16 -> 64)"),
        ("data.seq_len=64", "data.seq_len (32 -> 64)"),
        ("train.seed=7", "train.seed"),
    ] {
        fails(
            resume(&run, &["--set", set, "--set", "train.steps=5"]),
            &[key],
        );
        assert!(snapshot(&run) == before, "{set} changed the run folder");
    }
    // A second process with another seed into the same folder, without --resume.
    fails(train(&run, &["--set", "train.seed=7"]), &["--resume"]);
    assert!(snapshot(&run) == before);
    ok(swax(&[
        "eval",
        run.to_str().unwrap(),
        "--device",
        "cpu",
        "--tasks",
        "loss",
        "--lengths",
        "64",
        "--samples",
        "1",
    ]));

    // A change that keeps the run's meaning goes on, and is recorded where it happened.
    let log = ok(resume(&run, &["--set", "train.steps=5"]));
    assert!(log.contains("train.steps = 5 (was 3)"), "{log}");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let change = metrics
        .lines()
        .find(|l| l.contains("config_changed"))
        .expect(&metrics);
    let change: serde_json::Value = serde_json::from_str(change).unwrap();
    assert_eq!(change["step"], 3);
    assert_eq!(change["config_changed"]["train.steps"]["from"], 3);
    assert_eq!(change["config_changed"]["train.steps"]["to"], 5);
    assert_eq!(latest_step(&run), 5);
    let cfg = swax_hybrid::config::Config::load(&run.join("config.toml")).unwrap();
    assert_eq!(cfg.train.steps, 5);
}

#[test]
fn pruning_keeps_the_checkpoint_latest_names() {
    let cfg = common::micro("SM", 1, &[]);
    let model = swax_hybrid::model::Model::new(&cfg.model, 0, Device::Cpu).unwrap();
    let adamw = swax_nn::optim::AdamWConfig {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.0,
        max_grad_norm: None,
    };
    let opt = swax_nn::optim::AdamW::new(&model.params, adamw).unwrap();
    let state = |step| checkpoint::State {
        step,
        adamw_step: step,
        loader: swax_data::LoaderState {
            seed: 0,
            t: 64,
            tokens: 0,
            epoch: 0,
            shard: 0,
            window: 0,
            rows: 0,
        },
        tokens_seen: 0,
        elapsed_s: 0.0,
        data: None,
    };
    let names = |run: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step-"))
            .collect();
        v.sort();
        v
    };
    let save = |run: &Path, step| checkpoint::save(run, &cfg, &model.params, &opt, &state(step));

    // Folders of a higher step (whose `latest` was removed) are no reason to drop the new one.
    let dir = tempfile::tempdir().unwrap();
    save(dir.path(), 5).unwrap();
    save(dir.path(), 10).unwrap();
    std::fs::remove_file(dir.path().join("checkpoints/latest")).unwrap();
    let written = save(dir.path(), 4).unwrap();
    assert!(written.join("state.json").is_file());
    assert_eq!(checkpoint::latest(dir.path()), Some(written));
    assert_eq!(
        names(dir.path()),
        ["step-0000004", "step-0000005", "step-0000010"]
    );

    // By step, not by name: past seven digits "step-10000000" sorts before "step-9999999".
    let dir = tempfile::tempdir().unwrap();
    for step in [9_999_998, 9_999_999, 10_000_000] {
        save(dir.path(), step).unwrap();
    }
    assert_eq!(names(dir.path()), ["step-10000000", "step-9999999"]);
    assert_eq!(
        checkpoint::latest(dir.path()),
        Some(dir.path().join("checkpoints/step-10000000"))
    );
}

#[test]
fn a_new_run_refuses_a_folder_with_checkpoints_but_no_latest() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(
        &run,
        &["--set", "train.steps=4", "--set", "train.save_every=2"],
    ));
    std::fs::remove_file(run.join("checkpoints/latest")).unwrap();
    let before = snapshot(&run);
    fails(
        train(&run, &["--set", "train.steps=1"]),
        &["no checkpoints/latest", "step-0000002"],
    );
    assert!(snapshot(&run) == before);
}

#[test]
fn the_datasets_tokenizer_decides_and_eval_refuses_other_data() {
    let dir = tempfile::tempdir().unwrap();
    let (gpt2, bytes) = (dir.path().join("gpt2"), dir.path().join("bytes"));
    prepare(dir.path(), &gpt2, &corpus('a'), &["--tokenizer", "gpt2"]);
    prepare(dir.path(), &bytes, &corpus('a'), &[]);
    let run = dir.path().join("run");
    let data = gpt2.to_str().unwrap();
    let log = ok(train(
        &run,
        &[
            "--data",
            data,
            "--set",
            "model.vocab_size=50304",
            "--set",
            "data.tokenizer=bytes",
            "--set",
            "train.steps=1",
        ],
    ));
    assert!(log.contains("data.tokenizer is gpt2"), "{log}");
    let cfg = swax_hybrid::config::Config::load(&run.join("config.toml")).unwrap();
    assert_eq!(cfg.data.tokenizer, swax_data::TokenizerKind::Gpt2);
    let eval = |data: &Path| {
        swax(&[
            "eval",
            run.to_str().unwrap(),
            "--device",
            "cpu",
            "--tasks",
            "loss",
            "--lengths",
            "32",
            "--samples",
            "1",
            "--data",
            data.to_str().unwrap(),
        ])
    };
    fails(eval(&bytes), &["bytes tokenizer", "trained with gpt2"]);
    ok(eval(&gpt2));
    let results = std::fs::read_to_string(run.join("eval/w16/results.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&results).unwrap();
    assert_eq!(results["tokenizer"], "gpt2");
    assert_eq!(results["loss"]["unit"], "bits/token");
}

#[test]
fn a_half_made_dataset_does_not_train() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    prepare(dir.path(), &data, &corpus('a'), &["--shard-tokens", "2000"]);
    std::fs::remove_file(data.join("meta.json")).unwrap();
    for f in std::fs::read_dir(&data).unwrap() {
        let path = f.unwrap().path();
        if path.to_string_lossy().contains("val_") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let run = dir.path().join("run");
    fails(
        train(&run, &["--data", data.to_str().unwrap()]),
        &["did not finish", "train_000000.bin"],
    );
    assert!(!run.exists(), "nothing was written");
}

#[test]
fn eval_checks_the_config_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let ckpt = checkpoint::latest(&run).unwrap();
    for file in [run.join("config.toml"), ckpt.join("config.toml")] {
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replace("n_heads = 2", "n_heads = 0")).unwrap();
    }
    fails(
        swax(&["eval", run.to_str().unwrap(), "--device", "cpu"]),
        &["model.n_heads must be positive", "config.toml"],
    );
}

#[test]
fn the_summary_covers_the_whole_run_and_a_finished_run_is_left_as_it_is() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = common::micro("SM", 8, &["train.recall_probes=0"]);
    let whole = common::run(&cfg, a.path(), Device::Cpu, false, None);
    common::run(&cfg, b.path(), Device::Cpu, false, Some(3));
    let resumed = common::run(&cfg, b.path(), Device::Cpu, true, None);
    assert!(whole.final_loss.is_some());
    assert_eq!(resumed.final_loss, whole.final_loss);
    let loss_line = |dir: &Path| {
        let s = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
        s.lines().nth(1).unwrap().to_string()
    };
    assert_eq!(loss_line(b.path()), loss_line(a.path()));

    // Resuming the finished run trains nothing and changes nothing.
    let before = snapshot(b.path());
    let again = common::run(&cfg, b.path(), Device::Cpu, true, None);
    assert_eq!((again.steps_run, again.steps), (0, 8));
    assert_eq!(again.final_loss, whole.final_loss);
    assert!(
        again.report().contains("nothing to train"),
        "{}",
        again.report()
    );
    assert!(snapshot(b.path()) == before);
}

/// With stderr a file or a pipe, where a progress bar draws nothing, `swax train` says how far
/// it is in plain lines: at its first and last steps (and every so often between) and at every
/// validation; `--quiet` silences them.
#[test]
fn progress_is_said_in_lines_where_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let progress_lines = |out: &Path, quiet: bool| {
        let args = train_args(
            out,
            &["--set", "train.steps=4", "--set", "train.eval_every=2"],
        );
        let args: Vec<String> = args
            .into_iter()
            .filter(|a| quiet || a != "--quiet")
            .collect();
        let done = swax(&args);
        assert!(done.status.success(), "{}", text(&done));
        let stderr = String::from_utf8_lossy(&done.stderr).into_owned();
        let lines: Vec<String> = stderr
            .lines()
            .filter(|l| l.starts_with("step "))
            .map(String::from)
            .collect();
        lines
    };
    let lines = progress_lines(&dir.path().join("shown"), false);
    for step in [
        "step 1/4: loss",
        "step 4/4: loss",
        "step 2/4: validation loss",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(step)),
            "{step:?} not in {lines:#?}"
        );
    }
    let last = lines
        .iter()
        .find(|l| l.starts_with("step 4/4: loss"))
        .unwrap();
    assert!(
        last.contains("tokens/s") && last.ends_with("eta 0s"),
        "{last}"
    );
    assert_eq!(
        progress_lines(&dir.path().join("quiet"), true),
        Vec::<String>::new()
    );
}

#[test]
fn evaluations_are_kept_by_checkpoint_step() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &["--set", "train.save_every=2"]));
    let eval = |path: &Path, length: &str| {
        ok(swax(&[
            "eval",
            path.to_str().unwrap(),
            "--device",
            "cpu",
            "--tasks",
            "passkey",
            "--depths",
            "0.5",
            "--samples",
            "1",
            "--lengths",
            length,
        ]))
    };
    let read = |path: PathBuf| -> (u64, Vec<u64>) {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut lengths: Vec<u64> = v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["length"].as_u64().unwrap())
            .collect();
        lengths.sort();
        (v["step"].as_u64().unwrap(), lengths)
    };
    let w = run.join("eval/w16");
    eval(&run, "256");
    let log = eval(&run, "512");
    assert!(log.contains("merged"), "{log}");
    assert_eq!(read(w.join("results.json")), (3, vec![256, 512]));
    // An earlier checkpoint's evaluation moves the later one aside, and back.
    let log = eval(&run.join("checkpoints/step-0000002"), "256");
    assert!(log.contains("step-0000003"), "{log}");
    assert_eq!(read(w.join("results.json")), (2, vec![256]));
    assert_eq!(
        read(w.join("step-0000003/results.json")),
        (3, vec![256, 512])
    );
    eval(&run, "1024");
    assert_eq!(read(w.join("results.json")), (3, vec![256, 512, 1024]));
    assert_eq!(read(w.join("step-0000002/results.json")), (2, vec![256]));
    assert!(!w.join("step-0000003").exists());
    ok(swax(&[
        "report",
        run.to_str().unwrap(),
        "--out",
        dir.path().join("report").to_str().unwrap(),
    ]));
}

#[test]
fn one_process_at_a_time_and_a_killed_one_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    {
        let _held = swax_data::FolderLock::acquire(&run).unwrap();
        let me = std::process::id().to_string();
        fails(
            resume(&run, &["--set", "train.steps=4"]),
            &["in use by another swax process", &me],
        );
    }
    ok(resume(&run, &["--set", "train.steps=4"]));

    // A run killed mid-training leaves its lock to the operating system, which drops it.
    let killed = dir.path().join("killed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_swax"))
        .args(train_args(
            &killed,
            &["--set", "train.steps=100000", "--set", "train.save_every=1"],
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while checkpoint::latest(&killed).is_none() {
        assert!(start.elapsed() < Duration::from_secs(120), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let next = (latest_step(&killed) + 1).to_string();
    ok(resume(&killed, &["--stop-at", &next]));
    assert_eq!(latest_step(&killed).to_string(), next);
}

#[test]
fn errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &["--set", "train.save_every=2"]));
    let ckpt = checkpoint::latest(&run).unwrap();
    let state = ckpt.join("state.json");
    let latest = run.join("checkpoints/latest");
    let saved = std::fs::read(&state).unwrap();

    std::fs::write(&state, "{ not json").unwrap();
    fails(
        resume(&run, &["--set", "train.steps=4"]),
        &["step-0000003/state.json"],
    );
    std::fs::remove_file(&state).unwrap();
    fails(
        resume(&run, &["--set", "train.steps=4"]),
        &["checkpoints/latest", "has no state.json"],
    );
    std::fs::write(&state, &saved).unwrap();
    for (name, needle) in [
        ("step-0000099", "step-0000099"),
        ("../../elsewhere", "not a checkpoint folder"),
    ] {
        std::fs::write(&latest, name).unwrap();
        fails(
            resume(&run, &["--set", "train.steps=4"]),
            &["checkpoints/latest", needle],
        );
        fails(
            swax(&["eval", run.to_str().unwrap(), "--device", "cpu"]),
            &["checkpoints/latest", needle],
        );
    }
    std::fs::write(&latest, "step-0000003").unwrap();

    // --out a file; a folder that cannot be written.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    fails(train(&file, &[]), &["file", "a file"]);
    let locked = dir.path().join("read-only");
    std::fs::create_dir(&locked).unwrap();
    set_mode(&locked, 0o555);
    // Root writes anyway: there the case cannot be made.
    if std::fs::write(locked.join("probe"), "").is_err() {
        fails(train(&locked.join("run"), &[]), &["read-only/run"]);
        fails(train(&locked, &[]), &["read-only/.swax.lock"]);
    }
    set_mode(&locked, 0o755);

    // A checkpoint folder copied out of its run carries its config; without it, the error says
    // where it looked.
    let loose = dir.path().join("loose");
    copy_dir(&ckpt, &loose);
    ok(swax(&[
        "eval",
        loose.to_str().unwrap(),
        "--device",
        "cpu",
        "--tasks",
        "loss",
        "--lengths",
        "32",
        "--samples",
        "1",
    ]));
    assert!(loose.join("eval/w16/results.json").is_file());
    std::fs::remove_file(loose.join("config.toml")).unwrap();
    fails(
        swax(&["eval", loose.to_str().unwrap(), "--device", "cpu"]),
        &["loose: no config.toml in this checkpoint folder"],
    );
}

fn set_mode(path: &Path, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

#[test]
fn sizes_that_cannot_fit_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    for (sets, needles) in [
        (
            &["data.batch_size=100000000"][..],
            &["GiB", "data.batch_size 100000000"][..],
        ),
        (
            &["model.d_model=1048576", "model.d_ff=4194304"],
            &["GiB", "model.d_model 1048576"],
        ),
        (&["model.vocab_size=10"], &["model.vocab_size 10", "256"]),
    ] {
        let mut extra = Vec::new();
        for s in sets {
            extra.extend(["--set", s]);
        }
        fails(train(&run, &extra), needles);
        assert!(!run.exists(), "{sets:?} left a run folder");
    }
    // No GPU here (or not that one): refused before the folder exists too.
    let on_gpu: Vec<String> = train_args(&run, &[])
        .into_iter()
        .map(|a| if a == "cpu" { "cuda:99".into() } else { a })
        .collect();
    fails(swax(&on_gpu), &["cuda:99"]);
    assert!(!run.exists());
}

#[test]
fn the_memory_estimate_is_a_lower_bound() {
    use swax_hybrid::train::memory::Need;
    for pattern in ["SM", "SG", "RRRF", "F"] {
        let cfg = common::micro(pattern, 1, &[]);
        let model = swax_hybrid::model::Model::new(&cfg.model, 0, Device::Cpu).unwrap();
        let need = Need::of(&cfg, Device::Cpu);
        let real = model.params.numel() as f64;
        assert!(
            need.params <= real && need.params > 0.5 * real,
            "{pattern}: {} of {real}",
            need.params
        );
    }
}

#[test]
fn resuming_on_other_data_is_refused_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, longer) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("longer"),
    );
    prepare(dir.path(), &a, &corpus('a'), &[]);
    // The same documents with other letters: the same number of tokens.
    prepare(dir.path(), &b, &corpus('b'), &[]);
    prepare(
        dir.path(),
        &longer,
        &format!("{}{}", corpus('a'), corpus('c')),
        &[],
    );
    let run = dir.path().join("run");
    ok(train(
        &run,
        &["--data", a.to_str().unwrap(), "--stop-at", "2"],
    ));
    for other in [&b, &longer] {
        let before = snapshot(&run);
        fails(
            resume(&run, &["--data", other.to_str().unwrap()]),
            &["not what the run was trained on", "--allow-data-change"],
        );
        assert!(snapshot(&run) == before);
    }
    // The same data moved elsewhere is the same data.
    let moved = dir.path().join("moved");
    std::fs::rename(&a, &moved).unwrap();
    ok(resume(
        &run,
        &["--data", moved.to_str().unwrap(), "--stop-at", "3"],
    ));
    ok(resume(
        &run,
        &[
            "--data",
            b.to_str().unwrap(),
            "--allow-data-change",
            "--set",
            "train.steps=4",
        ],
    ));
    assert_eq!(latest_step(&run), 4);
}

#[test]
fn what_a_killed_write_left_is_cleared_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let ckpt = checkpoint::latest(&run).unwrap();
    let leftovers = [
        run.join(".config.toml.tmp-4242"),
        run.join("checkpoints/.latest.tmp-4242"),
        ckpt.join(".optimizer.safetensors.tmp-4242"),
    ];
    for f in &leftovers {
        std::fs::write(f, "partial").unwrap();
    }
    let half = run.join("checkpoints/step-0000004");
    std::fs::create_dir(&half).unwrap();
    std::fs::write(half.join("model.safetensors"), "partial").unwrap();
    ok(resume(&run, &["--set", "train.steps=5"]));
    for f in &leftovers {
        assert!(!f.exists(), "{} is left", f.display());
    }
    assert!(!half.exists(), "the half-written checkpoint folder is left");
    assert_eq!(latest_step(&run), 5);
}

#[test]
fn the_probe_error_names_the_keys_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    fails(
        train(
            &run,
            &[
                "--data",
                "corpus",
                "--set",
                "train.recall_probes=64",
                "--set",
                "data.corpus_max_doc_tokens=128",
            ],
        ),
        &["data.seq_len 32", "train.recall_probes=0"],
    );
    assert!(!run.exists());
}

#[test]
fn every_path_form_gets_a_clear_answer() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    // A link to a run is the run.
    #[cfg(unix)]
    {
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&run, &link).unwrap();
        ok(resume(&link, &["--set", "train.steps=4"]));
        assert_eq!(latest_step(&run), 4);
    }
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "text").unwrap();
    let missing = dir.path().join("missing");
    let fresh = dir.path().join("fresh");
    fails(
        train(&fresh, &["--data", file.to_str().unwrap()]),
        &["notes.txt"],
    );
    fails(
        train(&fresh, &["--data", missing.to_str().unwrap()]),
        &["missing"],
    );
    fails(resume(&missing, &[]), &["missing"]);
    assert!(!fresh.exists());
    fails(
        swax(&["eval", file.to_str().unwrap(), "--device", "cpu"]),
        &["notes.txt"],
    );
    let run_s = run.to_str().unwrap();
    let report = dir.path().join("report");
    fails(
        swax(&["report", run_s, run_s, "--out", report.to_str().unwrap()]),
        &["are the same"],
    );
    fails(
        swax(&["report", run_s, "--out", file.to_str().unwrap()]),
        &["notes.txt: a file"],
    );
    fails(
        swax(&["prepare", "-", "--out", file.to_str().unwrap()]),
        &["notes.txt: a file"],
    );
}

#[test]
fn every_number_gets_a_clear_answer() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let run_s = run.to_str().unwrap();
    fails(
        swax(&["eval", run_s, "--lengths", "18014398509481984k"]),
        &["more tokens than a length can count"],
    );
    fails(
        swax(&["eval", run_s, "--lengths", "99999999999999999999999"]),
        &["length 99999999999999999999999"],
    );
    // Stopping where the run already is trains nothing and leaves it as it is.
    let before = snapshot(&run);
    let log = ok(resume(&run, &["--stop-at", "0"]));
    assert!(log.contains("nothing to train"), "{log}");
    assert!(snapshot(&run) == before);
    let fresh = dir.path().join("fresh");
    let log = ok(train(&fresh, &["--stop-at", "0"]));
    assert!(!fresh.exists());
    // Only a checkpoint is offered to continue from.
    assert!(
        !log.contains("continue with") && log.contains("no run was made"),
        "{log}"
    );
    let log = ok(train(
        &fresh,
        &["--stop-at", "2", "--set", "train.checkpoints=false"],
    ));
    assert!(
        !log.contains("continue with") && log.contains("no checkpoint to continue from"),
        "{log}"
    );
    fails(
        swax(&[
            "eval",
            run_s,
            "--device",
            "cpu",
            "--scoring",
            "generate",
            "--generate-tokens",
            "0",
        ]),
        &["--generate-tokens 0"],
    );
}

/// `--out` of a folder that is not a run, or of one inside a run, is refused before anything in
/// it (or in the run around it) is removed or written; an empty folder and a run are taken.
#[test]
fn out_is_a_new_or_empty_folder_or_a_run_and_never_inside_one() {
    let dir = tempfile::tempdir().unwrap();
    let mine = |name: &str, files: &[(&str, &str)]| -> PathBuf {
        let folder = dir.path().join(name);
        for (file, text) in files {
            let path = folder.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        folder
    };
    let user_folders = [
        mine("ckpt", &[("checkpoints/step-1/model.pt", "w")]),
        mine("cfg", &[("config.toml", "[model]\nlayers = 3\n")]),
        mine("metrics", &[("metrics.jsonl", "{}\n")]),
        mine("summary", &[("summary.txt", "mine")]),
    ];
    for folder in &user_folders {
        let before = snapshot(folder);
        fails(train(folder, &[]), &["not empty", "not a swax run"]);
        assert!(snapshot(folder) == before, "{} changed", folder.display());
    }
    let data = dir.path().join("data");
    prepare(dir.path(), &data, &corpus('a'), &[]);
    fails(train(&data, &[]), &["not a swax run"]);

    let run = dir.path().join("b2");
    ok(train(&run, &["--set", "train.save_every=2"]));
    let ckpt = run.join("checkpoints/step-0000003");
    let loose = dir.path().join("loose");
    copy_dir(&ckpt, &loose);
    fails(train(&loose, &[]), &["a checkpoint folder"]);
    let before = snapshot(&run);
    for inside in [
        ckpt.clone(),
        ckpt.join("new"),
        run.join("checkpoints"),
        run.join("eval/w16"),
    ] {
        fails(train(&inside, &[]), &["inside the run", "b2"]);
    }
    fails(resume(&ckpt, &[]), &["inside the run"]);
    assert!(snapshot(&run) == before, "the run changed");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    ok(train(&empty, &[]));
    ok(resume(&run, &["--set", "train.steps=4"]));
}

/// Evaluations of one run saving at once take turns, so none loses another's results: one
/// waits while the folder is held, and several started together all end up in `results.json`.
#[test]
fn evaluations_saved_at_once_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let eval = |length: &str| {
        Command::new(env!("CARGO_BIN_EXE_swax"))
            .args(["eval", run.to_str().unwrap(), "--device", "cpu"])
            .args(["--tasks", "passkey", "--depths", "0.5", "--samples", "1"])
            .args(["--lengths", length])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let w = run.join("eval/w16");
    std::fs::create_dir_all(&w).unwrap();
    let held = swax_data::FolderLock::acquire(&w).unwrap();
    let mut waiting = eval("256");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "an evaluation saved while another held the folder"
    );
    drop(held);
    assert!(waiting.wait().unwrap().success());

    let lengths = ["288", "320", "352", "384"];
    let children: Vec<_> = lengths.iter().map(|l| eval(l)).collect();
    for child in children {
        ok(child.wait_with_output().unwrap());
    }
    let text = std::fs::read_to_string(w.join("results.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut saved: Vec<u64> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["length"].as_u64().unwrap())
        .collect();
    saved.sort();
    assert_eq!(saved, [256, 288, 320, 352, 384]);
}

/// An evaluation on other data than the run's keeps its results apart, recording the data, and
/// never replaces the run's own loss; data with nothing held out is an error, not a loss of 0.
#[test]
fn eval_on_other_data_keeps_the_runs_own_loss() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &["--data", "corpus"]));
    let eval = |data: Option<&Path>| {
        let mut args = vec!["eval", run.to_str().unwrap(), "--device", "cpu"];
        args.extend(["--tasks", "loss", "--lengths", "32", "--samples", "1"]);
        if let Some(data) = data {
            args.extend(["--data", data.to_str().unwrap()]);
        }
        swax(&args)
    };
    let read = |path: PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    ok(eval(None));
    let own = run.join("eval/w16/results.json");
    let before = read(own.clone());
    assert_eq!(before["loss"]["data"], "corpus");
    assert!(before.get("other_data").is_none(), "{before}");

    let unheld = dir.path().join("unheld");
    prepare(dir.path(), &unheld, &corpus('a'), &["--val-fraction", "0"]);
    fails(eval(Some(&unheld)), &["unheld", "no held-out sequence"]);
    let other = dir.path().join("other");
    prepare(dir.path(), &other, &corpus('b'), &[]);
    ok(eval(Some(&other)));
    assert_eq!(read(own), before);
    let apart = read(run.join("eval/w16-on-other/results.json"));
    assert_eq!(apart["loss"]["data"], other.to_str().unwrap());
    assert_eq!(apart["other_data"], other.to_str().unwrap());
    assert!(apart["loss"]["samples"].as_u64().unwrap() > 0);
}

/// Prompt ids that are not token ids of the model (past its vocabulary, or none at all) are
/// refused naming the flag and the id, before anything is generated.
#[test]
fn generate_refuses_prompt_ids_outside_the_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let run_s = run.to_str().unwrap();
    for (ids, needles) in [
        (
            "3 999999999",
            &["--prompt-ids", "\"999999999\"", "below the vocabulary"][..],
        ),
        ("3 x", &["--prompt-ids", "\"x\""]),
        (" ", &["--prompt-ids: no token ids"]),
    ] {
        let out = swax(&["generate", run_s, "--device", "cpu", "--prompt-ids", ids]);
        // Refused before anything is generated: nothing on standard output.
        assert!(out.stdout.is_empty(), "{}", text(&out));
        fails(out, needles);
    }
    let out = swax(&[
        "generate",
        run_s,
        "--device",
        "cpu",
        "--prompt-ids",
        "3 4",
        "--max-tokens",
        "2",
    ]);
    ok(out);
}

/// A negative number, on a flag or in a `--set`, is refused naming the flag or the key, not read
/// as an unknown flag or left unnamed.
#[test]
fn negative_numbers_are_refused_naming_the_flag_or_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    fails(
        train(&run, &["--set", "model.d_model=-32"]),
        &["model.d_model", "-32"],
    );
    fails(
        train(&run, &["--set", "train.steps=-1"]),
        &["train.steps", "-1"],
    );
    fails(
        train(&run, &["--stop-at", "-1"]),
        &["--stop-at", "negative"],
    );
    assert!(!run.exists());
    ok(train(&run, &[]));
    let run_s = run.to_str().unwrap();
    for (args, needles) in [
        (&["--lengths", "-64"][..], &["--lengths", "negative"][..]),
        (&["--window", "-1"], &["--window", "negative"]),
        (&["--samples", "-2"], &["--samples", "negative"]),
        (&["--depths", "-0.5"], &["--depths -0.5"]),
    ] {
        let mut eval = vec!["eval", run_s, "--device", "cpu"];
        eval.extend(args);
        fails(swax(&eval), needles);
    }
    for (args, needles) in [
        (&["--temperature", "-1"][..], &["temperature"][..]),
        (&["--batch", "-1"], &["--batch", "negative"]),
        (&["--max-tokens", "-5"], &["--max-tokens", "negative"]),
    ] {
        let mut generate = vec!["generate", run_s, "--device", "cpu", "--prompt", "a"];
        generate.extend(args);
        fails(swax(&generate), needles);
    }
    let data = dir.path().join("data");
    fails(
        swax(&[
            "prepare",
            "-",
            "--out",
            data.to_str().unwrap(),
            "--val-fraction",
            "-0.1",
        ]),
        &["validation fraction -0.1"],
    );
    let log = fails(
        swax(&["prepare", "-", "--out", "x", "--shard-tokens", "-1"]),
        &["--shard-tokens", "negative"],
    );
    assert!(!log.contains("unexpected argument"), "{log}");
}

/// A `meta.json` whose vocabulary or end of text is not its tokenizer's is refused naming the
/// file, before a run records a model of the one for data of the other.
#[test]
fn a_meta_json_that_disagrees_with_its_tokenizer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    prepare(dir.path(), &data, &corpus('a'), &["--tokenizer", "gpt2"]);
    let meta = data.join("meta.json");
    let good = std::fs::read_to_string(&meta).unwrap();
    for (from, to) in [
        ("\"vocab_size\": 50257", "\"vocab_size\": 256"),
        ("\"eot\": 50256", "\"eot\": 0"),
    ] {
        assert!(good.contains(from), "{good}");
        std::fs::write(&meta, good.replace(from, to)).unwrap();
        let run = dir.path().join("run");
        fails(
            train(&run, &["--data", data.to_str().unwrap()]),
            &["data/meta.json", "gpt2 tokenizer"],
        );
        assert!(!run.exists());
    }
}

/// A data source that is neither a generated source nor a folder says what a source may be and
/// what was given, for `train` (`--data`, `data.source`) and `eval --data`, before anything is
/// written or loaded.
#[test]
fn a_data_source_that_is_none_says_what_a_source_may_be() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let data = dir.path().join("data");
    prepare(dir.path(), &data, &corpus('a'), &[]);
    let meta = data.join("meta.json");
    let meta = meta.to_str().unwrap();
    let sources = "corpus, mqar, passkey, recall-mix";
    for (given, needles) in [
        ("foo", &["\"foo\"", "No such file"][..]),
        ("", &["\"\": empty"]),
        (meta, &["a file; the folder holding it is"]),
    ] {
        let set = format!("data.source={}", toml::Value::String(given.into()));
        for extra in [["--data", given], ["--set", &set]] {
            let log = fails(train(&run, &extra), needles);
            assert!(log.contains(sources) && log.contains("meta.json"), "{log}");
            assert!(!run.exists());
        }
        let log = fails(swax(&["eval", "no-such-run", "--data", given]), needles);
        assert!(log.contains(sources), "{log}");
    }
}

/// Lengths and batches past the memory there is are refused by a message naming them, before
/// any work and without touching the run, not by an allocation that aborts the process.
#[test]
fn eval_and_generate_refuse_sizes_that_cannot_fit() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let before = snapshot(&run);
    let run_s = run.to_str().unwrap();
    for lengths in ["1000000000000000000", "32,1000000000000"] {
        let eval = ["eval", run_s, "--device", "cpu", "--lengths", lengths];
        fails(
            swax(&eval),
            &["the evaluation needs at least", "GiB", "--lengths"],
        );
    }
    let generate = ["generate", run_s, "--device", "cpu", "--prompt", "x"];
    fails(
        swax(&[&generate[..], &["--batch", "1000000000000"]].concat()),
        &["the generation needs at least", "--batch 1000000000000"],
    );
    assert!(snapshot(&run) == before);
}

/// Runs started together without `--out` each take their own `runs/NAME-N`, none refused; a
/// start that fails leaves no folder behind.
#[test]
fn runs_started_together_take_their_own_folders() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = train_args(Path::new("unused"), &[]);
    let out = args.iter().position(|a| a == "--out").unwrap();
    args.drain(out..out + 2);
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_swax"))
                .args(&args)
                .current_dir(dir.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        ok(child.wait_with_output().unwrap());
    }
    let runs = dir.path().join("runs");
    let mut made: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    assert_eq!(made, ["swax-tiny", "swax-tiny-2", "swax-tiny-3"]);
    assert!(made
        .iter()
        .all(|name| checkpoint::latest(&runs.join(name)).is_some()));

    // In one process too, from threads.
    let root = dir.path().join("threads");
    let picked: std::collections::BTreeSet<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| swax_hybrid::train::fresh_run_dir(&root, "n").unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(picked.len(), 8);

    args.extend(["--set".into(), "data.batch_size=100000000".into()]);
    let failed = Command::new(env!("CARGO_BIN_EXE_swax"))
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    fails(failed, &["GiB"]);
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 3);
}

/// An I/O error names its file, a full disk included, and a run folder where results cannot go
/// is found before the evaluation runs, not after it.
#[test]
fn io_errors_name_their_path_and_an_unwritable_eval_folder_is_found_first() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(train(&run, &[]));
    let run_s = run.to_str().unwrap();
    std::fs::write(run.join("eval"), "in the way").unwrap();
    let eval = [
        "eval",
        run_s,
        "--device",
        "cpu",
        "--tasks",
        "loss",
        "--lengths",
        "32",
        "--samples",
        "1",
    ];
    let log = fails(swax(&eval), &["run/eval", "the results cannot be written"]);
    assert!(!log.contains(" len "), "the evaluation ran: {log}");
    std::fs::remove_file(run.join("eval")).unwrap();
    ok(swax(&eval));

    let in_file = dir.path().join("notes.txt");
    std::fs::write(&in_file, "text").unwrap();
    let below = in_file.join("report");
    fails(
        swax(&["report", run_s, "--out", below.to_str().unwrap()]),
        &["notes.txt/report"],
    );

    // A full disk: /dev/full refuses every write with ENOSPC.
    #[cfg(unix)]
    {
        use swax_hybrid::train::metrics::Metrics;
        let full = dir.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::os::unix::fs::symlink("/dev/full", full.join("metrics.jsonl")).unwrap();
        let mut metrics = Metrics::open(&full, None).unwrap();
        let err = metrics
            .log(serde_json::json!({"step": 1}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("full/metrics.jsonl") && err.contains("os error 28"),
            "{err}"
        );
    }
}
