//! Tokenizers: the trait the rest of the crate encodes through, and the names recorded beside
//! shards so that data and model vocabularies can be checked against each other. Two are built
//! in (bytes, GPT-2); any other is a Hugging Face `tokenizer.json` (`file`).

mod bytes;
mod file;
mod gpt2;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};

pub use bytes::BytesTokenizer;
pub use file::{sha256_hex, FileTokenizer, TokenizerFile, EOT_CANDIDATES, TOKENIZER_FILE};
pub use gpt2::Gpt2Tokenizer;

/// How the end-of-text token reads as text, and what separates documents in `swax prepare`'s
/// input files (the convention of TinyStories and other plain-text dumps).
pub const EOT_TEXT: &str = "<|endoftext|>";

/// Text to token ids and back. Every document in a token stream is preceded by [`Tokenizer::eot`].
pub trait Tokenizer: Send + Sync {
    fn kind(&self) -> TokenizerKind;

    /// Ids are `0..vocab_size`.
    fn vocab_size(&self) -> u32;

    /// The end-of-text token that separates documents.
    fn eot(&self) -> u32;

    fn encode(&self, text: &str) -> Vec<u32>;

    /// Tokens for raw input bytes. A tokenizer of text reads them as UTF-8 (an invalid sequence
    /// becomes U+FFFD, as llm.c's scripts decode their input); the byte tokenizer keeps them.
    fn encode_bytes(&self, bytes: &[u8]) -> Vec<u32> {
        self.encode(&String::from_utf8_lossy(bytes))
    }

    /// The bytes `tokens` stand for; the end-of-text token reads `<|endoftext|>` (a tokenizer
    /// file's, its own text). An id at or
    /// above the vocabulary size is an error naming its index. A token may be part of a
    /// character (a byte of UTF-8, a part of one): streamed output writes these as they come.
    fn decode_bytes(&self, tokens: &[u32]) -> Result<Vec<u8>>;

    /// Text for `tokens` (bytes that are not UTF-8 read as U+FFFD).
    fn decode(&self, tokens: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(tokens)?).into_owned())
    }
}

/// A dataset's or run's tokenizer, as its metadata and config record it: `"bytes"`, `"gpt2"`,
/// or `{"file": {"sha256": ..., "eot_token": ...}}` for a tokenizer file, whose copy lies in the
/// folder it is opened from (see [`FileTokenizer`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    #[default]
    Bytes,
    Gpt2,
    File(TokenizerFile),
}

impl TokenizerKind {
    /// The tokenizers built into swax, which need no file.
    pub const BUILTIN: [TokenizerKind; 2] = [TokenizerKind::Bytes, TokenizerKind::Gpt2];

    pub fn name(&self) -> &'static str {
        match self {
            TokenizerKind::Bytes => "bytes",
            TokenizerKind::Gpt2 => "gpt2",
            TokenizerKind::File(_) => "file",
        }
    }

    /// Builds a built-in tokenizer. GPT-2's ranks are compiled into the binary: nothing is
    /// downloaded. A tokenizer file is refused: it is read from the folder that keeps its
    /// copy ([`TokenizerKind::open`]).
    pub fn build(&self) -> Result<Box<dyn Tokenizer>> {
        Ok(match self {
            TokenizerKind::Bytes => Box::new(BytesTokenizer),
            TokenizerKind::Gpt2 => Box::new(Gpt2Tokenizer::new()?),
            TokenizerKind::File(record) => {
                return Err(DataError::Config(format!(
                    "the tokenizer file of sha256 {} is kept in a dataset or run folder, and \
                     only data prepared with it (swax prepare --tokenizer PATH) can use it; \
                     generated data is tokenized with bytes or gpt2",
                    record.sha256
                )))
            }
        })
    }

    /// Builds the tokenizer, a tokenizer file from its copy in `dir` (a dataset or run folder),
    /// refused unless it is the file recorded.
    pub fn open(&self, dir: &Path) -> Result<Box<dyn Tokenizer>> {
        match self {
            TokenizerKind::File(record) => Ok(Box::new(FileTokenizer::open(dir, record)?)),
            builtin => builtin.build(),
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerKind::File(record) => write!(
                f,
                "{TOKENIZER_FILE} (sha256 {}, end of text {:?})",
                record.sha256.chars().take(12).collect::<String>(),
                record.eot_token
            ),
            builtin => f.write_str(builtin.name()),
        }
    }
}

impl FromStr for TokenizerKind {
    type Err = DataError;

    /// A built-in tokenizer by name.
    fn from_str(s: &str) -> Result<Self> {
        TokenizerKind::BUILTIN
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| DataError::UnknownTokenizer(s.to_owned()))
    }
}

/// The first id in `tokens` at or above `vocab`, as an error naming its index.
pub(crate) fn check_ids(tokens: &[u32], vocab: u32) -> Result<()> {
    match tokens.iter().position(|&t| t >= vocab) {
        None => Ok(()),
        Some(i) => Err(DataError::OutOfVocab {
            location: format!("index {i}"),
            token: tokens[i],
            vocab,
        }),
    }
}
