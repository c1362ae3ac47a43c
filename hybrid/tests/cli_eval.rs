//! `swax eval` and `swax report` as a user runs them, on a run that `swax train` made: a micro
//! RAttention/SWA/mLSTM model trained for a few steps on the CPU, evaluated in pieces (the default
//! piece is the training length, shorter than the sequences), then reported; and the errors a
//! wrong path, task name or option value gives.
mod common;

use std::path::Path;

use common::{swax, text};

/// Runs `swax eval RUN ARGS...` on the CPU, which must succeed, and returns its output and the
/// `results.json` it wrote at window 32 (the runs' long window).
fn eval(run: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let mut all = vec!["eval", run.to_str().unwrap(), "--device", "cpu"];
    all.extend_from_slice(args);
    let out = swax(&all);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let results = std::fs::read_to_string(run.join("eval/w32/results.json")).expect(&log);
    (log, serde_json::from_str(&results).unwrap())
}

/// Trains the micro model into `run` with `extra` settings over the defaults below.
fn train(run: &Path, extra: &[&str]) {
    let sets = [
        "model.pattern=\"SMR\"",
        "model.n_layers=3",
        "model.d_model=32",
        "model.n_heads=2",
        "model.n_kv_heads=1",
        "model.d_ff=64",
        "model.chunk=16",
        "data.seq_len=64",
        "data.batch_size=2",
        "data.corpus_train_tokens=20000",
        "data.corpus_val_tokens=4096",
        "train.steps=3",
        "train.w_short=8",
        "train.w_long=32",
        "train.eval_every=0",
        "train.recall_probes=0",
    ];
    let mut args = vec!["train", "--device", "cpu", "--quiet"];
    args.extend(["--out", run.to_str().unwrap()]);
    for s in sets.iter().chain(extra) {
        args.extend(["--set", s]);
    }
    let out = swax(&args);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn eval_and_report_work_on_a_run_made_by_train() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    train(&run, &[]);
    let path = run.to_str().unwrap();
    // The window defaults to the run's long window; every task and the loss ran at each length.
    let (log, json) = eval(
        &run,
        &[
            "--tasks",
            "passkey,mqar,loss",
            "--lengths",
            "256,512",
            "--depths",
            "0.5",
            "--samples",
            "1",
        ],
    );
    let cells = json["tasks"].as_array().unwrap();
    for (task, len) in [
        ("passkey", 256),
        ("passkey", 512),
        ("mqar", 256),
        ("mqar", 512),
    ] {
        assert!(
            cells.iter().any(|c| c["task"] == task
                && c["length"] == len
                && c["answers"].as_u64() > Some(0)),
            "{task} at {len} missing from {json}"
        );
    }
    let buckets = json["loss"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 512 / 64, "buckets of the training length");
    for b in buckets {
        let bits = b["bits"].as_f64().unwrap();
        assert!(bits.is_finite() && bits > 0.0, "{b}");
    }
    assert!(
        log.contains("| passkey acc %"),
        "the markdown table is printed: {log}"
    );

    let report = dir.path().join("report");
    let out = swax(&["report", path, "--out", report.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("passkey") && md.contains("mqar"), "{md}");
}

#[test]
fn eval_names_a_missing_run_a_mistyped_task_and_an_option_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-run");
    let out = swax(&["eval", missing.to_str().unwrap(), "--device", "cpu"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no-such-run"), "{}", text(&out));

    let run = dir.path().join("run");
    train(&run, &[]);
    let out = swax(&[
        "eval",
        run.to_str().unwrap(),
        "--device",
        "cpu",
        "--tasks",
        "niha",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("unknown task \"niha\""),
        "{}",
        text(&out)
    );
}

#[test]
fn the_loss_held_out_text_is_written_for_another_harness_and_no_file_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // Documents shorter than a row: rows hold end-of-text tokens inside them too.
    train(
        &run,
        &["data.source=\"corpus\"", "data.corpus_max_doc_tokens=40"],
    );
    let file = dir.path().join("held-out.jsonl");
    let file_arg = file.to_str().unwrap();
    eval(
        &run,
        &[
            "--tasks",
            "loss",
            "--lengths",
            "128",
            "--samples",
            "2",
            "--write-held-out",
            file_arg,
        ],
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "one line per held-out sequence");
    assert_ne!(lines[0]["text"], lines[1]["text"]);

    // lm-eval reads each line with the export's tokenizer after its own end-of-text token and
    // scores every token after that one: those must be the tokens swax scored.
    let hf = dir.path().join("hf");
    let out = swax(&[
        "export",
        run.to_str().unwrap(),
        "--hf",
        hf.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let tok = tokenizers::Tokenizer::from_file(hf.join("tokenizer.json")).unwrap();
    let cfg = swax_hybrid::config::Config::load(&run.join("config.toml")).unwrap();
    let seqs = swax_hybrid::eval::run::held_out(&cfg, None, 128, 2).unwrap();
    let eot = 0; // the byte tokenizer's end of text
    let mut inside = 0;
    for (l, seq) in lines.iter().zip(&seqs) {
        assert_eq!(l["length"], 128);
        let ids = tok
            .encode(l["text"].as_str().unwrap(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        let scored = seq.strip_prefix(&[eot]).unwrap_or(seq);
        assert_eq!(ids, scored, "the text reads back as other tokens: {l}");
        inside += scored.iter().filter(|&&t| t == eot).count();
    }
    assert!(
        inside > 0,
        "no end-of-text token inside a row: the case is not tested"
    );

    // An existing file is refused and kept as it was; the option without the loss is refused
    // and writes nothing.
    std::fs::write(&file, "mine\n").unwrap();
    let fresh = dir.path().join("fresh.jsonl");
    let run_arg = run.to_str().unwrap();
    for (tasks, to, want) in [
        ("loss", &file, "the file exists"),
        ("passkey", &fresh, "add loss to --tasks"),
    ] {
        let to = to.to_str().unwrap();
        let out = swax(&[
            "eval",
            run_arg,
            "--device",
            "cpu",
            "--tasks",
            tasks,
            "--write-held-out",
            to,
        ]);
        assert!(!out.status.success());
        assert!(text(&out).contains(want), "{}", text(&out));
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine\n");
    assert!(!fresh.exists());
}

#[test]
fn generation_scoring_sits_beside_exact_match() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    train(&run, &[]);
    let (log, json) = eval(
        &run,
        &[
            "--tasks",
            "passkey,mqar",
            "--lengths",
            "256",
            "--depths",
            "0.5",
            "--samples",
            "2",
            "--scoring",
            "generate",
            "--generate-tokens",
            "8",
        ],
    );
    let cell = |task: &str| {
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["task"] == task)
            .cloned()
            .unwrap()
    };
    let g = cell("passkey")["generated"]
        .as_f64()
        .expect("a generation score");
    assert!((0.0..=1.0).contains(&g));
    assert!(
        cell("mqar").get("generated").is_none(),
        "MQAR is scored teacher-forced only"
    );
    assert!(log.contains("| passkey generated % | 256 |"), "{log}");
}

/// A run trained on MQAR (token ids, not text): `swax eval` by default scores MQAR recall within
/// and beyond the window, and says what the model was trained on; `swax generate` prints valid
/// text (bytes that are not UTF-8 as U+FFFD, with a note), or the token ids with `--ids`.
#[test]
fn an_mqar_run_is_evaluated_on_mqar_and_generates_readable_output() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    train(&run, &["data.source=\"mqar\"", "data.mqar_pairs=4"]);
    let path = run.to_str().unwrap();
    let (log, json) = eval(&run, &["--lengths", "64,128", "--samples", "1"]);
    let tasks: Vec<&str> = json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["mqar", "mqar"], "{log}");
    assert!(json["loss"].is_null(), "no loss on MQAR rows by default");
    assert_eq!(json["trained_on"], "mqar");
    for want in [
        "note: the model was trained on generated MQAR",
        "| mqar within window % | 128 |",
        "| mqar beyond window % | 128 |",
        "beyond window",
    ] {
        assert!(log.contains(want), "no {want:?} in {log}");
    }
    assert!(!log.contains("niah") && !log.contains("bits/byte"), "{log}");

    // Asked for anyway, the text tasks come with a word on what their scores mean.
    let out = swax(&[
        "eval",
        path,
        "--device",
        "cpu",
        "--lengths",
        "128",
        "--samples",
        "1",
        "--tasks",
        "passkey,loss",
        "--depths",
        "0.5",
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("passkey ask for facts in English text"),
        "{log}"
    );
    assert!(
        log.contains("the loss scores every token of the MQAR rows"),
        "{log}"
    );
    assert!(
        log.contains("loss bits/token"),
        "MQAR's tokens are not bytes of text: {log}"
    );

    let generate = |extra: &[&str]| {
        let mut args = vec!["generate", path, "--device", "cpu", "--prompt", "key 7 is"];
        args.extend(["--max-tokens", "48"]);
        args.extend(extra);
        let out = swax(&args);
        assert!(out.status.success(), "{}", text(&out));
        out
    };
    let out = generate(&[]);
    let printed = String::from_utf8(out.stdout.clone())
        .unwrap_or_else(|e| panic!("generate printed bytes that are not UTF-8: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("trained on generated MQAR"), "{stderr}");
    if printed.contains(char::REPLACEMENT_CHARACTER) {
        assert!(stderr.contains("were not UTF-8"), "{stderr}");
    }
    let out = generate(&["--ids"]);
    let ids: Vec<u32> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().expect("token ids"))
        .collect();
    assert!(!ids.is_empty() && ids.iter().all(|&t| t < 256), "{ids:?}");
}

/// Every option of every subcommand says what it is, and the help names the default training
/// data as what it is (generated MQAR), not a corpus it does not train on.
#[test]
fn every_option_has_a_description() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_swax"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    assert!(top.contains("generated MQAR"), "{top}");
    assert!(!top.contains("recall corpus"), "{top}");
    for sub in ["prepare", "train", "eval", "generate", "report", "study"] {
        let text = help(&[sub, "--help"]);
        // In the long help a description follows its option, on the next line; a bare option
        // is followed by a blank line, its default or its values (`[default: 0]`), or the end.
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let bare: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(i, l)| {
                l.starts_with("--")
                    && lines
                        .get(i + 1)
                        .is_none_or(|next| next.is_empty() || next.starts_with('['))
            })
            .map(|(_, l)| *l)
            .collect();
        assert!(bare.is_empty(), "swax {sub}: {bare:?}");
    }
}
