//! Where a run's tokens come from: shards prepared with `swax prepare` (`--data DIR`), or, by
//! default, the embedded recall corpus generated in memory. Either gives a training loader, a
//! fixed set of validation batches (the same every evaluation), and, for the corpus, held-out
//! recall probes.
use std::path::Path;

use swax_data::{
    Batch, Corpus, CorpusConfig, Dataset, Loader, LoaderConfig, LoaderState, Shard, Split,
    TaskSample, TokenizerKind,
};

use crate::config::Config;

pub struct Data {
    pub train: Loader,
    pub val: Vec<Batch>,
    pub probes: Vec<TaskSample>,
    /// Where the tokens came from, for the summary.
    pub origin: String,
}

/// Separates the validation loader's draws from the training loader's.
const VAL_SEED: u64 = 0x56_414c;

pub fn open(
    cfg: &Config,
    dir: Option<&Path>,
    resume: Option<LoaderState>,
) -> Result<Data, Box<dyn std::error::Error>> {
    let (d, t) = (&cfg.data, &cfg.train);
    let vocab = cfg.model.vocab_size as u32;
    let loader_cfg = |seed| LoaderConfig::new(d.batch_size, d.seq_len, seed, vocab);
    let (train_shards, val_shards, probes, origin) = match dir {
        Some(dir) => {
            let ds = Dataset::open(dir)?;
            ds.check_model_vocab(vocab)?;
            (ds.train, ds.val, Vec::new(), dir.display().to_string())
        }
        None => {
            let kind = d.tokenizer.parse::<TokenizerKind>()?;
            let tok = kind.build()?;
            if tok.vocab_size() > vocab {
                return Err(format!(
                    "model.vocab_size {vocab} cannot hold the {kind} tokenizer's {} tokens \
                     (data.tokenizer); raise it to at least {}",
                    tok.vocab_size(),
                    tok.vocab_size()
                )
                .into());
            }
            let corpus = Corpus::new(
                &*tok,
                CorpusConfig {
                    seed: t.seed,
                    min_doc_tokens: d.corpus_max_doc_tokens.min(64),
                    max_doc_tokens: d.corpus_max_doc_tokens,
                    ..CorpusConfig::default()
                },
            )?;
            let train = corpus.stream(Split::Train, d.corpus_train_tokens);
            let val = corpus.stream(Split::Val, d.corpus_val_tokens);
            let probes = match t.recall_probes {
                0 => Vec::new(),
                n => corpus.probes(n, d.seq_len).map_err(|e| {
                    format!(
                        "{e}: the recall probes must fit in data.seq_len {}; raise it, lower \
                         data.corpus_max_doc_tokens so recalls come sooner, or set \
                         train.recall_probes=0",
                        d.seq_len
                    )
                })?,
            };
            (
                vec![Shard::from_tokens("corpus:train", train)],
                vec![Shard::from_tokens("corpus:val", val)],
                probes,
                format!("the embedded recall corpus ({kind} tokenizer)"),
            )
        }
    };
    if train_shards.is_empty() {
        return Err("the data has no training shards".into());
    }
    let train = match resume {
        Some(state) => Loader::resume(train_shards, loader_cfg(t.seed), state)?,
        None => Loader::new(train_shards, loader_cfg(t.seed))?,
    };
    let val = match val_shards.is_empty() || t.eval_batches == 0 {
        true => Vec::new(),
        false => {
            let mut loader = Loader::new(val_shards, loader_cfg(VAL_SEED))?;
            (0..t.eval_batches)
                .map(|_| loader.next_batch())
                .collect::<Result<_, _>>()?
        }
    };
    Ok(Data {
        train,
        val,
        probes,
        origin,
    })
}
