//! `swax prepare`'s pipeline: text files, folders or stdin to train and validation shards and
//! `meta.json`.
//!
//! A document is a file, or a part of one between `<|endoftext|>` markers, trimmed of
//! surrounding whitespace; empty ones are skipped. The byte tokenizer keeps the input's bytes
//! exactly; GPT-2's and a tokenizer file's read them as UTF-8 (invalid sequences become
//! U+FFFD). A tokenizer file is copied into the dataset (`tokenizer.json`) and its hash recorded
//! in `meta.json`, so the dataset stands alone. Inputs are regular
//! files, read mapped, and streams (stdin, a FIFO such as a shell's `<(...)`), read whole into
//! memory up to a bound, so that an endless one ends in an error rather than filling memory; a
//! device or a socket is refused by name, and inputs that hold no text are an error rather than
//! an empty dataset. Each document goes whole to one split, so the splits never share text: a
//! document goes to validation when validation, with it, holds at most `val_fraction` of the
//! tokens so far. That needs no randomness, never puts more than the fraction into validation
//! (one large document among small ones stays in training instead of swelling validation), and
//! tracks the fraction closely where documents are small beside the whole; where they are not,
//! validation holds less, and `swax prepare` says how much. Every document is preceded by
//! the end-of-text token, as in llm.c's FineWeb shards. Documents are tokenized in parallel, in
//! batches, and written in input order, so the output does not depend on the thread count.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use memchr::memmem;
use memmap2::Mmap;
use rayon::prelude::*;

use crate::dataset::{dataset_files, Split};
use crate::error::{DataError, Result};
use crate::lock::FolderLock;
use crate::meta::{DatasetMeta, SplitCounts, META_FILE};
use crate::shard::{ShardFormat, ShardWriter};
use crate::tokenizer::{FileTokenizer, Tokenizer, TokenizerKind, EOT_TEXT};

/// The folder inside the output folder where a prepare writes before the swap.
const STAGING: &str = ".swax-staging";

/// The most bytes read from one stream when not told otherwise: a stream is held in memory.
pub const MAX_STREAM_BYTES: u64 = 8 << 30;

/// Text tokenized per parallel batch: large enough to keep both cores busy, small enough that
/// its tokens (4 bytes each) stay a modest amount of memory.
const BATCH_BYTES: usize = 8 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Stdin,
    Path(PathBuf),
}

impl From<&str> for Input {
    /// `-` is stdin, as on the command line.
    fn from(s: &str) -> Self {
        if s == "-" {
            Input::Stdin
        } else {
            Input::Path(PathBuf::from(s))
        }
    }
}

/// The tokenizer `swax prepare` encodes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareTokenizer {
    /// `bytes` or `gpt2`.
    Builtin(TokenizerKind),
    /// A Hugging Face `tokenizer.json`, with the token that separates documents (None: the
    /// first of `tokenizer::EOT_CANDIDATES` the file holds).
    File {
        path: PathBuf,
        eot_token: Option<String>,
    },
}

impl From<TokenizerKind> for PrepareTokenizer {
    fn from(kind: TokenizerKind) -> Self {
        PrepareTokenizer::Builtin(kind)
    }
}

impl PrepareTokenizer {
    /// `bytes`, `gpt2`, or else the path of a tokenizer file, which must exist.
    pub fn parse(name: &str, eot_token: Option<String>) -> Result<PrepareTokenizer> {
        match name.parse::<TokenizerKind>() {
            Ok(_) if eot_token.is_some() => Err(DataError::Config(format!(
                "--eot-token names a token of a tokenizer file; the {name} tokenizer's end of \
                 text is its own"
            ))),
            Ok(kind) => Ok(PrepareTokenizer::Builtin(kind)),
            Err(e) if !Path::new(name).is_file() => Err(e),
            Err(_) => Ok(PrepareTokenizer::File {
                path: name.into(),
                eot_token,
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PrepareConfig {
    pub out: PathBuf,
    pub tokenizer: PrepareTokenizer,
    /// Share of tokens for validation, in [0, 1).
    pub val_fraction: f64,
    /// Tokens per shard (the last shard of a split holds the rest).
    pub shard_tokens: usize,
    /// Replace existing shards and metadata in `out`.
    pub force: bool,
    /// The most bytes read from one stream (stdin, a FIFO); more is an error naming it.
    pub max_stream_bytes: u64,
}

/// One input as it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Stdin,
    /// A regular file, mapped.
    File(PathBuf),
    /// A FIFO named on the command line, read as stdin is.
    Stream(PathBuf),
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::Stdin => "- (stdin)".into(),
            Source::File(p) | Source::Stream(p) => p.display().to_string(),
        }
    }
}

/// The inputs with folders expanded into their files (recursively, sorted by name), leaving
/// out the output folder so that `swax prepare . --out shards` does not read its own shards.
#[derive(Debug, Clone)]
pub struct Plan {
    sources: Vec<Source>,
    /// `None` when stdin is among the inputs.
    total_bytes: Option<u64>,
}

impl Plan {
    pub fn new(inputs: &[Input], out: &Path) -> Result<Plan> {
        let out = out.canonicalize().ok();
        let mut sources = Vec::new();
        // Each file by its real path, with the name it was reached by: read twice, a file's
        // documents would land in both splits.
        let mut seen: HashMap<PathBuf, PathBuf> = HashMap::new();
        for input in inputs {
            let Input::Path(path) = input else {
                if sources.contains(&Source::Stdin) {
                    return Err(DataError::Input(
                        "- (stdin) is given twice; it can be read once".into(),
                    ));
                }
                sources.push(Source::Stdin);
                continue;
            };
            // Links are followed (a folder of links to texts reads the texts); a loop of them
            // is an error naming where it closes.
            let walk = walkdir::WalkDir::new(path)
                .follow_links(true)
                .sort_by_file_name();
            let not_out =
                |e: &walkdir::DirEntry| out.is_none() || e.path().canonicalize().ok() != out;
            for entry in walk.into_iter().filter_entry(not_out) {
                let entry = entry.map_err(|e| DataError::Io {
                    path: e.path().unwrap_or(path).to_owned(),
                    source: e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("a loop of symbolic links")),
                })?;
                let kind = entry.file_type();
                if kind.is_dir() {
                    continue;
                }
                if !kind.is_file() {
                    sources.push(stream(&entry, path)?);
                    continue;
                }
                let real = entry
                    .path()
                    .canonicalize()
                    .map_err(DataError::io(entry.path()))?;
                if let Some(first) = seen.insert(real, entry.path().to_owned()) {
                    return Err(DataError::Input(format!(
                        "{} and {} are the same file; give each input once",
                        first.display(),
                        entry.path().display()
                    )));
                }
                sources.push(Source::File(entry.into_path()));
            }
        }
        let mut total_bytes = Some(0);
        for source in &sources {
            total_bytes = match (total_bytes, source) {
                (Some(n), Source::File(p)) => {
                    Some(n + std::fs::metadata(p).map_err(DataError::io(p))?.len())
                }
                _ => None,
            };
        }
        Ok(Plan {
            sources,
            total_bytes,
        })
    }

    pub fn files(&self) -> usize {
        self.sources.len()
    }

    pub fn total_bytes(&self) -> Option<u64> {
        self.total_bytes
    }

    /// Writes the shards and `meta.json`; calls `progress` with each count of input bytes done.
    /// The new dataset is written into a folder inside `cfg.out` and replaces the old one (with
    /// `force`) only once complete, so a failure (a full disk, a bad input) leaves the old one
    /// whole; the output folder is locked meanwhile (`FolderLock`).
    pub fn run(&self, cfg: &PrepareConfig, progress: &mut dyn FnMut(u64)) -> Result<DatasetMeta> {
        if !(0.0..1.0).contains(&cfg.val_fraction) {
            return Err(DataError::Config(format!(
                "the validation fraction {} is not in [0, 1)",
                cfg.val_fraction
            )));
        }
        if cfg.shard_tokens == 0 || cfg.shard_tokens > i32::MAX as usize {
            return Err(DataError::Config(format!(
                "tokens per shard must be in 1..={}, not {}",
                i32::MAX,
                cfg.shard_tokens
            )));
        }
        let out = &cfg.out;
        if out.is_file() {
            return Err(DataError::Config(format!(
                "--out {}: a file; the output is a folder",
                out.display()
            )));
        }
        std::fs::create_dir_all(out).map_err(DataError::io(out))?;
        let _lock = FolderLock::acquire(out)?;
        let old = dataset_files(out)?;
        if !old.is_empty() && !cfg.force {
            return Err(DataError::ShardsExist {
                dir: out.to_owned(),
                count: old.len(),
            });
        }
        let staging = out.join(STAGING);
        // Left by a prepare that was killed; the lock says none is running.
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(DataError::io(&staging))?;
        }
        std::fs::create_dir(&staging).map_err(DataError::io(&staging))?;
        match self.write(cfg, &staging, progress) {
            Ok(meta) => {
                swap(out, &staging, old)?;
                Ok(meta)
            }
            Err(e) => {
                // Best effort: the error that matters is the write's.
                let _ = std::fs::remove_dir_all(&staging);
                Err(e)
            }
        }
    }

    /// Writes the dataset into the folder `dir`.
    fn write(
        &self,
        cfg: &PrepareConfig,
        dir: &Path,
        progress: &mut dyn FnMut(u64),
    ) -> Result<DatasetMeta> {
        let tok: Box<dyn Tokenizer> = match &cfg.tokenizer {
            PrepareTokenizer::Builtin(kind) => kind.build()?,
            PrepareTokenizer::File { path, eot_token } => {
                let file = FileTokenizer::load(path, eot_token.as_deref())?;
                file.copy_into(dir)?;
                Box::new(file)
            }
        };
        let format = ShardFormat::for_vocab(tok.vocab_size());
        let sink = |split| SplitWriter {
            dir: dir.to_owned(),
            split,
            format,
            shard_tokens: cfg.shard_tokens,
            writer: None,
            counts: SplitCounts::default(),
        };
        let (mut train, mut val) = (sink(Split::Train), sink(Split::Val));
        for source in &self.sources {
            let text = read_source(source, cfg.max_stream_bytes)?;
            let mut batch = Vec::new();
            let mut batch_bytes = 0;
            let mut done = 0;
            let mut flush = |batch: &mut Vec<&[u8]>, end: usize| -> Result<()> {
                let encoded = encode_batch(&*tok, batch);
                for tokens in encoded {
                    // The document and the end-of-text token before it.
                    let n = (tokens.len() + 1) as f64;
                    let total = (train.counts.tokens + val.counts.tokens) as f64;
                    let to_val = val.counts.tokens as f64 + n <= cfg.val_fraction * (total + n);
                    let split = if to_val { &mut val } else { &mut train };
                    split.push(&[tok.eot()])?;
                    split.push(&tokens)?;
                    split.counts.documents += 1;
                }
                batch.clear();
                progress((end - done) as u64);
                done = end;
                Ok(())
            };
            for (doc, end) in documents(&text) {
                batch.push(doc);
                batch_bytes += doc.len();
                if batch_bytes >= BATCH_BYTES {
                    flush(&mut batch, end)?;
                    batch_bytes = 0;
                }
            }
            flush(&mut batch, text.len())?;
        }
        if train.counts.documents + val.counts.documents == 0 {
            let names: Vec<String> = self.sources.iter().map(Source::name).collect();
            return Err(DataError::Input(format!(
                "no text in {}: every input is empty or whitespace, and an empty dataset is not \
                 written",
                match names.is_empty() {
                    true => "the inputs (their folders hold no file)".into(),
                    false => names.join(", "),
                }
            )));
        }
        let meta = DatasetMeta {
            tokenizer: tok.kind(),
            vocab_size: tok.vocab_size(),
            eot: tok.eot(),
            train: train.finish()?,
            val: val.finish()?,
        };
        meta.write(dir)?;
        Ok(meta)
    }
}

/// An input that is neither a folder nor a regular file: a FIFO named as an input is a stream;
/// anything else is refused by name, and so is a FIFO inside a folder (without a writer, reading
/// it would wait forever).
fn stream(entry: &walkdir::DirEntry, input: &Path) -> Result<Source> {
    let path = entry.path();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = entry.file_type();
        if kind.is_fifo() && entry.depth() == 0 {
            return Ok(Source::Stream(path.into()));
        }
        if kind.is_fifo() {
            return Err(DataError::Input(format!(
                "{}: a FIFO inside the folder {}; a folder's FIFOs are not read (without a \
                 writer, reading one waits forever): name it as an input to read it",
                path.display(),
                input.display()
            )));
        }
        let what = if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        Err(DataError::Input(format!(
            "{}: {what}, not text; prepare reads regular files, folders of them, FIFOs and - \
             (stdin)",
            path.display()
        )))
    }
    #[cfg(not(unix))]
    Err(DataError::Input(format!(
        "{} (in {}): not a regular file; prepare reads regular files, folders of them and - \
         (stdin)",
        path.display(),
        input.display()
    )))
}

/// Replaces the dataset files `old` of `out` with the complete dataset in `staging`, by
/// renames. The old `meta.json` goes first and the new one comes last, so that a crash between
/// the moves leaves a folder that `Dataset::open` refuses as unfinished, never a mixed dataset
/// that passes for whole.
fn swap(out: &Path, staging: &Path, mut old: Vec<PathBuf>) -> Result<()> {
    let is_meta = |p: &PathBuf| p.file_name() == Some(META_FILE.as_ref());
    old.sort_by_key(|p| !is_meta(p));
    for path in old {
        std::fs::remove_file(&path).map_err(DataError::io(&path))?;
    }
    let mut new = dataset_files(staging)?;
    new.sort_by_key(is_meta);
    for path in new {
        let to = out.join(path.file_name().expect("a dataset file has a name"));
        std::fs::rename(&path, &to).map_err(DataError::io(&to))?;
    }
    std::fs::remove_dir(staging).map_err(DataError::io(staging))
}

/// A file's bytes, mapped rather than read so that inputs larger than memory work; a stream is
/// read whole. Input files must not change while they are read.
enum Text {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Text {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Text::Mapped(map) => map,
            Text::Owned(bytes) => bytes,
        }
    }
}

fn read_source(source: &Source, max_stream_bytes: u64) -> Result<Text> {
    let path = match source {
        Source::Stdin => return read_stream(std::io::stdin(), source, max_stream_bytes),
        Source::Stream(path) => {
            let fifo = std::fs::File::open(path).map_err(DataError::io(path))?;
            return read_stream(fifo, source, max_stream_bytes);
        }
        Source::File(path) => path,
    };
    let file = std::fs::File::open(path).map_err(DataError::io(path))?;
    if file.metadata().map_err(DataError::io(path))?.len() == 0 {
        // Empty files cannot be mapped.
        return Ok(Text::Owned(Vec::new()));
    }
    // SAFETY: read-only mapping; inputs are documented not to change while read.
    let map = unsafe { Mmap::map(&file) }.map_err(DataError::io(path))?;
    Ok(Text::Mapped(map))
}

/// All of a stream, refused once it passes `max` bytes.
fn read_stream(stream: impl Read, source: &Source, max: u64) -> Result<Text> {
    let mut bytes = Vec::new();
    let name = source.name();
    stream
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(DataError::io(&name))?;
    if bytes.len() as u64 > max {
        return Err(DataError::Input(format!(
            "{name}: a stream of more than {max} bytes, the most read from one \
             (--max-stream-bytes); a stream is held in memory whole: raise the bound, or write \
             the text to a file"
        )));
    }
    Ok(Text::Owned(bytes))
}

/// Non-empty documents of `text` with the offset where each one's part of the input ends.
fn documents(text: &[u8]) -> impl Iterator<Item = (&[u8], usize)> {
    let ends = memmem::find_iter(text, EOT_TEXT.as_bytes()).chain([text.len()]);
    let mut start = 0;
    ends.map(move |end| {
        let doc = text[start..end].trim_ascii();
        start = (end + EOT_TEXT.len()).min(text.len());
        (doc, end)
    })
    .filter(|(doc, _)| !doc.is_empty())
}

fn encode_batch(tok: &dyn Tokenizer, batch: &[&[u8]]) -> Vec<Vec<u32>> {
    batch.par_iter().map(|doc| tok.encode_bytes(doc)).collect()
}

/// One split's shards: fills `shard_tokens` per file, then starts the next.
struct SplitWriter {
    dir: PathBuf,
    split: Split,
    format: ShardFormat,
    shard_tokens: usize,
    writer: Option<ShardWriter>,
    counts: SplitCounts,
}

impl SplitWriter {
    fn push(&mut self, mut tokens: &[u32]) -> Result<()> {
        while !tokens.is_empty() {
            let mut writer = match self.writer.take() {
                Some(w) => w,
                None => {
                    let name = self.split.shard_file(self.counts.shards as usize);
                    self.counts.shards += 1;
                    ShardWriter::create(self.dir.join(name), self.format)?
                }
            };
            let n = (self.shard_tokens - writer.len()).min(tokens.len());
            writer.push(&tokens[..n])?;
            self.counts.tokens += n as u64;
            tokens = &tokens[n..];
            if writer.len() == self.shard_tokens {
                writer.finish()?;
            } else {
                self.writer = Some(writer);
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<SplitCounts> {
        if let Some(writer) = self.writer.take() {
            writer.finish()?;
        }
        Ok(self.counts)
    }
}
