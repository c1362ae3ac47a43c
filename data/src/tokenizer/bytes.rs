//! The byte tokenizer: a token is a byte, vocabulary 256, no files needed.
//!
//! The end-of-text separator is byte 0 (NUL). A 256 vocabulary has no spare id, and NUL never
//! occurs in text, so it is reserved: encoding drops NUL bytes from the input, which keeps
//! document boundaries unambiguous at the cost of NULs in binary-ish input.

use super::{check_ids, Tokenizer, TokenizerKind, EOT_TEXT};
use crate::error::Result;

pub const BYTES_EOT: u32 = 0;

#[derive(Debug, Clone, Copy, Default)]
pub struct BytesTokenizer;

impl Tokenizer for BytesTokenizer {
    fn kind(&self) -> TokenizerKind {
        TokenizerKind::Bytes
    }

    fn vocab_size(&self) -> u32 {
        TokenizerKind::Bytes.vocab_size()
    }

    fn eot(&self) -> u32 {
        TokenizerKind::Bytes.eot()
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes()
            .filter(|&b| u32::from(b) != BYTES_EOT)
            .map(u32::from)
            .collect()
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
