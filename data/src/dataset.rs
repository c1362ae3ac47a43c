//! A folder of shards: train and validation shards told apart by file name, plus the optional
//! `meta.json` and, for a dataset made with a tokenizer file, its copy `tokenizer.json`. Names follow llm.c (`fineweb_train_000001.bin`, `tiny_shakespeare_val.bin`): a
//! `.bin` file whose name has an `_`-separated part `train` or `val`.

use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};
use crate::meta::{DatasetMeta, META_FILE};
use crate::shard::Shard;
use crate::tokenizer::TOKENIZER_FILE;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Val,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }

    /// The split a shard file belongs to, from its name; `None` for files that are not shards.
    pub fn of_file(path: &Path) -> Option<Split> {
        if path.extension()? != "bin" {
            return None;
        }
        let stem = path.file_stem()?.to_str()?;
        [Split::Train, Split::Val]
            .into_iter()
            .find(|s| stem.split('_').any(|part| part == s.name()))
    }

    /// The name `swax prepare` gives the `index`-th shard of this split.
    pub fn shard_file(self, index: usize) -> String {
        format!("{}_{index:06}.bin", self.name())
    }
}

/// Files in `dir` that a prepared dataset owns (shards, metadata, the tokenizer file's copy),
/// sorted by name.
pub fn dataset_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(DataError::io(dir))? {
        let path = entry.map_err(DataError::io(dir))?.path();
        let name = path.file_name();
        if Split::of_file(&path).is_some()
            || name == Some(META_FILE.as_ref())
            || name == Some(TOKENIZER_FILE.as_ref())
        {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Whether `path` is named as `swax prepare` names shards (`train_000000.bin`).
fn is_prepared_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    [Split::Train, Split::Val].into_iter().any(|split| {
        name.strip_prefix(split.name())
            .and_then(|rest| rest.strip_prefix('_'))
            .and_then(|rest| rest.strip_suffix(".bin"))
            .is_some_and(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[derive(Debug)]
pub struct Dataset {
    /// Absent for shards made elsewhere (llm.c's FineWeb): then only the loader's per-token
    /// check against the model's vocabulary guards the ids.
    pub meta: Option<DatasetMeta>,
    pub train: Vec<Shard>,
    pub val: Vec<Shard>,
}

impl Dataset {
    /// Opens every shard in `dir`, checking each header, and with `meta.json` that the shards
    /// are those it lists; shards `swax prepare` named but without `meta.json` are refused as
    /// a prepare that did not finish.
    pub fn open(dir: impl AsRef<Path>) -> Result<Dataset> {
        let dir = dir.as_ref();
        let meta = DatasetMeta::read(dir)?;
        let (mut train, mut val) = (Vec::new(), Vec::new());
        for path in dataset_files(dir)? {
            match Split::of_file(&path) {
                Some(Split::Train) => train.push(Shard::open(&path)?),
                Some(Split::Val) => val.push(Shard::open(&path)?),
                None => {}
            }
        }
        if train.is_empty() && val.is_empty() {
            return Err(DataError::Config(format!(
                "{}: no shards (expected .bin files named like train_000000.bin)",
                dir.display()
            )));
        }
        let incomplete = |detail: String| {
            Err(DataError::Incomplete {
                dir: dir.to_owned(),
                detail,
            })
        };
        let Some(meta) = meta else {
            // `swax prepare` names its shards so and writes meta.json last: shards so named
            // without it are a prepare that did not finish (shards made elsewhere, such as
            // llm.c's fineweb_train_000001.bin, have other names and no meta.json).
            let prepared = train
                .iter()
                .chain(&val)
                .find(|s| is_prepared_name(s.name()));
            return match prepared {
                Some(s) => incomplete(format!(
                    "{} is named as swax prepare names shards, but there is no {META_FILE},                      which it writes last: the prepare did not finish; run it again",
                    s.name().display()
                )),
                None => Ok(Dataset {
                    meta: None,
                    train,
                    val,
                }),
            };
        };
        for (split, shards, counts) in [
            (Split::Train, &train, meta.train),
            (Split::Val, &val, meta.val),
        ] {
            let tokens: u64 = shards.iter().map(|s| s.len() as u64).sum();
            if (shards.len() as u64, tokens) != (counts.shards, counts.tokens) {
                return incomplete(format!(
                    "{META_FILE} lists {} {} shard(s) of {} tokens, the folder holds {} of {}:                      shards were lost or added since; run swax prepare again",
                    counts.shards,
                    split.name(),
                    counts.tokens,
                    shards.len(),
                    tokens
                ));
            }
        }
        Ok(Dataset {
            meta: Some(meta),
            train,
            val,
        })
    }

    /// Refuses a model whose vocabulary is smaller than the data's tokenizer's. Without
    /// metadata nothing is known up front; the loader still checks every token it reads.
    pub fn check_model_vocab(&self, model_vocab: u32) -> Result<()> {
        self.meta
            .as_ref()
            .map_or(Ok(()), |meta| meta.check_model_vocab(model_vocab))
    }
}
