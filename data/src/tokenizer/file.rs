//! Any tokenizer: a Hugging Face `tokenizer.json` read by the `tokenizers` crate (Hugging Face's
//! own Rust library), so that ids are what `AutoTokenizer` gives for the same file.
//!
//! What the ids mean is the file, so what it made records the file's SHA-256 and keeps a copy
//! beside it, named [`TOKENIZER_FILE`]: a dataset folder, and the run folder trained on it. The
//! copy is what is read afterwards, checked against the recorded hash, so a dataset or a run
//! stands alone and a changed file is refused rather than silently decoding other words.
//!
//! The vocabulary size is the largest id of the file (model and added tokens) plus one. The
//! end-of-text token that separates documents is named (`--eot-token`) or the first of
//! [`EOT_CANDIDATES`] the file holds. Truncation and padding written in the file are turned
//! off: a document is encoded whole, and no special tokens are added around it (swax puts the
//! end of text before each document itself).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{check_ids, Tokenizer, TokenizerKind};
use crate::atomic;
use crate::error::{DataError, Result};

/// The name of the copy kept in a dataset or run folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// End-of-text tokens looked for, in this order, when none is named: GPT-2's and most BPEs',
/// Llama 3's, SentencePiece's (Llama 2, T5, Mistral) and Gemma's.
pub const EOT_CANDIDATES: [&str; 4] = ["<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"];

/// Text with characters few vocabularies hold: a file that encodes it encodes any text, since
/// the only failure of the `tokenizers` models on input is a missing unknown token.
const PROBE: &str = "swax \u{1F980} \u{10FFFD} \u{4E2D}";

/// What a dataset or run records of its tokenizer file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerFile {
    /// The file's SHA-256, in lowercase hex.
    pub sha256: String,
    /// The token that separates documents, as text.
    pub eot_token: String,
}

/// A `tokenizer.json` loaded and checked (see the module's doc).
pub struct FileTokenizer {
    inner: tokenizers::Tokenizer,
    record: TokenizerFile,
    bytes: Vec<u8>,
    path: PathBuf,
    vocab: u32,
    eot: u32,
}

impl std::fmt::Debug for FileTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FileTokenizer({}, {:?})",
            self.path.display(),
            self.record
        )
    }
}

/// The SHA-256 of `bytes`, in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl FileTokenizer {
    /// Reads the tokenizer file `path`, with `eot_token` as the end of text (None: the first
    /// of [`EOT_CANDIDATES`] it holds).
    pub fn load(path: &Path, eot_token: Option<&str>) -> Result<FileTokenizer> {
        let bytes = std::fs::read(path).map_err(DataError::io(path))?;
        Self::from_bytes(path, bytes, eot_token)
    }

    /// The copy [`TOKENIZER_FILE`] in `dir` (a dataset or run folder), refused unless its hash
    /// is the one `record` holds.
    pub fn open(dir: &Path, record: &TokenizerFile) -> Result<FileTokenizer> {
        let path = dir.join(TOKENIZER_FILE);
        let bytes = std::fs::read(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => DataError::TokenizerFile {
                path: path.clone(),
                detail: format!(
                    "missing: {} was made with the tokenizer file of sha256 {} and keeps a copy \
                     under this name; put that file back here",
                    dir.display(),
                    record.sha256
                ),
            },
            _ => DataError::Io {
                path: path.clone(),
                source,
            },
        })?;
        let found = sha256_hex(&bytes);
        if found != record.sha256 {
            return Err(DataError::TokenizerHash {
                path,
                found,
                recorded: record.sha256.clone(),
            });
        }
        Self::from_bytes(&path, bytes, Some(&record.eot_token))
    }

    fn from_bytes(path: &Path, bytes: Vec<u8>, eot_token: Option<&str>) -> Result<FileTokenizer> {
        let bad = |detail: String| DataError::TokenizerFile {
            path: path.to_owned(),
            detail,
        };
        let mut inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
            bad(format!(
                "not a tokenizer.json the tokenizers library reads: {e}"
            ))
        })?;
        inner
            .with_truncation(None)
            .map_err(|e| bad(format!("cannot turn its truncation off: {e}")))?;
        inner.with_padding(None);
        let vocab = inner
            .get_vocab(true)
            .values()
            .max()
            .map(|&id| id + 1)
            .ok_or_else(|| bad("its vocabulary is empty".into()))?;
        let eot_token = match eot_token {
            Some(token) => match inner.token_to_id(token) {
                Some(_) => token.to_owned(),
                None => {
                    return Err(bad(format!(
                        "the end-of-text token {token:?} is not in its vocabulary"
                    )))
                }
            },
            None => EOT_CANDIDATES
                .into_iter()
                .find(|t| inner.token_to_id(t).is_some())
                .ok_or_else(|| {
                    bad(format!(
                        "none of the end-of-text tokens looked for ({}) is in its vocabulary; \
                         name the token that separates documents with --eot-token",
                        EOT_CANDIDATES.join(", ")
                    ))
                })?
                .to_owned(),
        };
        let eot = inner.token_to_id(&eot_token).expect("found above");
        if let Err(e) = inner.encode_fast(PROBE, false) {
            return Err(bad(format!(
                "cannot encode text it has no token for ({e}): its model needs an unknown token"
            )));
        }
        Ok(FileTokenizer {
            inner,
            record: TokenizerFile {
                sha256: sha256_hex(&bytes),
                eot_token,
            },
            bytes,
            path: path.to_owned(),
            vocab,
            eot,
        })
    }

    /// What a dataset or run records of this file.
    pub fn record(&self) -> &TokenizerFile {
        &self.record
    }

    /// The file's bytes, as read and checked.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Writes the file, byte for byte, as [`TOKENIZER_FILE`] in `dir` (atomically).
    pub fn copy_into(&self, dir: &Path) -> Result<PathBuf> {
        use std::io::Write;
        let to = dir.join(TOKENIZER_FILE);
        let mut tmp = atomic::temp_beside(&to)?;
        tmp.write_all(&self.bytes).map_err(DataError::io(&to))?;
        atomic::persist(tmp, &to)?;
        Ok(to)
    }
}

impl Tokenizer for FileTokenizer {
    fn kind(&self) -> TokenizerKind {
        TokenizerKind::File(self.record.clone())
    }

    fn vocab_size(&self) -> u32 {
        self.vocab
    }

    fn eot(&self) -> u32 {
        self.eot
    }

    /// Special tokens in the text (the file's added tokens) are read as those tokens, as
    /// `AutoTokenizer` reads them.
    fn encode(&self, text: &str) -> Vec<u32> {
        // The probe at load time was encoded: the models fail on input only without an unknown
        // token, which any text the probe's characters stand for would have needed.
        self.inner
            .encode_fast(text, false)
            .unwrap_or_else(|e| panic!("{}: encoding failed: {e}", self.path.display()))
            .get_ids()
            .to_vec()
    }

    /// The file's decoder's text, special tokens included; a token that is part of a character
    /// reads as U+FFFD here, since the library decodes to text.
    fn decode_bytes(&self, tokens: &[u32]) -> Result<Vec<u8>> {
        check_ids(tokens, self.vocab)?;
        let text = self
            .inner
            .decode(tokens, false)
            .map_err(|e| DataError::TokenizerFile {
                path: self.path.clone(),
                detail: format!("cannot decode {tokens:?}: {e}"),
            })?;
        Ok(text.into_bytes())
    }
}
