//! GPT-2's byte-level BPE (tiktoken's `r50k_base`), vocabulary 50257, end of text 50256. The
//! ranks are embedded in `tiktoken-rs` at compile time, so it works offline.

use tiktoken_rs::CoreBPE;

use super::{check_ids, Tokenizer, TokenizerKind};
use crate::error::{DataError, Result};

pub const GPT2_EOT: u32 = 50256;

pub struct Gpt2Tokenizer {
    bpe: CoreBPE,
}

impl std::fmt::Debug for Gpt2Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gpt2Tokenizer")
    }
}

impl Gpt2Tokenizer {
    /// Parses the embedded ranks (tens of milliseconds): build once and share.
    pub fn new() -> Result<Self> {
        let bpe = tiktoken_rs::r50k_base().map_err(|e| DataError::TokenizerInit {
            name: "gpt2",
            detail: e.to_string(),
        })?;
        Ok(Gpt2Tokenizer { bpe })
    }
}

impl Tokenizer for Gpt2Tokenizer {
    fn kind(&self) -> TokenizerKind {
        TokenizerKind::Gpt2
    }

    fn vocab_size(&self) -> u32 {
        GPT2_EOT + 1
    }

    fn eot(&self) -> u32 {
        GPT2_EOT
    }

    /// `<|endoftext|>` inside the text is encoded as ordinary text, as llm.c's FineWeb script
    /// does: only the separators we insert are end-of-text tokens.
    fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    fn decode_bytes(&self, tokens: &[u32]) -> Result<Vec<u8>> {
        check_ids(tokens, self.vocab_size())?;
        self.bpe
            .decode_bytes(tokens)
            .map_err(|e| DataError::OutOfVocab {
                location: format!(
                    "index {}",
                    tokens.iter().position(|&t| t == e.token).unwrap_or(0)
                ),
                token: e.token,
                vocab: self.vocab_size(),
            })
    }
}
