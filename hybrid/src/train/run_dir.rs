//! The run folder as `train` keeps it, so that nothing in it is lost or silently wrong:
//!
//! - Nothing in it changes before the run is known to be able to start. [`RunDir::open`] only
//!   reads (and clears leftovers, below); [`RunDir::commit`], called once the config, the data,
//!   the model and the checkpoint to resume are all checked and loaded, creates a new folder and
//!   writes `config.toml`.
//! - It holds nothing but the run: a new or empty folder or a run swax made, never a folder of
//!   the user's or one inside another run (`claim`), checked before anything else.
//! - One process at a time writes into it: an existing folder is locked at `open`, a new one at
//!   `commit` (`swax_data::FolderLock`), until the trainer returns.
//! - What a killed process left half-written (temporary files, incomplete checkpoint folders) is
//!   cleared at the next start, under the lock (`checkpoint::clear_leftovers`).
//! - A `--resume` continues the run it names: the config may change only where the weights and
//!   the loader's saved position keep their meaning (not the [`FIXED`] keys), each change is
//!   recorded in `metrics.jsonl`, and the data must be what the checkpoint recorded unless the
//!   caller allows a change ([`open_data`]).
//! - A dataset made with a tokenizer file brings it: `commit` copies it into the run folder
//!   (`tokenizer.json`, its hash in `config.toml`), so that eval, generate and export of the
//!   run need no dataset; a resumed run's copy must be the file recorded.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use swax_data::tokenizer::{FileTokenizer, TOKENIZER_FILE};
use swax_data::{DataError, DatasetMeta, FolderLock, TokenizerKind};

use super::checkpoint::{self, State};
use super::claim;
use super::data::{self, Data};
use super::metrics::Metrics;
use super::Result;
use crate::config::Config;

/// Config keys a resumed run cannot change: what the weights mean (the model's shapes, its
/// position encoding, its normalization, its tokens) and what the loader's saved position is a
/// position in (the sequence length, the generated corpus, the seed).
const FIXED: &[&str] = &[
    "model.pattern",
    "model.n_layers",
    "model.d_model",
    "model.n_heads",
    "model.n_kv_heads",
    "model.d_ff",
    "model.vocab_size",
    "model.rope_theta",
    "model.norm_eps",
    "data.tokenizer",
    "data.seq_len",
    "data.corpus_train_tokens",
    "data.corpus_max_doc_tokens",
    "train.seed",
];

/// A run folder being trained into (see the module's comment).
pub struct RunDir {
    path: PathBuf,
    /// Held from `open` (an existing folder) or `commit` (a new one) to the end.
    lock: Option<FolderLock>,
    resume: bool,
    /// On `--resume`, each changed key with its value in the checkpoint's config and now.
    changes: Vec<(String, toml::Value, toml::Value)>,
}

impl RunDir {
    /// Checks that `path` can take this run: nothing, an empty folder or a run, outside every
    /// other run (`claim`); for a new run no other run in it, for `resume` a checkpoint to resume. Locks an existing folder and clears
    /// what a killed process left in it.
    pub fn open(path: &Path, resume: bool) -> Result<RunDir> {
        let mut dir = RunDir {
            path: path.to_path_buf(),
            lock: None,
            resume,
            changes: Vec::new(),
        };
        match std::fs::metadata(path) {
            Ok(m) if !m.is_dir() => {
                return Err(format!(
                    "--out {}: a file; a run folder is a new folder or a run's",
                    path.display()
                )
                .into())
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !resume => {
                claim::check(path)?;
                return Ok(dir);
            }
            Err(e) => return Err(format!("{}: {e}", path.display()).into()),
        }
        claim::check(path)?;
        dir.lock = Some(FolderLock::acquire(path)?);
        let removed = checkpoint::clear_leftovers(path)?;
        if !removed.is_empty() {
            let names: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "removed what an interrupted write left: {}",
                names.join(", ")
            );
        }
        match resume {
            true => {
                checkpoint::latest_dir(path)?.ok_or_else(|| {
                    format!(
                        "{}: no checkpoint to resume from (no checkpoints/latest)",
                        path.display()
                    )
                })?;
            }
            false => dir.refuse_a_run()?,
        }
        Ok(dir)
    }

    /// The folder as a rank other than 0 sees it: read, never locked or written (rank 0
    /// checks and keeps it); on `resume`, it must hold a checkpoint.
    pub fn follow(path: &Path, resume: bool) -> Result<RunDir> {
        if resume && checkpoint::latest_dir(path)?.is_none() {
            return Err(format!(
                "{}: no checkpoint to resume from (do the ranks share the run folder?)",
                path.display()
            )
            .into());
        }
        Ok(RunDir {
            path: path.to_path_buf(),
            lock: None,
            resume,
            changes: Vec::new(),
        })
    }

    /// A new run may not start in a folder that holds one.
    fn refuse_a_run(&self) -> Result<()> {
        let run = self.path.display();
        if checkpoint::latest_dir(&self.path)?.is_some() {
            return Err(format!(
                "{run} already holds a run: pass --resume to continue it, or another --out"
            )
            .into());
        }
        let whole = checkpoint::complete(&self.path)?;
        if let Some(first) = whole.first() {
            return Err(format!(
                "{run} holds {} checkpoint(s) ({} ...) but no checkpoints/latest naming one: \
                 write the name of the one to resume from into {run}/checkpoints/latest and \
                 pass --resume, or use another --out",
                whole.len(),
                first.display()
            )
            .into());
        }
        Ok(())
    }

    /// The config the run records: `cfg` with the tokenizer of the data's `meta.json` (what
    /// made the tokens decides what they mean); on `--resume`, checked against the config the
    /// checkpoint was trained with, refusing a change to a [`FIXED`] key and keeping the others
    /// for [`RunDir::record_changes`].
    pub fn settle(&mut self, cfg: &Config) -> Result<Config> {
        let mut cfg = cfg.clone();
        let data = data::shards_dir(&cfg.data.source)?;
        if let Some(kind) = dataset_tokenizer(data.as_deref())? {
            if kind != cfg.data.tokenizer {
                eprintln!(
                    "data.tokenizer is {kind}, as {} says (the config said {})",
                    data.expect("a dataset folder").join("meta.json").display(),
                    cfg.data.tokenizer
                );
                cfg.data.tokenizer = kind;
            }
        }
        if !self.resume {
            return Ok(cfg);
        }
        let latest = checkpoint::latest_dir(&self.path)?.expect("open checked the checkpoint");
        let old = checkpoint::config_of(&latest)?;
        let changes = differences(&old, &cfg);
        let fixed: Vec<String> = changes
            .iter()
            .filter(|(key, _, _)| FIXED.contains(&key.as_str()))
            .map(|(key, was, now)| format!("{key} ({was} -> {now})"))
            .collect();
        if !fixed.is_empty() {
            return Err(format!(
                "--resume cannot change {}: {} was trained with the first value, and these keys \
                 define the model and the data it trains on ({}); start a new run with another \
                 --out",
                fixed.join(", "),
                latest.display(),
                FIXED.join(", ")
            )
            .into());
        }
        self.changes = changes;
        Ok(cfg)
    }

    /// Creates and locks the folder if it is new (refusing a run that appeared in it since
    /// `open`), keeps a copy of a tokenizer file, and writes `config.toml`: the first changes
    /// the run makes.
    pub fn commit(&mut self, cfg: &Config) -> Result<()> {
        if self.lock.is_none() {
            std::fs::create_dir_all(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            self.lock = Some(FolderLock::acquire(&self.path)?);
            self.refuse_a_run()?;
        }
        self.keep_tokenizer(cfg)?;
        swax_nn::checkpoint::write_atomic(
            &self.path.join("config.toml"),
            cfg.to_toml().as_bytes(),
        )?;
        Ok(())
    }

    /// A tokenizer file's copy in the run folder: a resumed run's must be the file recorded
    /// (the config's hash, which `settle` held to the checkpoint's); a new run takes the
    /// dataset's, which opening the data checked against its `meta.json`.
    fn keep_tokenizer(&self, cfg: &Config) -> Result<()> {
        let TokenizerKind::File(record) = &cfg.data.tokenizer else {
            return Ok(());
        };
        if self.resume && self.path.join(TOKENIZER_FILE).exists() {
            FileTokenizer::open(&self.path, record)?;
            return Ok(());
        }
        let data = data::shards_dir(&cfg.data.source)?
            .ok_or("a tokenizer file comes with a dataset folder, and data.source names none")?;
        FileTokenizer::open(&data, record)?.copy_into(&self.path)?;
        Ok(())
    }

    /// Logs the config changes of a `--resume` (at the step it resumes from) and says them.
    pub fn record_changes(&self, metrics: &mut Metrics, step: u64) -> Result<()> {
        if self.changes.is_empty() {
            return Ok(());
        }
        let mut changed = serde_json::Map::new();
        for (key, was, now) in &self.changes {
            eprintln!("resuming with {key} = {now} (was {was})");
            changed.insert(key.clone(), json!({"from": was, "to": now}));
        }
        metrics.log(json!({"step": step, "config_changed": Value::Object(changed)}))?;
        Ok(())
    }
}

/// Each key whose value differs between two configs, with both values.
fn differences(old: &Config, new: &Config) -> Vec<(String, toml::Value, toml::Value)> {
    let flat = |cfg: &Config| -> BTreeMap<String, toml::Value> {
        let table = toml::Table::try_from(cfg).expect("a config is a table");
        table
            .into_iter()
            .flat_map(|(section, fields)| match fields {
                toml::Value::Table(fields) => fields
                    .into_iter()
                    .map(|(field, v)| (format!("{section}.{field}"), v))
                    .collect::<Vec<_>>(),
                other => vec![(section, other)],
            })
            .collect()
    };
    let (old, new) = (flat(old), flat(new));
    new.into_iter()
        .filter_map(|(key, now)| {
            let was = old.get(&key)?;
            (*was != now).then(|| (key, was.clone(), now))
        })
        .collect()
}

/// The tokenizer a dataset folder's `meta.json` names, if there is one.
pub fn dataset_tokenizer(dir: Option<&Path>) -> Result<Option<TokenizerKind>> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    Ok(DatasetMeta::read(dir)?.map(|meta| meta.tokenizer))
}

/// The run's data, its training loader where `resumed` left it. Data other than the checkpoint
/// recorded (another fingerprint, or another size, which the loader refuses) is an error unless
/// `allow_change`, when the loader starts the new data from its beginning.
pub fn open_data(
    cfg: &Config,
    resumed: Option<&State>,
    allow_change: bool,
    part: data::Part,
) -> Result<Data> {
    let Some(state) = resumed else {
        return data::open(cfg, None, part);
    };
    let changed = |why: String| -> Result<Data> {
        if !allow_change {
            return Err(format!(
                "the data is not what the run was trained on: {why}; pass --allow-data-change \
                 to go on with it (from its start)"
            )
            .into());
        }
        eprintln!("the data changed ({why}): going on with it from its start");
        data::open(cfg, None, part)
    };
    match data::open(cfg, Some(state.loader), part) {
        Ok(data) => match &state.data {
            Some(was) if was.fingerprint != data.train.fingerprint() => changed(format!(
                "{} (fingerprint {}) then, {} (fingerprint {}) now",
                was.origin,
                was.fingerprint,
                data.origin,
                data.train.fingerprint()
            )),
            _ => Ok(data),
        },
        Err(e) => match e.downcast_ref::<DataError>() {
            Some(DataError::StateMismatch { .. }) => changed(e.to_string()),
            _ => Err(e),
        },
    }
}
