//! The tokenizer files of an export, for transformers' `AutoTokenizer`:
//!
//! - bytes: a `tokenizer.json` of Hugging Face's `tokenizers` that maps each byte to its own
//!   value: GPT-2's byte-to-character table (the ByteLevel pre-tokenizer, no regex split) and a
//!   BPE vocabulary of those 256 characters with no merges; the end of text is id 0, as swax's.
//! - gpt2: GPT-2's `tokenizer.json`, rebuilt from the ranks swax encodes with (tiktoken's
//!   r50k_base, compiled in): each token's bytes in GPT-2's characters as the vocabulary, and as
//!   the merges, in rank order, the two tokens each longer token is made of (the split that byte
//!   pair encoding with only the lower ranks reaches). It encodes as swax does (tested), so an
//!   export needs no download of transformers' `gpt2` files.
//! - a tokenizer file: the run's copy, byte for byte (checked against the hash the run
//!   recorded), with its end-of-text token as `eos_token`.
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::Path;

use swax_data::tokenizer::{FileTokenizer, Gpt2Tokenizer, TOKENIZER_FILE};
use swax_data::{Tokenizer, TokenizerKind};

use crate::config::Config;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The end-of-text id of the tokenizer of the run folder `run`.
pub fn eot(cfg: &Config, run: &Path) -> Result<u32> {
    Ok(cfg.data.tokenizer.open(run)?.eot())
}

/// The text the export's tokenizer reads as the end-of-text id: the byte of that value for the
/// byte tokenizer (swax's own decoding writes `<|endoftext|>`, thirteen bytes to the export's
/// tokenizer), GPT-2's special token, a tokenizer file's end-of-text token.
pub fn eot_text(cfg: &Config) -> String {
    match &cfg.data.tokenizer {
        TokenizerKind::Bytes => {
            char::from(swax_data::tokenizer::BytesTokenizer.eot() as u8).to_string()
        }
        TokenizerKind::Gpt2 => GPT2_EOT_TEXT.to_string(),
        TokenizerKind::File(record) => record.eot_token.clone(),
    }
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
        TokenizerKind::Gpt2 => Ok(vec![
            json_file("tokenizer.json", &gpt2_tokenizer_json()?)?,
            json_file("tokenizer_config.json", &tokenizer_config(GPT2_EOT_TEXT))?,
        ]),
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

/// GPT-2's end-of-text token as text.
const GPT2_EOT_TEXT: &str = "<|endoftext|>";

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
    byte_level_bpe(false, json!([]), vocab, Vec::new())
}

/// A byte-level BPE `tokenizer.json`: GPT-2's characters for bytes (with GPT-2's split of the
/// text into words first where `split` is set), `vocab` and `merges` over those characters.
fn byte_level_bpe(
    split: bool,
    added: Value,
    vocab: Map<String, Value>,
    merges: Vec<String>,
) -> Value {
    let byte_level = json!({
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": false,
        "use_regex": split,
    });
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
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
            "merges": merges,
        },
    })
}

/// The `tokenizer.json` of GPT-2 (see the module's doc).
pub fn gpt2_tokenizer_json() -> Result<Value> {
    let tok = Gpt2Tokenizer::new()?;
    let eot = tok.eot();
    let tokens: Vec<Vec<u8>> = (0..eot)
        .map(|id| tok.decode_bytes(&[id]))
        .collect::<std::result::Result<_, _>>()?;
    let rank: HashMap<&[u8], u32> = tokens
        .iter()
        .enumerate()
        .map(|(id, b)| (b.as_slice(), id as u32))
        .collect();
    let text = |b: &[u8]| b.iter().map(|&c| byte_char(c)).collect::<String>();
    let mut vocab: Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, b)| (text(b), json!(id)))
        .collect();
    vocab.insert(GPT2_EOT_TEXT.into(), json!(eot));
    let mut merges = Vec::new();
    for (id, b) in tokens.iter().enumerate().filter(|(_, b)| b.len() > 1) {
        let [left, right] = split_in_two(b, id as u32, &rank)
            .ok_or_else(|| format!("GPT-2 token {id} is not two lower-ranked tokens merged"))?;
        merges.push(format!("{} {}", text(left), text(right)));
    }
    let added = json!([{
        "id": eot, "content": GPT2_EOT_TEXT, "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": true, "special": true,
    }]);
    Ok(byte_level_bpe(true, added, vocab, merges))
}

/// The two parts byte pair encoding of `bytes` reaches with only the tokens ranked below
/// `limit`: the merge that makes the token of rank `limit` (None if it does not end in two).
fn split_in_two<'a>(
    bytes: &'a [u8],
    limit: u32,
    rank: &HashMap<&[u8], u32>,
) -> Option<[&'a [u8]; 2]> {
    // The parts are bytes[cuts[i]..cuts[i + 1]], each byte its own part to begin with.
    let mut cuts: Vec<usize> = (0..=bytes.len()).collect();
    loop {
        // The adjacent pair whose merged bytes rank lowest below the limit.
        let best = (0..cuts.len() - 2)
            .filter_map(|i| {
                let r = *rank.get(&bytes[cuts[i]..cuts[i + 2]])?;
                (r < limit).then_some((r, i))
            })
            .min();
        let Some((_, i)) = best else { break };
        cuts.remove(i + 1);
    }
    match cuts[..] {
        [0, mid, _] => Some([&bytes[..mid], &bytes[mid..]]),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Hugging Face's own library reading the rebuilt file gives swax's ids, and back, on the
    /// README (prose, code, tables, dashes, ×) and on text made to find the edges of GPT-2's
    /// split: contractions, runs of spaces and newlines, digits, accents, CJK, emoji.
    #[test]
    fn the_gpt2_file_encodes_and_decodes_as_swax_does() {
        let json = serde_json::to_vec(&gpt2_tokenizer_json().unwrap()).unwrap();
        let hf = tokenizers::Tokenizer::from_bytes(&json).unwrap();
        let swax = Gpt2Tokenizer::new().unwrap();
        assert_eq!(hf.get_vocab_size(true), 50257);
        assert_eq!(hf.token_to_id(GPT2_EOT_TEXT), Some(swax.eot()));
        let edges = "They're here; I'll've SHE'S 'tis.  Two  spaces,   three\t\ttabs\n\n\n \
                     12345 6789 3.14159 1e-9 naïve café Ünïcödé 日本語の文章 😀👍🏽 a\u{0}b \
                     ﬁnal trailing   ";
        for text in [include_str!("../../../README.md"), edges] {
            let want = swax.encode(text);
            let got = hf.encode(text, false).unwrap().get_ids().to_vec();
            assert_eq!(got.len(), want.len(), "token counts differ");
            assert_eq!(got, want);
            assert_eq!(hf.decode(&want, false).unwrap(), text);
        }
    }
}
