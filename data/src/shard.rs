//! Token shards in llm.c's format: a header of 256 little-endian int32 (magic, version, token
//! count, then zeros) followed by the tokens as u16 (magic 20240520, version 1) or u32 (magic
//! 20240801, version 7). FineWeb shards made for llm.c and modded-nanogpt load unchanged.
//!
//! Reading maps the file (`memmap2`) and checks every header field and the file size up front;
//! writing streams into a temporary file in the target folder and renames it into place, so a
//! crash never leaves a half-written shard under its final name.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use byteorder::{ByteOrder, LittleEndian, WriteBytesExt};
use memmap2::Mmap;
use tempfile::NamedTempFile;

use crate::atomic;
use crate::error::{DataError, Result};

/// Header length in int32 words, as llm.c writes it.
pub const HEADER_WORDS: usize = 256;
pub const HEADER_BYTES: usize = HEADER_WORDS * 4;

/// How tokens are stored after the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardFormat {
    /// magic 20240520, version 1: vocabularies up to 65536 (GPT-2, bytes).
    U16,
    /// magic 20240801, version 7: larger vocabularies.
    U32,
}

impl ShardFormat {
    pub const fn magic(self) -> i32 {
        match self {
            ShardFormat::U16 => 20240520,
            ShardFormat::U32 => 20240801,
        }
    }

    pub const fn version(self) -> i32 {
        match self {
            ShardFormat::U16 => 1,
            ShardFormat::U32 => 7,
        }
    }

    pub const fn token_bytes(self) -> usize {
        match self {
            ShardFormat::U16 => 2,
            ShardFormat::U32 => 4,
        }
    }

    /// The narrowest format that holds every id of a vocabulary of `vocab_size`.
    pub fn for_vocab(vocab_size: u32) -> Self {
        if vocab_size <= 1 << 16 {
            ShardFormat::U16
        } else {
            ShardFormat::U32
        }
    }

    fn from_magic(magic: i32) -> Option<Self> {
        [ShardFormat::U16, ShardFormat::U32]
            .into_iter()
            .find(|f| f.magic() == magic)
    }

    fn max_token(self) -> u32 {
        match self {
            ShardFormat::U16 => u32::from(u16::MAX),
            ShardFormat::U32 => u32::MAX,
        }
    }
}

/// Checks a header against the file's length; returns the format and token count.
fn parse_header(path: &Path, bytes: &[u8], file_len: u64) -> Result<(ShardFormat, usize)> {
    let bad = |field, offset: u64, detail: String| DataError::BadShard {
        path: path.to_owned(),
        field,
        offset,
        detail,
    };
    if bytes.len() < HEADER_BYTES {
        return Err(bad(
            "header",
            bytes.len() as u64,
            format!(
                "file ends after {} bytes, the header needs {HEADER_BYTES}",
                bytes.len()
            ),
        ));
    }
    let mut header = [0i32; HEADER_WORDS];
    LittleEndian::read_i32_into(&bytes[..HEADER_BYTES], &mut header);
    let format = ShardFormat::from_magic(header[0]).ok_or_else(|| {
        bad(
            "magic",
            0,
            format!("{} is neither 20240520 (u16) nor 20240801 (u32)", header[0]),
        )
    })?;
    if header[1] != format.version() {
        return Err(bad(
            "version",
            4,
            format!(
                "{} where magic {} needs {}",
                header[1],
                header[0],
                format.version()
            ),
        ));
    }
    let count = usize::try_from(header[2])
        .map_err(|_| bad("token_count", 8, format!("{} is negative", header[2])))?;
    if let Some(i) = (3..HEADER_WORDS).find(|&i| header[i] != 0) {
        return Err(bad(
            "reserved",
            4 * i as u64,
            format!("header word {i} is {}, llm.c writes 0", header[i]),
        ));
    }
    let expected = HEADER_BYTES as u64 + count as u64 * format.token_bytes() as u64;
    if file_len != expected {
        let what = if file_len < expected {
            "truncated"
        } else {
            "trailing bytes"
        };
        return Err(bad(
            "file_size",
            file_len.min(expected),
            format!("{what}: {count} tokens need {expected} bytes, the file has {file_len}"),
        ));
    }
    Ok((format, count))
}

enum Storage {
    Mapped {
        map: Mmap,
        format: ShardFormat,
    },
    /// Tokens generated in memory (the embedded corpus), read through the same interface.
    Memory(Vec<u32>),
}

/// A read-only sequence of tokens: a mapped shard file or an in-memory token stream.
pub struct Shard {
    name: PathBuf,
    len: usize,
    storage: Storage,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("name", &self.name)
            .field("len", &self.len)
            .finish()
    }
}

impl Shard {
    /// Maps and validates a shard file. The file must not be modified while it is open: the
    /// tokens are read straight from the mapping.
    pub fn open(path: impl AsRef<Path>) -> Result<Shard> {
        let path = path.as_ref();
        let file = File::open(path).map_err(DataError::io(path))?;
        let file_len = file.metadata().map_err(DataError::io(path))?.len();
        if file_len < HEADER_BYTES as u64 {
            // Too short to map usefully (and empty files cannot be mapped at all).
            let bytes = std::fs::read(path).map_err(DataError::io(path))?;
            parse_header(path, &bytes, file_len)?;
        }
        // SAFETY: the mapping is read-only and we document that shards must not change while
        // open; every access below is bounds-checked against the validated length.
        let map = unsafe { Mmap::map(&file) }.map_err(DataError::io(path))?;
        let (format, len) = parse_header(path, &map, file_len)?;
        Ok(Shard {
            name: path.to_owned(),
            len,
            storage: Storage::Mapped { map, format },
        })
    }

    /// Wraps tokens held in memory; `name` appears in errors in place of a file name.
    pub fn from_tokens(name: impl Into<PathBuf>, tokens: Vec<u32>) -> Shard {
        Shard {
            name: name.into(),
            len: tokens.len(),
            storage: Storage::Memory(tokens),
        }
    }

    pub fn name(&self) -> &Path {
        &self.name
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies tokens `start..start + out.len()` into `out`.
    pub fn read(&self, start: usize, out: &mut [u32]) -> Result<()> {
        let end = start
            .checked_add(out.len())
            .filter(|&end| end <= self.len)
            .ok_or_else(|| {
                DataError::Config(format!(
                    "{}: tokens {start}..{} requested, the shard holds {}",
                    self.name.display(),
                    start.saturating_add(out.len()),
                    self.len
                ))
            })?;
        self.copy(start, end, out);
        Ok(())
    }

    /// Copies tokens `start..end` (in bounds) into `out`, widening u16 to u32.
    fn copy(&self, start: usize, end: usize, out: &mut [u32]) {
        match &self.storage {
            Storage::Memory(tokens) => out.copy_from_slice(&tokens[start..end]),
            Storage::Mapped { map, format } => {
                let width = format.token_bytes();
                let bytes = &map[HEADER_BYTES + start * width..HEADER_BYTES + end * width];
                match format {
                    ShardFormat::U16 => {
                        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                            *o = u32::from(u16::from_le_bytes([c[0], c[1]]));
                        }
                    }
                    ShardFormat::U32 => LittleEndian::read_u32_into(bytes, out),
                }
            }
        }
    }

    /// All tokens, for small shards and tests; large ones are read a window at a time.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut out = vec![0; self.len];
        self.copy(0, self.len, &mut out);
        out
    }

    /// Where token `index` lives, for error messages: a byte offset in a file, an index otherwise.
    pub fn locate(&self, index: usize) -> String {
        match &self.storage {
            Storage::Mapped { format, .. } => format!(
                "{} byte {}",
                self.name.display(),
                HEADER_BYTES + index * format.token_bytes()
            ),
            Storage::Memory(_) => format!("{} token {index}", self.name.display()),
        }
    }
}

/// Streams tokens into a temporary file beside `path`; [`ShardWriter::finish`] fills in the
/// count and renames it into place. Dropped unfinished, the temporary file is deleted.
pub struct ShardWriter {
    path: PathBuf,
    format: ShardFormat,
    count: usize,
    out: BufWriter<NamedTempFile>,
}

impl ShardWriter {
    pub fn create(path: impl AsRef<Path>, format: ShardFormat) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let tmp = atomic::temp_beside(&path)?;
        let mut out = BufWriter::with_capacity(1 << 20, tmp);
        out.write_all(&[0; HEADER_BYTES])
            .map_err(DataError::io(&path))?;
        Ok(ShardWriter {
            path,
            format,
            count: 0,
            out,
        })
    }

    /// Appends tokens; a token the format cannot hold is an error naming its index in the shard.
    pub fn push(&mut self, tokens: &[u32]) -> Result<()> {
        let max = self.format.max_token();
        if let Some(i) = tokens.iter().position(|&t| t > max) {
            return Err(DataError::OutOfVocab {
                location: format!("{} token {}", self.path.display(), self.count + i),
                token: tokens[i],
                vocab: max.saturating_add(1),
            });
        }
        if self.count + tokens.len() > i32::MAX as usize {
            return Err(DataError::Config(format!(
                "{}: a shard holds at most {} tokens",
                self.path.display(),
                i32::MAX
            )));
        }
        let io = DataError::io(&self.path);
        let written = match self.format {
            ShardFormat::U16 => tokens
                .iter()
                .try_for_each(|&t| self.out.write_all(&(t as u16).to_le_bytes())),
            ShardFormat::U32 => tokens
                .iter()
                .try_for_each(|&t| self.out.write_all(&t.to_le_bytes())),
        };
        written.map_err(io)?;
        self.count += tokens.len();
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Writes the header, syncs, and renames into place; returns the token count.
    pub fn finish(self) -> Result<usize> {
        let ShardWriter {
            path,
            format,
            count,
            out,
        } = self;
        let io = |e| DataError::Io {
            path: path.clone(),
            source: e,
        };
        let mut tmp = out.into_inner().map_err(|e| io(e.into_error()))?;
        let file = tmp.as_file_mut();
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut header = Vec::with_capacity(12);
        for word in [format.magic(), format.version(), count as i32] {
            header.write_i32::<LittleEndian>(word).map_err(io)?;
        }
        file.write_all(&header).map_err(io)?;
        atomic::persist(tmp, &path)?;
        Ok(count)
    }
}

/// Writes `tokens` as one shard at `path`, atomically.
pub fn write_shard(path: impl AsRef<Path>, format: ShardFormat, tokens: &[u32]) -> Result<()> {
    let mut writer = ShardWriter::create(path, format)?;
    writer.push(tokens)?;
    writer.finish().map(drop)
}
