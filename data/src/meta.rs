//! The metadata file written beside shards (`meta.json`): which tokenizer made them and how much
//! each split holds, so a model whose vocabulary does not fit the data is refused before training.
//! A tokenizer file is recorded by its hash, and its copy lies beside the shards
//! (`tokenizer::TOKENIZER_FILE`).

use std::io::Write;
use std::path::Path;

use crate::atomic;
use crate::error::{DataError, Result};
use crate::tokenizer::TokenizerKind;
use serde::{Deserialize, Serialize};

pub const META_FILE: &str = "meta.json";

/// What one split (train or validation) of a prepared dataset holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitCounts {
    pub documents: u64,
    pub tokens: u64,
    pub shards: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetMeta {
    pub tokenizer: TokenizerKind,
    pub vocab_size: u32,
    pub eot: u32,
    pub train: SplitCounts,
    pub val: SplitCounts,
}

impl DatasetMeta {
    pub fn read(dir: &Path) -> Result<Option<DatasetMeta>> {
        let path = dir.join(META_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(DataError::Io { path, source }),
        };
        let meta: DatasetMeta = serde_json::from_str(&text).map_err(|source| DataError::Meta {
            path: path.clone(),
            source,
        })?;
        // The tokenizer decides what the ids mean: a vocabulary or end of text other than its
        // own would size the model for the one and decode with the other. A tokenizer file is
        // opened from its copy here, refused if it is not the one recorded.
        let tok = meta.tokenizer.open(dir)?;
        if (meta.vocab_size, meta.eot) != (tok.vocab_size(), tok.eot()) {
            return Err(DataError::MetaMismatch {
                path,
                detail: format!(
                    "vocab_size {} and eot {} do not match the {} tokenizer it names \
                     (vocab_size {}, eot {}); prepare the data again",
                    meta.vocab_size,
                    meta.eot,
                    meta.tokenizer,
                    tok.vocab_size(),
                    tok.eot()
                ),
            });
        }
        Ok(Some(meta))
    }

    /// Written atomically, like shards, and last, so its presence means the shards are complete.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(META_FILE);
        let json = serde_json::to_string_pretty(self).map_err(|source| DataError::Meta {
            path: path.clone(),
            source,
        })?;
        let mut tmp = atomic::temp_beside(&path)?;
        tmp.write_all(json.as_bytes())
            .map_err(DataError::io(&path))?;
        atomic::persist(tmp, &path)
    }

    /// A model with `model_vocab` output classes must cover every id the tokenizer can produce.
    pub fn check_model_vocab(&self, model_vocab: u32) -> Result<()> {
        if self.vocab_size > model_vocab {
            return Err(DataError::VocabMismatch {
                tokenizer: self.tokenizer.to_string(),
                needed: self.vocab_size,
                model: model_vocab,
            });
        }
        Ok(())
    }
}
