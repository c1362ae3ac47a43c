//! The tokenizer files of an export, for transformers' `AutoTokenizer`:
//!
//! - bytes: a `tokenizer.json` of Hugging Face's `tokenizers` that maps each byte to its own
//!   value: GPT-2's byte-to-character table (the ByteLevel pre-tokenizer, no regex split) and a
//!   BPE vocabulary of those 256 characters with no merges; the end of text is id 0, as swax's.
//! - gpt2: none. Its ranks are compiled into swax (tiktoken's r50k_base), not a vocabulary and
//!   merges file; transformers' own `gpt2` tokenizer gives the same ids (docs/export.md).
//! - a tokenizer file: the run's copy, byte for byte (checked against the hash the run
//!   recorded), with its end-of-text token as `eos_token`.
use serde_json::{json, Map, Value};
use std::path::Path;

use swax_data::tokenizer::{FileTokenizer, TOKENIZER_FILE};
use swax_data::{Tokenizer, TokenizerKind};

use crate::config::Config;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The end-of-text id of the tokenizer of the run folder `run`.
pub fn eot(cfg: &Config, run: &Path) -> Result<u32> {
    Ok(cfg.data.tokenizer.open(run)?.eot())
}

/// The files, by name, that let `AutoTokenizer.from_pretrained(OUT)` read the tokens of the
/// run folder `run`.
pub fn files(cfg: &Config, run: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    match &cfg.data.tokenizer {
        TokenizerKind::Bytes => {
            let eos = byte_char(swax_data::tokenizer::BytesTokenizer.eot() as u8).to_string();
            Ok(vec![
                json_file("tokenizer.json", &bytes_tokenizer_json())?,
                json_file("tokenizer_config.json", &tokenizer_config(&eos))?,
            ])
        }
        TokenizerKind::Gpt2 => Ok(Vec::new()),
        TokenizerKind::File(record) => {
            let file = FileTokenizer::open(run, record)?;
            Ok(vec![
                (TOKENIZER_FILE.to_string(), file.bytes().to_vec()),
                json_file(
                    "tokenizer_config.json",
                    &tokenizer_config(&record.eot_token),
                )?,
            ])
        }
    }
}

fn json_file(name: &str, value: &Value) -> Result<(String, Vec<u8>)> {
    Ok((name.to_string(), serde_json::to_vec_pretty(value)?))
}

/// `tokenizer_config.json` for the fast tokenizer of `tokenizer.json`, `eos` its end of text.
pub fn tokenizer_config(eos: &str) -> Value {
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "bos_token": eos,
        "clean_up_tokenization_spaces": false,
        // swax reads any length: no limit of the tokenizer's own.
        "model_max_length": 1_000_000_000u64,
    })
}

/// GPT-2's byte-to-character table: the printable bytes (`!` to `~`, `¡` to `¬`, `®` to `ÿ`)
/// stand for themselves, the others for the characters from U+0100 on, in byte order. A BPE
/// over these characters reads any bytes, which is how ByteLevel tokenizers see text.
pub fn byte_char(b: u8) -> char {
    let printable = |c: u8| matches!(c, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + rank).expect("U+0100 to U+0143 are characters")
}

/// The `tokenizer.json` of the byte tokenizer (see the module's doc).
pub fn bytes_tokenizer_json() -> Value {
    let vocab: Map<String, Value> = (0..=255u8)
        .map(|b| (byte_char(b).to_string(), json!(b)))
        .collect();
    let byte_level = json!({
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": false,
        "use_regex": false,
    });
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": [],
        },
    })
}

/// Copies into the run folder `run` what its tokenizer needs from the export `dir`: a
/// tokenizer file's copy, checked against the hash the config records (nothing for the
/// tokenizers built into swax).
pub fn import_files(cfg: &Config, dir: &Path, run: &Path) -> Result<()> {
    match &cfg.data.tokenizer {
        TokenizerKind::Bytes | TokenizerKind::Gpt2 => Ok(()),
        TokenizerKind::File(record) => {
            FileTokenizer::open(dir, record)?.copy_into(run)?;
            Ok(())
        }
    }
}
