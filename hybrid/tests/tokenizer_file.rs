//! A Hugging Face `tokenizer.json` end to end, as a user runs swax: `swax prepare --tokenizer`
//! with the shipped fixture (data/tests/fixtures/tiny-bpe.json), a micro model trained on it
//! (refused while its vocabulary is smaller than the file's), then `swax eval`, `swax generate`
//! and `swax export --hf` through the run's own copy of the file, with the dataset gone; a
//! changed copy and a file that is not a tokenizer refused by name.
mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use swax_data::tokenizer::{sha256_hex, FileTokenizer};
use swax_data::Tokenizer;
use swax_hybrid::export::{self, import};

use common::{swax, text};

fn ok(args: &[&str]) -> String {
    let out = swax(args);
    assert!(out.status.success(), "swax {args:?}: {}", text(&out));
    text(&out)
}

fn refused(args: &[&str]) -> String {
    let out = swax(args);
    assert!(!out.status.success(), "swax {args:?} ran: {}", text(&out));
    text(&out)
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/tests/fixtures/tiny-bpe.json")
}

const STORY: &str = "Once upon a time there was a little girl who lived in a village near the \
                     forest, and she went to visit her grandmother.";

/// `swax prepare` of 200 short stories with the fixture into `dir/data`.
fn prepare(dir: &Path) -> PathBuf {
    let input = dir.join("stories.txt");
    let docs: Vec<String> = (0..200).map(|i| format!("Story {i}. {STORY}")).collect();
    std::fs::write(&input, docs.join("\n<|endoftext|>\n")).unwrap();
    let data = dir.join("data");
    let said = ok(&[
        "prepare",
        input.to_str().unwrap(),
        "--out",
        data.to_str().unwrap(),
        "--tokenizer",
        fixture().to_str().unwrap(),
        "--val-fraction",
        "0.2",
    ]);
    assert!(said.contains("tokenizer tokenizer.json (sha256"), "{said}");
    data
}

/// `swax train` of a micro model for two steps on the CPU, with `vocab` output classes.
fn train(data: &Path, run: &Path, vocab: usize) -> Output {
    let vocab = format!("model.vocab_size={vocab}");
    let mut args = vec!["train", "--device", "cpu", "--quiet"];
    args.extend([
        "--out",
        run.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    for set in [
        "model.pattern=\"SM\"",
        "model.n_layers=2",
        "model.d_model=32",
        "model.n_heads=2",
        "model.n_kv_heads=1",
        "model.d_ff=64",
        "model.chunk=16",
        &vocab,
        "data.seq_len=64",
        "data.batch_size=2",
        "train.steps=2",
        "train.w_short=8",
        "train.w_long=32",
        "train.eval_every=0",
        "train.eval_batches=1",
        "train.recall_probes=0",
        "optim.warmup_steps=1",
    ] {
        args.extend(["--set", set]);
    }
    swax(&args)
}

#[test]
fn a_tokenizer_file_trains_evaluates_generates_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let data = prepare(dir.path());
    let hash = sha256_hex(&std::fs::read(fixture()).unwrap());
    let run = dir.path().join("run");

    // The file's 377 tokens do not fit 256 output classes: refused, nothing written.
    let small = train(&data, &run, 256);
    assert!(!small.status.success());
    assert!(text(&small).contains("377"), "{}", text(&small));
    assert!(!run.exists(), "a refused run left {}", run.display());

    let trained = train(&data, &run, 384);
    assert!(trained.status.success(), "{}", text(&trained));
    // The run keeps the file and records its hash.
    assert_eq!(
        std::fs::read(run.join("tokenizer.json")).unwrap(),
        std::fs::read(fixture()).unwrap()
    );
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(config.contains(&hash), "{config}");

    let path = run.to_str().unwrap();
    let eval = [
        "eval",
        path,
        "--device",
        "cpu",
        "--lengths",
        "128",
        "--depths",
        "0.5",
        "--samples",
        "1",
    ];
    ok(&[&eval[..], &["--tasks", "passkey,loss"]].concat());
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("eval/w32/results.json")).unwrap())
            .unwrap();
    assert_eq!(results["tokenizer"], "file");

    // Without the dataset, the run reads its own copy.
    std::fs::rename(&data, dir.path().join("gone")).unwrap();
    let generate = [
        "generate",
        path,
        "--device",
        "cpu",
        "--prompt",
        "Once upon a time",
        "--max-tokens",
        "8",
    ];
    ok(&generate);
    ok(&[&eval[..], &["--tasks", "passkey"]].concat());

    // The export carries the file; Hugging Face's library reads it to the ids swax trained on.
    let hf = dir.path().join("hf");
    export::export(&run, &hf).unwrap();
    assert_eq!(
        std::fs::read(hf.join("tokenizer.json")).unwrap(),
        std::fs::read(fixture()).unwrap()
    );
    let hf_tok = tokenizers::Tokenizer::from_file(hf.join("tokenizer.json")).unwrap();
    let ours = FileTokenizer::load(&fixture(), None).unwrap();
    let ids = hf_tok.encode(STORY, false).unwrap().get_ids().to_vec();
    assert_eq!(ids, ours.encode(STORY));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["eos_token_id"], 376);
    let tok_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(tok_config["eos_token"], "<|endoftext|>");

    // And back: the imported run keeps the file too.
    let back = dir.path().join("back");
    import(&hf, &back).unwrap();
    assert_eq!(
        std::fs::read(back.join("tokenizer.json")).unwrap(),
        std::fs::read(fixture()).unwrap()
    );
    ok(&[
        "generate",
        back.to_str().unwrap(),
        "--device",
        "cpu",
        "--prompt",
        "Once",
    ]);
}

#[test]
fn a_changed_tokenizer_copy_in_a_run_is_refused_naming_both_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let data = prepare(dir.path());
    let run = dir.path().join("run");
    let trained = train(&data, &run, 384);
    assert!(trained.status.success(), "{}", text(&trained));
    let copy = run.join("tokenizer.json");
    let recorded = sha256_hex(&std::fs::read(&copy).unwrap());
    let changed = std::fs::read_to_string(&copy)
        .unwrap()
        .replacen("\"h e\"", "\"e n\"", 1);
    std::fs::write(&copy, &changed).unwrap();
    let found = sha256_hex(changed.as_bytes());
    let path = run.to_str().unwrap();
    let hf = dir.path().join("hf");
    for args in [
        vec!["generate", path, "--device", "cpu", "--prompt", "Once"],
        vec!["eval", path, "--device", "cpu", "--tasks", "passkey"],
        vec!["export", path, "--hf", hf.to_str().unwrap()],
    ] {
        let said = refused(&args);
        for part in [&recorded, &found, &copy.display().to_string()] {
            assert!(
                said.contains(part.as_str()),
                "{args:?}: {said} lacks {part}"
            );
        }
    }
    assert!(!hf.exists());
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), changed);
    // Resuming checks the run's copy too.
    std::fs::rename(&data, dir.path().join("elsewhere")).unwrap();
    let data = dir.path().join("elsewhere");
    let resumed = swax(&[
        "train",
        "--device",
        "cpu",
        "--quiet",
        "--resume",
        "--out",
        path,
        "--data",
        data.to_str().unwrap(),
        "--set",
        "train.steps=3",
    ]);
    assert!(!resumed.status.success());
    assert!(text(&resumed).contains(&found), "{}", text(&resumed));
}

#[test]
fn a_file_that_is_not_a_tokenizer_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "some text").unwrap();
    let bad = dir.path().join("tokenizer.json");
    std::fs::write(&bad, "{\"model\": 3}").unwrap();
    let out = dir.path().join("data");
    let said = refused(&[
        "prepare",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--tokenizer",
        bad.to_str().unwrap(),
    ]);
    assert!(
        said.contains(&bad.display().to_string()) && said.contains("not a tokenizer.json"),
        "{said}"
    );
    assert!(!out.join("meta.json").exists());
    let said = refused(&[
        "prepare",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--tokenizer",
        "no/such.json",
    ]);
    assert!(said.contains("unknown tokenizer `no/such.json`"), "{said}");
}
