//! Where a run's tokens come from (`data.source`): the embedded recall corpus (`corpus`),
//! generated recall-training rows (`mqar`, `passkey`, `recall-mix`; see `swax_data::recall`), or
//! a folder of shards made by `swax prepare`. Each gives a training loader, a fixed set of
//! validation batches (the same every evaluation) and, for the generated data, held-out recall
//! probes with enough answers within the evaluation window and beyond it.
use std::path::PathBuf;

use swax_data::{
    Batch, Corpus, CorpusConfig, Dataset, Loader, LoaderConfig, LoaderState, RecallConfig,
    RecallData, RecallKind, RowLoader, Shard, Split, TaskSample, Tokenizer, TokenizerKind,
};

use crate::config::Config;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// What `data.source` names.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Corpus,
    Recall(RecallKind),
    Shards(PathBuf),
}

impl Source {
    /// A built-in name, else a folder of shards (`./mqar` for a folder named like a built-in).
    pub fn parse(s: &str) -> Source {
        match s {
            "corpus" => Source::Corpus,
            _ => s
                .parse::<RecallKind>()
                .map_or_else(|_| Source::Shards(PathBuf::from(s)), Source::Recall),
        }
    }

    /// [`Source::parse`], with a folder checked to be one: anything else is an error saying
    /// what a source may be and what `s` is.
    pub fn resolve(s: &str) -> Result<Source> {
        let source = Source::parse(s);
        let Source::Shards(dir) = &source else {
            return Ok(source);
        };
        let what = match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => return Ok(source),
            Ok(_) => match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(parent) => format!("a file; the folder holding it is {}", parent.display()),
                None => "a file".into(),
            },
            Err(_) if s.is_empty() => "empty".into(),
            Err(e) => e.to_string(),
        };
        let generated: Vec<&str> = ["corpus"]
            .into_iter()
            .chain(RecallKind::ALL.map(RecallKind::name))
            .collect();
        Err(format!(
            "data source {s:?}: {what}. A source is a generated one ({}) or a folder of shards \
             made by swax prepare (holding meta.json)",
            generated.join(", ")
        )
        .into())
    }

    /// Whether a model trained on this source learned to read text. MQAR's rows are token ids
    /// (keys, values, random filler) that spell nothing, and only their answers are scored.
    pub fn is_text(&self) -> bool {
        self != &Source::Recall(RecallKind::Mqar)
    }

    /// The data in words, for what `swax eval` and `swax generate` tell a user.
    pub fn describe(&self) -> String {
        match self {
            Source::Corpus => "the embedded recall corpus (text)".into(),
            Source::Recall(RecallKind::Mqar) => "generated MQAR (multi-query associative recall: \
                 key-value pairs of token ids, then the keys asked again; not text)"
                .into(),
            Source::Recall(kind) => format!("generated {} text", kind.name()),
            Source::Shards(dir) => format!("the shards in {} (text)", dir.display()),
        }
    }
}

/// The folder of shards `source` names, if it names one; a name that is neither a generated
/// source nor a folder is an error ([`Source::resolve`]).
pub fn shards_dir(source: &str) -> Result<Option<PathBuf>> {
    Ok(match Source::resolve(source)? {
        Source::Shards(dir) => Some(dir),
        _ => None,
    })
}

/// The training batches, from shards (or the corpus's stream) or from generated rows.
#[derive(Debug)]
pub enum TrainLoader {
    Stream(Loader),
    Rows(RowLoader),
}

impl TrainLoader {
    pub fn next_batch(&mut self) -> swax_data::Result<Batch> {
        match self {
            TrainLoader::Stream(l) => l.next_batch(),
            TrainLoader::Rows(l) => l.next_batch(),
        }
    }

    pub fn state(&self) -> LoaderState {
        match self {
            TrainLoader::Stream(l) => l.state(),
            TrainLoader::Rows(l) => l.state(),
        }
    }

    /// A digest of the data, to tell a run's data from other data (`Loader::fingerprint`).
    pub fn fingerprint(&self) -> String {
        match self {
            TrainLoader::Stream(l) => l.fingerprint(),
            TrainLoader::Rows(l) => l.fingerprint(),
        }
    }
}

pub struct Data {
    pub train: TrainLoader,
    pub val: Vec<Batch>,
    pub probes: Vec<TaskSample>,
    /// Where the tokens came from, for the summary.
    pub origin: String,
}

/// Separates the validation loader's draws from the training loader's.
const VAL_SEED: u64 = 0x56_414c;
/// Validation rows of generated data start here, past the rows the probes are taken from.
pub const VAL_ROWS: u64 = 1 << 32;

/// This rank's part of each global batch (the loaders deal the rows in rank order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub rank: usize,
    pub world: usize,
}

impl Part {
    /// The whole batch: one rank.
    pub const WHOLE: Part = Part { rank: 0, world: 1 };
}

pub fn open(cfg: &Config, resume: Option<LoaderState>, part: Part) -> Result<Data> {
    let (d, t) = (&cfg.data, &cfg.train);
    let vocab = cfg.model.vocab_size as u32;
    let loader_cfg = |seed| LoaderConfig::new(d.batch_size, d.seq_len, seed, vocab);
    let train_cfg = LoaderConfig {
        rank: part.rank,
        world: part.world,
        ..loader_cfg(t.seed)
    };
    let stream = |train: Vec<Shard>, val: Vec<Shard>, probes, origin| -> Result<Data> {
        if train.is_empty() {
            return Err("the data has no training shards".into());
        }
        let train = match resume {
            Some(state) => Loader::resume(train, train_cfg, state)?,
            None => Loader::new(train, train_cfg)?,
        };
        let val = match val.is_empty() || t.eval_batches == 0 {
            true => Vec::new(),
            false => {
                let mut loader = Loader::new(val, loader_cfg(VAL_SEED))?;
                (0..t.eval_batches)
                    .map(|_| loader.next_batch())
                    .collect::<swax_data::Result<_>>()?
            }
        };
        Ok(Data {
            train: TrainLoader::Stream(train),
            val,
            probes,
            origin,
        })
    };
    match Source::resolve(&d.source)? {
        Source::Shards(dir) => {
            let ds = Dataset::open(&dir)?;
            ds.check_model_vocab(vocab)?;
            stream(ds.train, ds.val, Vec::new(), dir.display().to_string())
        }
        Source::Corpus => {
            let (kind, tok) = tokenizer(cfg)?;
            let corpus = Corpus::new(&*tok, corpus_config(cfg))?;
            let train = corpus.stream(Split::Train, d.corpus_train_tokens);
            let val = corpus.stream(Split::Val, d.corpus_val_tokens);
            let probes = probes(cfg, &mut |count| {
                corpus.probes(count, d.seq_len).map_err(|e| {
                    format!(
                        "{e}: the recall probes must fit in data.seq_len {}; raise it, lower \
                         data.corpus_max_doc_tokens so recalls come sooner, or lower \
                         train.recall_probes (train.recall_probes=0: none)",
                        d.seq_len
                    )
                    .into()
                })
            })?;
            stream(
                vec![Shard::from_tokens("corpus:train", train)],
                vec![Shard::from_tokens("corpus:val", val)],
                probes,
                format!("the embedded recall corpus ({kind} tokenizer)"),
            )
        }
        Source::Recall(kind) => {
            let rows = recall_data(cfg, kind, d.seq_len + 1)?;
            let val = (0..t.eval_batches as u64)
                .map(|i| {
                    let first = VAL_ROWS + i * d.batch_size as u64;
                    Ok(rows.batch(Split::Val, first, d.batch_size)?)
                })
                .collect::<Result<_>>()?;
            let probes = probes(cfg, &mut |count| Ok(rows.probes(count)?))?;
            let (b, rank, world) = (d.batch_size, part.rank, part.world);
            let train = match resume {
                Some(state) => RowLoader::resume(rows, b, rank, world, state)?,
                None => RowLoader::new(rows, b, rank, world)?,
            };
            Ok(Data {
                train: TrainLoader::Rows(train),
                val,
                probes,
                origin: format!("generated {} rows ({} tokenizer)", kind.name(), d.tokenizer),
            })
        }
    }
}

/// The corpus's settings: documents up to `data.corpus_max_doc_tokens`, recalls reaching up to
/// the training length (farther ones a model could not learn from).
pub fn corpus_config(cfg: &Config) -> CorpusConfig {
    let d = &cfg.data;
    CorpusConfig {
        seed: cfg.train.seed,
        min_doc_tokens: d.corpus_max_doc_tokens.min(64),
        max_doc_tokens: d.corpus_max_doc_tokens,
        max_distance: d.seq_len,
        ..CorpusConfig::default()
    }
}

/// The tokenizer of generated data (`data.tokenizer`, a built-in one), refused if the model's
/// vocabulary cannot hold its tokens.
fn tokenizer(cfg: &Config) -> Result<(&TokenizerKind, Box<dyn Tokenizer>)> {
    let kind = &cfg.data.tokenizer;
    let tok = kind.build()?;
    let vocab = cfg.model.vocab_size;
    if tok.vocab_size() as usize > vocab {
        return Err(format!(
            "model.vocab_size {vocab} cannot hold the {kind} tokenizer's {} tokens \
             (data.tokenizer); raise it to at least {}",
            tok.vocab_size(),
            tok.vocab_size()
        )
        .into());
    }
    Ok((kind, tok))
}

/// Generated rows of `kind`, `len` tokens each, with the run's tokenizer and seed.
pub fn recall_data(cfg: &Config, kind: RecallKind, len: usize) -> Result<RecallData> {
    let (_, tok) = tokenizer(cfg)?;
    Ok(RecallData::new(
        tok,
        RecallConfig {
            kind,
            len,
            seed: cfg.train.seed,
            mqar_pairs: cfg.data.mqar_pairs,
        },
    )?)
}

/// Held-out probes until `train.recall_probes` answers lie within the evaluation window
/// (`train.w_long`) and as many beyond it, where the sequence length allows answers beyond it.
/// `take(n)` gives the first n probes of the data.
fn probes(
    cfg: &Config,
    take: &mut dyn FnMut(usize) -> Result<Vec<TaskSample>>,
) -> Result<Vec<TaskSample>> {
    let want = cfg.train.recall_probes;
    if want == 0 {
        return Ok(Vec::new());
    }
    let window = cfg.train.w_long;
    let far_possible = cfg.data.seq_len > window;
    let mut count = want.div_ceil(4);
    loop {
        let probes = take(count)?;
        let (mut near, mut far) = (0, 0);
        for a in probes.iter().flat_map(|p| &p.answers) {
            match a.distance() < window {
                true => near += 1,
                false => far += 1,
            }
        }
        if near >= want && (far >= want || !far_possible) {
            return Ok(probes);
        }
        if count >= 64 * want {
            return Err(format!(
                "{count} held-out probes hold {near} answers within train.w_long = {window} \
                 tokens and {far} beyond it, short of train.recall_probes = {want}: lower \
                 train.recall_probes or train.w_long, or raise data.seq_len"
            )
            .into());
        }
        count *= 2;
    }
}
