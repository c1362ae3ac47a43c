//! The byte tokenizer: a token is a byte, vocabulary 256, no files needed.
//!
//! The tokens are the input's bytes exactly, whatever they are (invalid UTF-8, NUL): a dataset
//! of bytes is the bytes. A 256 vocabulary has no spare id, so the end-of-text separator is byte
//! 0 (NUL), which text seldom holds: in input that does hold NULs, a NUL and a document boundary
//! are the same token.

use super::{check_ids, Tokenizer, TokenizerKind, EOT_TEXT};
use crate::error::Result;

pub const BYTES_EOT: u32 = 0;
pub const BYTES_VOCAB: u32 = 256;

#[derive(Debug, Clone, Copy, Default)]
pub struct BytesTokenizer;

impl Tokenizer for BytesTokenizer {
    fn kind(&self) -> TokenizerKind {
        TokenizerKind::Bytes
    }

    fn vocab_size(&self) -> u32 {
        BYTES_VOCAB
    }

    fn eot(&self) -> u32 {
        BYTES_EOT
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_bytes(text.as_bytes())
    }

    fn encode_bytes(&self, bytes: &[u8]) -> Vec<u32> {
        bytes.iter().map(|&b| u32::from(b)).collect()
    }

    fn decode_bytes(&self, tokens: &[u32]) -> Result<Vec<u8>> {
        check_ids(tokens, self.vocab_size())?;
        let mut bytes = Vec::with_capacity(tokens.len());
        for &t in tokens {
            if t == BYTES_EOT {
                bytes.extend_from_slice(EOT_TEXT.as_bytes());
            } else {
                bytes.push(t as u8);
            }
        }
        Ok(bytes)
    }
}
