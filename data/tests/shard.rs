//! Shard format: round trips of both formats, every malformed header field, wrong sizes,
//! truncation, out-of-range tokens and random bytes return errors and never panic.

use std::path::Path;

use proptest::prelude::*;
use swax_data::shard::HEADER_BYTES;
use swax_data::{write_shard, DataError, Shard, ShardFormat, ShardWriter};

fn valid_bytes(format: ShardFormat, tokens: &[u32]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.bin");
    write_shard(&path, format, tokens).unwrap();
    std::fs::read(path).unwrap()
}

fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, Result<Shard, DataError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.bin");
    std::fs::write(&path, bytes).unwrap();
    let shard = Shard::open(&path);
    (dir, shard)
}

/// Opens `bytes` and expects a header error on `field` at `offset` that names the file.
fn expect_bad(bytes: &[u8], field: &str, offset: u64) {
    let (_dir, result) = open_bytes(bytes);
    let err = result.expect_err("a malformed shard must not open");
    let message = err.to_string();
    match err {
        DataError::BadShard {
            field: f,
            offset: o,
            path,
            ..
        } => {
            assert_eq!((f, o), (field, offset), "{message}");
            assert!(
                path.ends_with("bad.bin") && message.contains("bad.bin"),
                "{message}"
            );
        }
        other => panic!("expected a bad `{field}`, got {other:?}"),
    }
}

fn set_word(bytes: &mut [u8], word: usize, value: i32) {
    bytes[4 * word..4 * word + 4].copy_from_slice(&value.to_le_bytes());
}

proptest! {
    #[test]
    fn u16_round_trip(tokens in prop::collection::vec(0u32..=65535, 0..3000)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train_000000.bin");
        write_shard(&path, ShardFormat::U16, &tokens).unwrap();
        let shard = Shard::open(&path).unwrap();
        prop_assert_eq!(shard.len(), tokens.len());
        prop_assert_eq!(shard.to_vec(), tokens.clone());
        let bytes = std::fs::read(&path).unwrap();
        prop_assert_eq!(bytes.len(), HEADER_BYTES + 2 * tokens.len());
        prop_assert_eq!(&bytes[..4], &20240520i32.to_le_bytes());
        prop_assert_eq!(&bytes[4..8], &1i32.to_le_bytes());
    }

    #[test]
    fn u32_round_trip(tokens in prop::collection::vec(any::<u32>(), 0..3000), start in 0usize..3000) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.bin");
        write_shard(&path, ShardFormat::U32, &tokens).unwrap();
        let shard = Shard::open(&path).unwrap();
        prop_assert_eq!(shard.to_vec(), tokens.clone());
        let start = start.min(tokens.len());
        let mut out = vec![0; tokens.len() - start];
        shard.read(start, &mut out).unwrap();
        prop_assert_eq!(&out[..], &tokens[start..]);
        let bytes = std::fs::read(&path).unwrap();
        prop_assert_eq!(&bytes[..4], &20240801i32.to_le_bytes());
        prop_assert_eq!(&bytes[4..8], &7i32.to_le_bytes());
    }

    /// Random files, and random files behind a plausible header, never panic the reader.
    #[test]
    fn random_bytes_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..2500),
        header in prop::option::of((0usize..2, -3i32..4000)),
    ) {
        let mut bytes = body;
        if let Some((format, count)) = header {
            let format = [ShardFormat::U16, ShardFormat::U32][format];
            bytes.resize(bytes.len().max(HEADER_BYTES), 0);
            bytes[..HEADER_BYTES].fill(0);
            set_word(&mut bytes, 0, format.magic());
            set_word(&mut bytes, 1, format.version());
            set_word(&mut bytes, 2, count);
        }
        let (_dir, result) = open_bytes(&bytes);
        if let Ok(shard) = result {
            let tokens = shard.to_vec();
            prop_assert_eq!(tokens.len(), shard.len());
            let mut beyond = [0u32; 1];
            prop_assert!(shard.read(shard.len(), &mut beyond).is_err());
        }
    }
}

#[test]
fn every_malformed_header_field_is_an_error_with_its_offset() {
    for format in [ShardFormat::U16, ShardFormat::U32] {
        let good = valid_bytes(format, &[1, 2, 3, 4, 5]);
        let (_dir, ok) = open_bytes(&good);
        assert_eq!(ok.unwrap().to_vec(), [1, 2, 3, 4, 5]);

        let mut bytes = good.clone();
        set_word(&mut bytes, 0, 12345);
        expect_bad(&bytes, "magic", 0);

        let mut bytes = good.clone();
        set_word(&mut bytes, 1, format.version() + 1);
        expect_bad(&bytes, "version", 4);

        let mut bytes = good.clone();
        set_word(&mut bytes, 2, -1);
        expect_bad(&bytes, "token_count", 8);

        for word in [3, 100, 255] {
            let mut bytes = good.clone();
            set_word(&mut bytes, word, 7);
            expect_bad(&bytes, "reserved", 4 * word as u64);
        }

        let len = good.len() as u64;
        expect_bad(&good[..good.len() - 1], "file_size", len - 1);
        let mut longer = good.clone();
        longer.push(0);
        expect_bad(&longer, "file_size", len);
        let mut bytes = good.clone();
        set_word(&mut bytes, 2, 6);
        expect_bad(&bytes, "file_size", len);
        let mut bytes = good.clone();
        set_word(&mut bytes, 2, i32::MAX);
        expect_bad(&bytes, "file_size", len);

        expect_bad(&good[..HEADER_BYTES - 1], "header", HEADER_BYTES as u64 - 1);
        expect_bad(&good[..10], "header", 10);
        expect_bad(&[], "header", 0);
    }
}

#[test]
fn magic_and_version_of_the_other_format_do_not_mix() {
    let mut bytes = valid_bytes(ShardFormat::U16, &[1, 2]);
    set_word(&mut bytes, 1, ShardFormat::U32.version());
    expect_bad(&bytes, "version", 4);
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let err = Shard::open("/nonexistent/shard.bin").unwrap_err();
    assert!(matches!(err, DataError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/shard.bin"));
}

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_u16_shard_refuses_larger_tokens_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.bin");
    let err = write_shard(&path, ShardFormat::U16, &[1, 65535, 65536]).unwrap_err();
    match &err {
        DataError::OutOfVocab {
            token, location, ..
        } => {
            assert_eq!(*token, 65536);
            assert!(location.ends_with("token 2"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert!(dir_entries(dir.path()).is_empty());
}

#[test]
fn an_unfinished_writer_leaves_nothing_under_the_final_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.bin");
    let mut writer = ShardWriter::create(&path, ShardFormat::U32).unwrap();
    writer.push(&[1, 2, 3]).unwrap();
    // While writing, only a temporary file exists.
    assert!(!path.exists());
    assert_eq!(dir_entries(dir.path()).len(), 1);
    drop(writer);
    assert!(dir_entries(dir.path()).is_empty());
}

#[test]
fn rewriting_replaces_a_shard_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.bin");
    write_shard(&path, ShardFormat::U16, &[1; 100]).unwrap();
    let old = Shard::open(&path).unwrap();
    write_shard(&path, ShardFormat::U16, &[2; 10]).unwrap();
    // The old mapping still sees the old file: the new one arrived by rename, not in place.
    assert_eq!(old.to_vec(), vec![1; 100]);
    assert_eq!(Shard::open(&path).unwrap().to_vec(), vec![2; 10]);
    assert_eq!(dir_entries(dir.path()), ["s.bin"]);
}

#[test]
fn formats_fit_vocabularies() {
    assert_eq!(ShardFormat::for_vocab(256), ShardFormat::U16);
    assert_eq!(ShardFormat::for_vocab(50257), ShardFormat::U16);
    assert_eq!(ShardFormat::for_vocab(65536), ShardFormat::U16);
    assert_eq!(ShardFormat::for_vocab(128256), ShardFormat::U32);
}
