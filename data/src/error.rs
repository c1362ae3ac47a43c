//! The crate's error type: every failure on user input (files, configs, token ids) is one of these.

use std::path::PathBuf;

/// Everything that can go wrong reading, writing or generating data.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A shard whose header or size does not match llm.c's format.
    #[error("{}: bad shard field `{field}` at byte {offset}: {detail}", path.display())]
    BadShard {
        path: PathBuf,
        field: &'static str,
        offset: u64,
        detail: String,
    },
    /// `location` says where the token sits: a file and byte offset, or an index.
    #[error("token {token} at {location} is outside the vocabulary of {vocab}")]
    OutOfVocab {
        location: String,
        token: u32,
        vocab: u32,
    },
    #[error(
        "the data's tokenizer `{tokenizer}` needs a vocabulary of {needed}, the model has {model}"
    )]
    VocabMismatch {
        tokenizer: String,
        needed: u32,
        model: u32,
    },
    #[error(
        "unknown tokenizer `{0}` (expected `bytes`, `gpt2` or the path of a tokenizer.json \
         file, and there is no file at that path)"
    )]
    UnknownTokenizer(String),
    #[error("tokenizer `{name}` failed to load: {detail}")]
    TokenizerInit { name: &'static str, detail: String },
    /// A tokenizer file that cannot be used as one (see `tokenizer::FileTokenizer`).
    #[error("tokenizer file {}: {detail}", path.display())]
    TokenizerFile { path: PathBuf, detail: String },
    /// A tokenizer file other than the one a dataset or run recorded.
    #[error(
        "tokenizer file {}: its sha256 is {found}, but {recorded} was recorded when the data was \
         made: it is not the file the ids were made with; put that file back, or prepare the \
         data again with this one",
        path.display()
    )]
    TokenizerHash {
        path: PathBuf,
        found: String,
        recorded: String,
    },
    #[error("{}: bad metadata: {source}", path.display())]
    Meta {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A `meta.json` that disagrees with itself (a tokenizer and another vocabulary).
    #[error("{}: {detail}", path.display())]
    MetaMismatch { path: PathBuf, detail: String },
    #[error("{}: holds {count} shard or metadata file(s) already; pass --force to overwrite", dir.display())]
    ShardsExist { dir: PathBuf, count: usize },
    /// Inputs that cannot be read as given (the same file twice, stdin twice).
    #[error("{0}")]
    Input(String),
    /// A folder of shards that a `swax prepare` did not finish, or that lost or gained files
    /// since.
    #[error("{}: an incomplete dataset: {detail}", dir.display())]
    Incomplete { dir: PathBuf, detail: String },
    /// Another process holds the folder's lock (see `lock`).
    #[error("{} is in use by another swax process{holder}; wait for it to finish, or use another folder", dir.display())]
    Busy { dir: PathBuf, holder: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A checkpointed loader state that does not belong to this loader's data or settings.
    #[error("loader state does not match: {field} is {found} in the state, {expected} here")]
    StateMismatch {
        field: &'static str,
        expected: u64,
        found: u64,
    },
}

impl DataError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DataError {
        let path = path.into();
        move |source| DataError::Io { path, source }
    }
}

pub type Result<T, E = DataError> = std::result::Result<T, E>;
