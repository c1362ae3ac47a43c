//! A Hugging Face `tokenizer.json` as a tokenizer (the shipped fixture `tiny-bpe.json`, made by
//! tools/make-tiny-bpe.py): what it encodes, its end of text, and `prepare` with it: the copy and
//! hash kept in the dataset, a changed copy, a file that is not a tokenizer, and a model too
//! small for its vocabulary all refused.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use swax_data::prepare::{Input, Plan, PrepareConfig, PrepareTokenizer};
use swax_data::tokenizer::{FileTokenizer, TokenizerFile, TOKENIZER_FILE};
use swax_data::{DataError, Dataset, DatasetMeta, Shard, Tokenizer, TokenizerKind};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-bpe.json")
}

fn sha256(path: &Path) -> String {
    let digest = Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

const TEXT: &str = "Once upon a time the little fox went to visit her grandmother.";

#[test]
fn the_fixture_encodes_and_decodes() {
    let tok = FileTokenizer::load(&fixture(), None).unwrap();
    // 256 bytes, 120 merges, then <|endoftext|>.
    assert_eq!((tok.vocab_size(), tok.eot()), (377, 376));
    let record = TokenizerFile {
        sha256: sha256(&fixture()),
        eot_token: "<|endoftext|>".into(),
    };
    assert_eq!(tok.kind(), TokenizerKind::File(record));
    let ids = tok.encode(TEXT);
    assert!(ids.len() < TEXT.len() / 2, "the merges apply: {ids:?}");
    assert!(ids.iter().all(|&id| id < 376));
    assert_eq!(tok.decode(&ids).unwrap(), TEXT);
    // Text it has no merges for still encodes, byte by byte.
    let other = "Zürich 🦀 \u{4E2D}";
    assert_eq!(tok.decode(&tok.encode(other)).unwrap(), other);
    assert!(matches!(
        tok.decode(&[377]),
        Err(DataError::OutOfVocab { token: 377, .. })
    ));
}

/// A file's truncation (and padding) would cut documents to its length: both are turned off.
#[test]
fn a_file_s_truncation_and_padding_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture()).unwrap();
    let capped = dir.path().join("capped.json");
    let settings = r#""truncation":{"direction":"Right","max_length":4,"strategy":"LongestFirst","stride":0},"padding":{"strategy":{"Fixed":64},"direction":"Right","pad_to_multiple_of":null,"pad_id":0,"pad_type_id":0,"pad_token":"!"}"#;
    let edited = text.replace(r#""truncation":null,"padding":null"#, settings);
    assert_ne!(edited, text);
    std::fs::write(&capped, edited).unwrap();
    let plain = FileTokenizer::load(&fixture(), None).unwrap();
    let tok = FileTokenizer::load(&capped, None).unwrap();
    assert_eq!(tok.encode(TEXT), plain.encode(TEXT));
}

#[test]
fn the_end_of_text_is_found_or_named() {
    let dir = tempfile::tempdir().unwrap();
    // Named: any token of the vocabulary.
    let tok = FileTokenizer::load(&fixture(), Some("Ġthe")).unwrap();
    assert_eq!(tok.eot(), tok.encode(" the")[0]);
    let named = FileTokenizer::load(&fixture(), Some("<eos>")).unwrap_err();
    assert!(named
        .to_string()
        .contains("\"<eos>\" is not in its vocabulary"));
    // Without one of the tokens looked for, the error names them and --eot-token.
    let text = std::fs::read_to_string(fixture()).unwrap();
    let renamed = dir.path().join("renamed.json");
    std::fs::write(&renamed, text.replace("<|endoftext|>", "<|sep|>")).unwrap();
    let err = FileTokenizer::load(&renamed, None).unwrap_err().to_string();
    assert!(err.contains(&renamed.display().to_string()), "{err}");
    assert!(
        err.contains("<|endoftext|>, <|end_of_text|>, </s>, <eos>") && err.contains("--eot-token"),
        "{err}"
    );
    // Another end-of-text name of the list is found.
    let eos = dir.path().join("eos.json");
    std::fs::write(&eos, text.replace("<|endoftext|>", "</s>")).unwrap();
    let tok = FileTokenizer::load(&eos, None).unwrap();
    assert_eq!((tok.eot(), tok.record().eot_token.as_str()), (376, "</s>"));
}

#[test]
fn a_file_that_is_not_a_tokenizer_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, r#"{"version": "1.0", "model": {"type": "BPE""#).unwrap();
    match FileTokenizer::load(&bad, None) {
        Err(DataError::TokenizerFile { path, detail }) => {
            assert_eq!(path, bad);
            assert!(detail.contains("not a tokenizer.json"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    // A word-level model without an unknown token cannot encode every text.
    let words = dir.path().join("words.json");
    std::fs::write(
        &words,
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,
            "decoder":null,"model":{"type":"WordLevel","vocab":{"a":0,"b":1,"</s>":2},
            "unk_token":"<unk>"}}"#,
    )
    .unwrap();
    let err = FileTokenizer::load(&words, None).unwrap_err().to_string();
    assert!(err.contains("needs an unknown token"), "{err}");
}

#[test]
fn parse_names_a_builtin_or_a_file() {
    let file = fixture();
    assert_eq!(
        PrepareTokenizer::parse("gpt2", None).unwrap(),
        PrepareTokenizer::Builtin(TokenizerKind::Gpt2)
    );
    assert_eq!(
        PrepareTokenizer::parse(file.to_str().unwrap(), Some("</s>".into())).unwrap(),
        PrepareTokenizer::File {
            path: file,
            eot_token: Some("</s>".into())
        }
    );
    assert!(matches!(
        PrepareTokenizer::parse("no/such/tokenizer.json", None),
        Err(DataError::UnknownTokenizer(_))
    ));
    let err = PrepareTokenizer::parse("bytes", Some("</s>".into())).unwrap_err();
    assert!(err.to_string().contains("--eot-token"), "{err}");
}

fn prepare(root: &Path, tokenizer: PathBuf, force: bool) -> swax_data::Result<DatasetMeta> {
    let input = root.join("story.txt");
    let docs: Vec<String> = (0..40).map(|i| format!("{i}: {TEXT}")).collect();
    std::fs::write(&input, docs.join("\n<|endoftext|>\n")).unwrap();
    let out = root.join("data");
    let cfg = PrepareConfig {
        out: out.clone(),
        tokenizer: PrepareTokenizer::File {
            path: tokenizer,
            eot_token: None,
        },
        val_fraction: 0.1,
        shard_tokens: 200,
        force,
        max_stream_bytes: 1 << 20,
    };
    Plan::new(&[Input::Path(input)], &out)?.run(&cfg, &mut |_| {})
}

#[test]
fn prepare_keeps_the_file_and_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let meta = prepare(dir.path(), fixture(), false).unwrap();
    let data = dir.path().join("data");
    let record = TokenizerFile {
        sha256: sha256(&fixture()),
        eot_token: "<|endoftext|>".into(),
    };
    assert_eq!(meta.tokenizer, TokenizerKind::File(record.clone()));
    assert_eq!((meta.vocab_size, meta.eot), (377, 376));
    assert_eq!(meta.train.documents + meta.val.documents, 40);
    let copy = data.join(TOKENIZER_FILE);
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        std::fs::read(fixture()).unwrap()
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("meta.json")).unwrap()).unwrap();
    assert_eq!(json["tokenizer"]["file"]["sha256"], record.sha256.as_str());

    // The dataset stands alone: it reads back through its copy, decoding to the documents.
    let ds = Dataset::open(&data).unwrap();
    let tok = TokenizerKind::File(record).open(&data).unwrap();
    let tokens: Vec<u32> = ds.train.iter().flat_map(Shard::to_vec).collect();
    let first: Vec<u32> = tokens[1..]
        .iter()
        .take_while(|&&t| t != tok.eot())
        .copied()
        .collect();
    assert_eq!(tokens[0], 376);
    assert_eq!(tok.decode(&first).unwrap(), format!("0: {TEXT}"));

    // The model must hold the tokenizer's whole vocabulary, not only the ids the data uses.
    match ds.check_model_vocab(376) {
        Err(DataError::VocabMismatch { needed, model, .. }) => {
            assert_eq!((needed, model), (377, 376))
        }
        other => panic!("{other:?}"),
    }
    ds.check_model_vocab(384).unwrap();
}

#[test]
fn a_changed_tokenizer_copy_is_refused_naming_both_hashes() {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path(), fixture(), false).unwrap();
    let copy = dir.path().join("data").join(TOKENIZER_FILE);
    let recorded = sha256(&copy);
    // Another merge order is another tokenizer, though it parses as well.
    let text = std::fs::read_to_string(&copy).unwrap();
    std::fs::write(&copy, text.replacen("\"h e\"", "\"e n\"", 1)).unwrap();
    let found = sha256(&copy);
    let err = Dataset::open(dir.path().join("data")).unwrap_err();
    assert!(matches!(err, DataError::TokenizerHash { .. }), "{err:?}");
    let msg = err.to_string();
    for part in [&recorded, &found, &copy.display().to_string()] {
        assert!(msg.contains(part.as_str()), "{msg} lacks {part}");
    }
    // A missing copy is named too.
    std::fs::remove_file(&copy).unwrap();
    let err = Dataset::open(dir.path().join("data"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&copy.display().to_string()) && err.contains("missing"),
        "{err}"
    );
}

#[test]
fn a_bad_tokenizer_leaves_the_dataset_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path(), fixture(), false).unwrap();
    let data = dir.path().join("data");
    let before: Vec<(PathBuf, Vec<u8>)> = files(&data);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "not json").unwrap();
    let err = prepare(dir.path(), bad.clone(), true)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&bad.display().to_string()), "{err}");
    assert_eq!(files(&data), before);
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect();
    all.sort();
    all
}
