//! `swax prepare` as a user runs it: files and stdin in, shards and counts out, and a refusal
//! (non-zero exit, a message, shards untouched) to overwrite without `--force`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use swax_data::Dataset;

fn swax(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_swax"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let written = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    // A command refused before it reads stdin may exit before the write: its pipe is then
    // closed, and what it printed is the test's subject, not the write.
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

#[test]
fn prepare_writes_shards_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    let docs: Vec<String> = (0..50).map(|i| format!("document {i} text")).collect();
    std::fs::write(&input, docs.join("<|endoftext|>")).unwrap();
    let out = dir.path().join("shards");
    let (input, out) = (input.to_str().unwrap(), out.to_str().unwrap());
    let args = ["prepare", input, "-", "--out", out, "--val-fraction", "0.1"];

    let first = swax(&args, "one more from stdin");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains("train") && stdout.contains("val") && stdout.contains("MB/s"));
    let dataset = Dataset::open(out).unwrap();
    let meta = dataset.meta.unwrap();
    assert_eq!(meta.train.documents + meta.val.documents, 51);
    assert!(meta.val.documents > 0);

    let again = swax(&args, "");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(Dataset::open(out).unwrap().meta.unwrap(), meta);

    let forced = swax(
        &[&args[..], &["--force", "--tokenizer", "gpt2"]].concat(),
        "",
    );
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert_eq!(Dataset::open(out).unwrap().meta.unwrap().vocab_size, 50257);
}

/// A short document then a large one at 1%: validation stays within the fraction (it once took
/// the large one, 99% of the tokens, without a word), and the output says the split it made.
#[test]
fn prepare_says_the_split_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shards");
    let text = format!("short<|endoftext|>{}", "large ".repeat(2000));
    let args = ["prepare", "-", "--out", out.to_str().unwrap()];
    let made = swax(&[&args[..], &["--val-fraction", "0.01"]].concat(), &text);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&made.stdout),
        String::from_utf8_lossy(&made.stderr),
    );
    assert!(made.status.success(), "{stderr}");
    assert!(
        stdout.contains("validation: 0.00% of the tokens (--val-fraction 0.01: at most 1.00%"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning: the validation split is empty"),
        "{stderr}"
    );
    assert_eq!(Dataset::open(&out).unwrap().meta.unwrap().val.tokens, 0);
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let out = out.to_str().unwrap();
    for args in [
        vec!["prepare", "-", "--out", out, "--tokenizer", "gpt5"],
        vec!["prepare", "/nonexistent/file.txt", "--out", out],
        vec!["prepare", "-", "--out", out, "--val-fraction", "2"],
        vec!["prepare", "--out", out],
    ] {
        let result = swax(&args, "");
        assert!(!result.status.success(), "{args:?}");
        assert!(!result.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn devices_and_inputs_without_text_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let out = out.to_str().unwrap();
    for (args, needle) in [
        (vec!["prepare", "/dev/zero", "--out", out], "/dev/zero"),
        (vec!["prepare", "-", "--out", out], "no text in - (stdin)"),
    ] {
        let result = swax(&args, " \n ");
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
