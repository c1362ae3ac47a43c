//! Token shards, tokenizers, loaders, the default corpus and long-context tasks.
//!
//! - [`shard`]: llm.c's shard format, read through a memory map, written atomically.
//! - [`dataset`] and [`meta`]: a folder of train/validation shards and the `meta.json` naming
//!   the tokenizer that made them.
//! - [`loader`]: seeded, resumable, rank-split batches of B sequences of T + 1 tokens.
//! - [`tokenizer`]: bytes (the default), GPT-2 BPE (offline), and any Hugging Face
//!   `tokenizer.json`.
//! - [`prepare`]: text to shards, behind `swax prepare`.
//! - [`lock`]: one writer per run or dataset folder.
//! - [`corpus`]: the generated default corpus whose prediction needs long-range recall.
//! - [`tasks`]: needle-in-a-haystack, passkey and MQAR samples at exact lengths.
//! - [`recall`]: generated recall-training rows (MQAR, pass keys, a mix of facts) and their loader.

mod atomic;
pub mod corpus;
pub mod dataset;
pub mod error;
pub mod loader;
pub mod lock;
pub mod meta;
pub mod prepare;
pub mod recall;
pub mod rng;
pub mod sample;
pub mod shard;
pub mod tasks;
pub mod tokenizer;

pub use corpus::{Corpus, CorpusConfig, Document, FactMix};
pub use dataset::{Dataset, Split};
pub use error::{DataError, Result};
pub use loader::{Batch, Loader, LoaderConfig, LoaderState, IGNORE};
pub use lock::FolderLock;
pub use meta::{DatasetMeta, SplitCounts};
pub use recall::{RecallConfig, RecallData, RecallKind, Row, RowLoader};
pub use rng::Rng;
pub use sample::{Answer, TaskSample};
pub use shard::{write_shard, Shard, ShardFormat, ShardWriter};
pub use tasks::mqar::{mqar, MqarConfig};
pub use tasks::niah::{niah, NiahConfig, NiahKind};
pub use tasks::passkey::{passkey, PasskeyConfig};
pub use tokenizer::{Tokenizer, TokenizerKind};
