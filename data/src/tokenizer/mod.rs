//! Tokenizers: the trait the rest of the crate encodes through, and the names recorded beside
//! shards so that data and model vocabularies can be checked against each other.

mod bytes;
mod gpt2;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};

pub use bytes::BytesTokenizer;
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

    /// The bytes `tokens` stand for; the end-of-text token reads `<|endoftext|>`. An id at or
    /// above the vocabulary size is an error naming its index. A token may be part of a
    /// character (a byte of UTF-8, a part of one): streamed output writes these as they come.
    fn decode_bytes(&self, tokens: &[u32]) -> Result<Vec<u8>>;

    /// Text for `tokens` (bytes that are not UTF-8 read as U+FFFD).
    fn decode(&self, tokens: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(tokens)?).into_owned())
    }
}

/// The tokenizers we ship, by the name written in a dataset's metadata and given on the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    #[default]
    Bytes,
    Gpt2,
}

impl TokenizerKind {
    pub const ALL: [TokenizerKind; 2] = [TokenizerKind::Bytes, TokenizerKind::Gpt2];

    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Bytes => "bytes",
            TokenizerKind::Gpt2 => "gpt2",
        }
    }

    /// The ids the tokenizer produces: 0 to this, less one.
    pub fn vocab_size(self) -> u32 {
        match self {
            TokenizerKind::Bytes => 256,
            TokenizerKind::Gpt2 => gpt2::GPT2_EOT + 1,
        }
    }

    /// The end-of-text id.
    pub fn eot(self) -> u32 {
        match self {
            TokenizerKind::Bytes => bytes::BYTES_EOT,
            TokenizerKind::Gpt2 => gpt2::GPT2_EOT,
        }
    }

    /// Builds the tokenizer. GPT-2's ranks are compiled into the binary: nothing is downloaded.
    pub fn build(self) -> Result<Box<dyn Tokenizer>> {
        Ok(match self {
            TokenizerKind::Bytes => Box::new(BytesTokenizer),
            TokenizerKind::Gpt2 => Box::new(Gpt2Tokenizer::new()?),
        })
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TokenizerKind {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self> {
        TokenizerKind::ALL
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
