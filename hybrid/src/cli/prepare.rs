//! `swax prepare INPUT... --out DIR`: text to llm.c-format shards and `meta.json`, with a
//! progress bar and the counts at the end. The pipeline itself is `swax_data::prepare`; the
//! tokenizer is `bytes`, `gpt2` or a Hugging Face `tokenizer.json`.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use swax_data::prepare::{Input, Plan, PrepareConfig, PrepareTokenizer, MAX_STREAM_BYTES};
use swax_data::SplitCounts;

use super::{whole, CliResult};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct PrepareArgs {
    /// Text files, folders (read recursively), FIFOs (`<(zcat a.gz)`) or `-` for stdin.
    /// Documents are files, or parts of files between `<|endoftext|>` markers.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<String>,
    /// Folder for the shards (train_NNNNNN.bin, val_NNNNNN.bin) and meta.json.
    #[arg(long)]
    out: PathBuf,
    /// `bytes` (vocabulary 256, end of text = byte 0), `gpt2` (50257, end of text = 50256), or
    /// the path of a Hugging Face tokenizer.json (PATH/tokenizer.json): its vocabulary, its
    /// end-of-text token (see --eot-token), a copy of it and its SHA-256 kept in the output
    /// folder, and from there in every run trained on it.
    #[arg(long, default_value = "bytes", value_name = "bytes|gpt2|PATH")]
    tokenizer: String,
    /// With a tokenizer.json: the token that separates documents. Default: the first of
    /// <|endoftext|>, <|end_of_text|>, </s>, <eos> that the file holds.
    #[arg(long, value_name = "TEXT")]
    eot_token: Option<String>,
    /// Share of tokens held out for validation, by whole documents.
    #[arg(long, default_value_t = 0.01)]
    val_fraction: f64,
    /// Tokens per shard.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 100_000_000)]
    shard_tokens: usize,
    /// Replace shards and metadata already in the output folder.
    #[arg(long)]
    force: bool,
    /// The most bytes read from one stream (stdin, a FIFO), which is held in memory whole.
    #[arg(long, value_parser = whole::<u64>, default_value_t = MAX_STREAM_BYTES)]
    max_stream_bytes: u64,
}

pub fn run(args: PrepareArgs) -> CliResult {
    let inputs: Vec<Input> = args
        .inputs
        .iter()
        .map(|s| Input::from(s.as_str()))
        .collect();
    let tokenizer = PrepareTokenizer::parse(&args.tokenizer, args.eot_token)?;
    let plan = Plan::new(&inputs, &args.out)?;
    let bar = match plan.total_bytes() {
        Some(total) => ProgressBar::new(total).with_style(ProgressStyle::with_template(
            "{elapsed_precise} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )?),
        None => ProgressBar::new_spinner().with_style(ProgressStyle::with_template(
            "{elapsed_precise} {spinner} {bytes} {bytes_per_sec}",
        )?),
    };
    let cfg = PrepareConfig {
        out: args.out,
        tokenizer,
        val_fraction: args.val_fraction,
        shard_tokens: args.shard_tokens,
        force: args.force,
        max_stream_bytes: args.max_stream_bytes,
    };
    let start = Instant::now();
    let result = plan.run(&cfg, &mut |bytes| bar.inc(bytes));
    bar.finish_and_clear();
    let meta = result?;
    let seconds = start.elapsed().as_secs_f64();
    let megabytes = bar.position() as f64 / 1e6;

    let line = |name: &str, c: SplitCounts| {
        println!(
            "{name:5} {:>10} documents {:>14} tokens {:>6} shards",
            c.documents, c.tokens, c.shards
        )
    };
    line("train", meta.train);
    line("val", meta.val);
    println!(
        "{megabytes:.1} MB from {} input(s) in {seconds:.2} s ({:.1} MB/s), tokenizer {}, in {}",
        plan.files(),
        megabytes / seconds.max(1e-9),
        meta.tokenizer,
        cfg.out.display()
    );
    let total = meta.train.tokens + meta.val.tokens;
    let share = meta.val.tokens as f64 / total.max(1) as f64;
    println!(
        "validation: {:.2}% of the tokens (--val-fraction {}: at most {:.2}%, whole documents)",
        100.0 * share,
        cfg.val_fraction,
        100.0 * cfg.val_fraction
    );
    // A document goes whole to one split and validation never exceeds the fraction, so large
    // documents leave it short: say so rather than let a user train on a split they did not ask.
    if cfg.val_fraction > 0.0 && meta.val.documents == 0 {
        eprintln!(
            "warning: the validation split is empty: none of the {} document(s) fits in {:.2}% \
             of the tokens; split the text into more, smaller documents (files, or parts between \
             <|endoftext|> markers)",
            meta.train.documents,
            100.0 * cfg.val_fraction
        );
    } else if share < 0.5 * cfg.val_fraction {
        eprintln!(
            "warning: the validation split holds {:.2}% of the tokens, under half the {:.2}% \
             asked: its documents are large beside the whole; split the text into more, smaller \
             documents for a closer split",
            100.0 * share,
            100.0 * cfg.val_fraction
        );
    }
    Ok(())
}
