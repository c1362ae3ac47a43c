//! `prepare`'s pipeline: documents split on files and markers, whole documents to one split
//! (train and validation never share one), shard rotation, counts in `meta.json` that match the
//! shards, and refusing to overwrite without `force`.

use std::collections::HashSet;
use std::path::Path;

use swax_data::prepare::{Input, Plan, PrepareConfig};
use swax_data::{DataError, Dataset, Shard, Tokenizer, TokenizerKind};

/// 300 documents of varied length, each naming itself, over two files and a folder.
fn write_inputs(root: &Path) -> Vec<Input> {
    let doc = |i: usize| format!("doc-{i:04}: {}", "lorem ipsum ".repeat(1 + i % 17));
    let file = |name: &Path, range: std::ops::Range<usize>| {
        let text: Vec<String> = range.map(doc).collect();
        std::fs::write(name, text.join("\n<|endoftext|>\n")).unwrap();
    };
    file(&root.join("a.txt"), 0..100);
    file(&root.join("b.txt"), 100..200);
    std::fs::create_dir_all(root.join("more/deeper")).unwrap();
    file(&root.join("more/c.txt"), 200..250);
    file(&root.join("more/deeper/d.txt"), 250..300);
    std::fs::write(root.join("more/empty.txt"), "").unwrap();
    vec![
        Input::Path(root.join("a.txt")),
        Input::Path(root.join("b.txt")),
        Input::Path(root.join("more")),
    ]
}

fn config(out: &Path, tokenizer: TokenizerKind) -> PrepareConfig {
    PrepareConfig {
        out: out.to_owned(),
        tokenizer: tokenizer.into(),
        val_fraction: 0.2,
        shard_tokens: 1000,
        force: false,
        max_stream_bytes: 1 << 20,
    }
}

/// The documents of a split, decoded, from the shards' end-of-text separators.
fn documents(shards: &[Shard], tok: &dyn Tokenizer) -> Vec<String> {
    let tokens: Vec<u32> = shards.iter().flat_map(Shard::to_vec).collect();
    assert_eq!(
        tokens.first(),
        Some(&tok.eot()),
        "every document starts with end of text"
    );
    tokens
        .split(|&t| t == tok.eot())
        .skip(1)
        .map(|doc| tok.decode(doc).unwrap())
        .collect()
}

fn check_dataset(tokenizer: TokenizerKind) {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_inputs(dir.path());
    let out = dir.path().join("out");
    let plan = Plan::new(&inputs, &out).unwrap();
    assert_eq!(plan.files(), 5);
    let mut progressed = 0;
    let meta = plan
        .run(&config(&out, tokenizer.clone()), &mut |n| progressed += n)
        .unwrap();
    assert_eq!(Some(progressed), plan.total_bytes());

    let dataset = Dataset::open(&out).unwrap();
    assert_eq!(dataset.meta.as_ref(), Some(&meta));
    dataset.check_model_vocab(meta.vocab_size).unwrap();
    assert!(dataset.check_model_vocab(meta.vocab_size - 1).is_err());
    let tok = tokenizer.build().unwrap();
    assert_eq!((meta.vocab_size, meta.eot), (tok.vocab_size(), tok.eot()));
    let train = documents(&dataset.train, &*tok);
    let val = documents(&dataset.val, &*tok);
    assert_eq!(train.len() as u64, meta.train.documents);
    assert_eq!(val.len() as u64, meta.val.documents);
    for (shards, counts) in [(&dataset.train, meta.train), (&dataset.val, meta.val)] {
        assert_eq!(shards.len() as u64, counts.shards);
        assert_eq!(
            shards.iter().map(|s| s.len() as u64).sum::<u64>(),
            counts.tokens
        );
        assert!(shards.iter().rev().skip(1).all(|s| s.len() == 1000));
    }

    let names =
        |docs: &[String]| -> HashSet<String> { docs.iter().map(|d| d[..8].to_owned()).collect() };
    let (train_names, val_names) = (names(&train), names(&val));
    assert!(
        train_names.is_disjoint(&val_names),
        "a document in both splits"
    );
    assert_eq!(train_names.len() + val_names.len(), 300);
    assert_eq!(
        train.len() + val.len(),
        300,
        "empty files and parts are skipped"
    );
    let share = meta.val.tokens as f64 / (meta.train.tokens + meta.val.tokens) as f64;
    assert!((share - 0.2).abs() < 0.02, "validation share {share}");
    assert!(train
        .iter()
        .chain(&val)
        .all(|d| d.starts_with("doc-") && d.ends_with("ipsum")));
}

#[test]
fn bytes_dataset_splits_whole_documents() {
    check_dataset(TokenizerKind::Bytes);
}

#[test]
fn gpt2_dataset_splits_whole_documents() {
    check_dataset(TokenizerKind::Gpt2);
}

/// A large document after a small one, then small ones: validation takes at most the fraction
/// asked (it once took the large one, two thirds of the tokens at a fraction of 1%), and the
/// small ones later fill it.
#[test]
fn a_large_document_does_not_swell_validation() {
    let dir = tempfile::tempdir().unwrap();
    let mut docs = vec!["short".to_string(), "large ".repeat(2000)];
    docs.extend((0..60).map(|i| format!("{i:03} {}", "small ".repeat(30))));
    let input = dir.path().join("in.txt");
    std::fs::write(&input, docs.join("<|endoftext|>")).unwrap();
    let out = dir.path().join("out");
    let plan = Plan::new(&[Input::Path(input)], &out).unwrap();
    let cfg = PrepareConfig {
        val_fraction: 0.01,
        ..config(&out, TokenizerKind::Bytes)
    };
    let meta = plan.run(&cfg, &mut |_| {}).unwrap();
    let share = meta.val.tokens as f64 / (meta.train.tokens + meta.val.tokens) as f64;
    assert!(
        share <= 0.01,
        "validation holds {:.1}% of the tokens",
        100.0 * share
    );
    assert!(
        meta.val.documents > 0,
        "the small documents fill validation"
    );
}

#[test]
fn refuses_to_overwrite_without_force_and_clears_stale_shards_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_inputs(dir.path());
    let out = dir.path().join("out");
    let plan = Plan::new(&inputs, &out).unwrap();
    let small = PrepareConfig {
        shard_tokens: 100,
        ..config(&out, TokenizerKind::Bytes)
    };
    let first = plan.run(&small, &mut |_| {}).unwrap();
    let again = plan.run(&small, &mut |_| {});
    assert!(matches!(again, Err(DataError::ShardsExist { .. })));

    std::fs::write(out.join("notes.txt"), "kept").unwrap();
    let big = PrepareConfig {
        shard_tokens: 1_000_000,
        force: true,
        ..small
    };
    let second = plan.run(&big, &mut |_| {}).unwrap();
    assert!(first.train.shards > 1);
    assert_eq!((second.train.shards, second.val.shards), (1, 1));
    assert_eq!(
        (second.train.tokens, second.val.tokens),
        (first.train.tokens, first.val.tokens)
    );
    let dataset = Dataset::open(&out).unwrap();
    assert_eq!((dataset.train.len(), dataset.val.len()), (1, 1));
    assert!(
        out.join("notes.txt").exists(),
        "only dataset files are removed"
    );
}

#[test]
fn bad_settings_and_missing_inputs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_inputs(dir.path());
    let out = dir.path().join("out");
    let plan = Plan::new(&inputs, &out).unwrap();
    for bad in [
        PrepareConfig {
            val_fraction: 1.0,
            ..config(&out, TokenizerKind::Bytes)
        },
        PrepareConfig {
            val_fraction: -0.1,
            ..config(&out, TokenizerKind::Bytes)
        },
        PrepareConfig {
            shard_tokens: 0,
            ..config(&out, TokenizerKind::Bytes)
        },
    ] {
        assert!(matches!(
            plan.run(&bad, &mut |_| {}),
            Err(DataError::Config(_))
        ));
    }
    let missing = Plan::new(&[Input::from("/nonexistent/input.txt")], &out);
    assert!(matches!(missing, Err(DataError::Io { .. })));
    assert_eq!(Input::from("-"), Input::Stdin);
}

#[test]
fn the_output_folder_is_not_read_as_input() {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let out = dir.path().join("more/out");
    let whole = [Input::Path(dir.path().to_owned())];
    let first = Plan::new(&whole, &out).unwrap();
    first
        .run(&config(&out, TokenizerKind::Bytes), &mut |_| {})
        .unwrap();
    let again = Plan::new(&whole, &out).unwrap();
    assert_eq!((first.files(), again.files()), (5, 5));
}

#[test]
fn shard_names_follow_llm_c() {
    use swax_data::Split;
    let split = |name: &str| Split::of_file(Path::new(name));
    assert_eq!(split("fineweb_train_000001.bin"), Some(Split::Train));
    assert_eq!(split("fineweb_val_000000.bin"), Some(Split::Val));
    assert_eq!(split("tiny_shakespeare_val.bin"), Some(Split::Val));
    assert_eq!(split("train_000003.bin"), Some(Split::Train));
    assert_eq!(split("trainer_000003.bin"), None);
    assert_eq!(split("train_000003.txt"), None);
    assert_eq!(split(".swax-tmp-abc"), None);
    assert_eq!(Split::Val.shard_file(12), "val_000012.bin");
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Dataset::open(empty.path()),
        Err(DataError::Config(_))
    ));
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failed_forced_prepare_keeps_the_old_dataset_whole() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_inputs(dir.path());
    let out = dir.path().join("out");
    let plan = Plan::new(&inputs, &out).unwrap();
    let small = PrepareConfig {
        shard_tokens: 100,
        ..config(&out, TokenizerKind::Bytes)
    };
    let first = plan.run(&small, &mut |_| {}).unwrap();
    let before = names(&out);
    // An input that vanishes after the plan is made fails the run after some shards are
    // written, as a full disk would.
    std::fs::remove_file(dir.path().join("b.txt")).unwrap();
    let forced = PrepareConfig {
        force: true,
        ..small
    };
    let err = plan.run(&forced, &mut |_| {}).unwrap_err().to_string();
    assert!(err.contains("b.txt"), "{err}");
    assert_eq!(Dataset::open(&out).unwrap().meta.unwrap(), first);
    assert_eq!(names(&out), before, "nothing of the failed run is left");
}

#[test]
fn a_half_made_dataset_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_inputs(dir.path());
    let out = dir.path().join("out");
    let cfg = PrepareConfig {
        shard_tokens: 100,
        ..config(&out, TokenizerKind::Bytes)
    };
    Plan::new(&inputs, &out)
        .unwrap()
        .run(&cfg, &mut |_| {})
        .unwrap();
    // A shard lost: meta.json no longer matches the folder.
    std::fs::remove_file(out.join("train_000003.bin")).unwrap();
    let err = Dataset::open(&out).unwrap_err();
    assert!(matches!(err, DataError::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("train shard"), "{err}");
    // Shards without the meta.json a prepare writes last: a prepare that did not finish.
    std::fs::remove_file(out.join("meta.json")).unwrap();
    let err = Dataset::open(&out).unwrap_err();
    assert!(matches!(err, DataError::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("meta.json"), "{err}");
    // Shards made elsewhere (llm.c's names) have no meta.json and are taken as they are.
    let llmc = dir.path().join("llmc");
    std::fs::create_dir(&llmc).unwrap();
    let tokens: Vec<u32> = (0..500).map(|i| i % 256).collect();
    swax_data::write_shard(
        llmc.join("fineweb_train_000001.bin"),
        swax_data::ShardFormat::U16,
        &tokens,
    )
    .unwrap();
    assert!(Dataset::open(&llmc).unwrap().meta.is_none());
}

#[test]
fn a_killed_prepare_is_cleared_and_a_running_one_is_not_disturbed() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_inputs(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir_all(out.join(".swax-staging")).unwrap();
    std::fs::write(out.join(".swax-staging/train_000000.bin"), "partial").unwrap();
    let plan = Plan::new(&inputs, &out).unwrap();
    let cfg = config(&out, TokenizerKind::Bytes);
    {
        let _other = swax_data::FolderLock::acquire(&out).unwrap();
        let err = plan.run(&cfg, &mut |_| {}).unwrap_err();
        assert!(matches!(err, DataError::Busy { .. }), "{err}");
    }
    plan.run(&cfg, &mut |_| {}).unwrap();
    assert!(!out.join(".swax-staging").exists());
    Dataset::open(&out).unwrap();
}

#[test]
fn an_input_given_twice_is_refused_and_links_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let out = dir.path().join("out");
    let a = dir.path().join("a.txt");
    let dotted = dir.path().join(".").join("a.txt");
    let more = dir.path().join("more");
    let twice = |inputs: &[Input]| match Plan::new(inputs, &out) {
        Err(e @ DataError::Input(_)) => e.to_string(),
        other => panic!("{inputs:?}: {other:?}"),
    };
    let err = twice(&[Input::Path(a.clone()), Input::Path(dotted)]);
    assert!(err.contains("a.txt") && err.contains("same file"), "{err}");
    twice(&[Input::Path(more.clone()), Input::Path(more.join("c.txt"))]);
    twice(&[Input::Stdin, Input::Stdin]);
    #[cfg(unix)]
    {
        let links = dir.path().join("links");
        std::fs::create_dir(&links).unwrap();
        std::os::unix::fs::symlink(&a, links.join("to-a.txt")).unwrap();
        std::os::unix::fs::symlink(&more, links.join("to-more")).unwrap();
        let plan = Plan::new(&[Input::Path(links.clone())], &out).unwrap();
        assert_eq!(plan.files(), 4, "a.txt and the three files of more/");
        twice(&[Input::Path(a), Input::Path(links.clone())]);
        std::os::unix::fs::symlink(&links, links.join("loop")).unwrap();
        let err = Plan::new(&[Input::Path(links)], &out).unwrap_err();
        assert!(err.to_string().contains("loop"), "{err}");
    }
}

/// A FIFO at `path`, fed `bytes` by a thread (which ends when the reader closes it).
#[cfg(unix)]
fn fifo(path: &Path, bytes: Vec<u8>) -> std::thread::JoinHandle<()> {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
    let path = path.to_owned();
    std::thread::spawn(move || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let _ = f.write_all(&bytes);
    })
}

/// The tokens of a dataset's train split.
fn train_tokens(out: &Path) -> Vec<u32> {
    Dataset::open(out)
        .unwrap()
        .train
        .iter()
        .flat_map(Shard::to_vec)
        .collect()
}

#[cfg(unix)]
#[test]
fn a_fifo_is_read_as_a_stream_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (pipe, out) = (dir.path().join("pipe"), dir.path().join("out"));
    let writer = fifo(&pipe, b"streamed text".to_vec());
    let plan = Plan::new(&[Input::Path(pipe.clone())], &out).unwrap();
    assert_eq!((plan.files(), plan.total_bytes()), (1, None));
    let cfg = PrepareConfig {
        val_fraction: 0.0,
        ..config(&out, TokenizerKind::Bytes)
    };
    plan.run(&cfg, &mut |_| {}).unwrap();
    writer.join().unwrap();
    let mut want = vec![0];
    want.extend(b"streamed text".map(u32::from));
    assert_eq!(train_tokens(&out), want);

    // An endless stream stops at the bound, with an error naming it, and writes nothing.
    let (long, out) = (dir.path().join("long"), dir.path().join("out2"));
    let writer = fifo(&long, vec![b'a'; 5000]);
    let plan = Plan::new(&[Input::Path(long.clone())], &out).unwrap();
    let bounded = PrepareConfig {
        max_stream_bytes: 1000,
        ..config(&out, TokenizerKind::Bytes)
    };
    let err = plan.run(&bounded, &mut |_| {}).unwrap_err().to_string();
    writer.join().unwrap();
    assert!(err.contains("long") && err.contains("1000 bytes"), "{err}");
    assert_eq!(names(&out), [".swax.lock"], "nothing but the folder's lock");
}

#[cfg(unix)]
#[test]
fn devices_and_a_folder_s_fifos_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let err = Plan::new(&[Input::from("/dev/zero")], &out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/dev/zero") && err.contains("character device"),
        "{err}"
    );
    let folder = dir.path().join("texts");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("a.txt"), "text").unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(folder.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let err = Plan::new(&[Input::Path(folder)], &out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("pipe") && err.contains("FIFO"), "{err}");
}

#[test]
fn inputs_without_text_are_an_error_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (empty, blank) = (dir.path().join("empty.txt"), dir.path().join("blank.txt"));
    std::fs::write(&empty, "").unwrap();
    std::fs::write(&blank, " \n<|endoftext|>\n ").unwrap();
    let out = dir.path().join("out");
    let plan = Plan::new(&[Input::Path(empty), Input::Path(blank)], &out).unwrap();
    let err = plan
        .run(&config(&out, TokenizerKind::Bytes), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no text") && err.contains("empty.txt") && err.contains("blank.txt"),
        "{err}"
    );
    assert_eq!(names(&out), [".swax.lock"], "nothing but the folder's lock");
}

#[test]
fn the_byte_tokenizer_keeps_invalid_utf8_and_nuls() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("raw.bin");
    let raw = b"a\xff\x00b\xc3\x28\x80\x00\x00z".to_vec();
    std::fs::write(&input, &raw).unwrap();
    let out = dir.path().join("out");
    let cfg = PrepareConfig {
        val_fraction: 0.0,
        ..config(&out, TokenizerKind::Bytes)
    };
    Plan::new(&[Input::Path(input)], &out)
        .unwrap()
        .run(&cfg, &mut |_| {})
        .unwrap();
    let tokens = train_tokens(&out);
    let bytes: Vec<u8> = tokens[1..].iter().map(|&t| t as u8).collect();
    assert_eq!((tokens[0], bytes), (0, raw));
}
