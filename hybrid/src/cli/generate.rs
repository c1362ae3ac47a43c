//! `swax generate RUN`: text from a trained run's checkpoint, streamed to stdout as it comes.
//! The prompt is read in pieces, then one token a step with every layer's decoding state
//! carried (see `swax_hybrid::generate`); greedy at temperature 0, reproducible for a seed.
//! What is printed is always valid text: bytes that are not UTF-8 print as U+FFFD with a note,
//! or `--ids` prints the token ids, for a model trained on ids rather than text (MQAR).
use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Args;
use swax_data::Tokenizer;
use swax_hybrid::generate::{generate_profiled, Request, Sampling, Utf8Stream};
use swax_hybrid::loaded::load;
use swax_hybrid::train::data::Source;
use swax_hybrid::train::{compute_dtype, memory};

use super::{whole, CliResult};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct GenerateArgs {
    /// A run folder (its latest checkpoint) or a checkpoint folder.
    path: PathBuf,
    /// The text to continue.
    #[arg(long, conflicts_with_all = ["prompt_file", "prompt_ids"])]
    prompt: Option<String>,
    /// Token ids to continue, space-separated, read as they are (no end-of-text token is put
    /// before them): the same input another implementation of the model is given.
    #[arg(long, conflicts_with = "prompt_file")]
    prompt_ids: Option<String>,
    /// Go on past the end-of-text token, to `--max-tokens`.
    #[arg(long)]
    no_stop: bool,
    /// A file holding the text to continue (`-`: stdin).
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    /// Tokens generated after the prompt, at most.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 128)]
    max_tokens: usize,
    /// 0: greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Sample from the k most likely tokens only (0: all).
    #[arg(long, value_parser = whole::<usize>, default_value_t = 0)]
    top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches p.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// The seed of sampling (the same seed, the same text); unused when greedy.
    #[arg(long, value_parser = whole::<u64>, default_value_t = 0)]
    seed: u64,
    /// The attention window. Default: the run's long training window (train.w_long).
    #[arg(long, value_parser = whole::<usize>)]
    window: Option<usize>,
    /// Continuations of the prompt generated side by side.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 1)]
    batch: usize,
    /// `cpu` or `cuda[:N]`. Default: the first GPU if there is one, else the CPU.
    #[arg(long)]
    device: Option<String>,
    /// Print the generated token ids, space-separated, instead of their text (for a model
    /// trained on token ids, such as MQAR's).
    #[arg(long)]
    ids: bool,
    /// Print to stderr, per decoding step: the time, kernel launches, cuBLAS calls, host syncs,
    /// uploads, backend calls and bytes read back.
    #[arg(long)]
    profile: bool,
}

pub fn run(args: GenerateArgs) -> CliResult {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.check()?;
    if args.batch == 0 || args.window == Some(0) {
        return Err("--batch and --window must be at least 1".into());
    }
    let text = prompt_text(&args)?;
    let device = super::device(args.device.as_deref())?;
    let loaded = load(&args.path, device)?;
    let cfg = &loaded.cfg;
    let tok = cfg.data.tokenizer.open(&loaded.run)?;
    let source = Source::parse(&cfg.data.source);
    if !source.is_text() {
        eprintln!(
            "note: the model was trained on {}: it continues token ids of that task, not text{}",
            source.describe(),
            match args.ids {
                true => "",
                false => " (--ids prints them as numbers)",
            }
        );
    }
    let prompt = prompt_ids(&args, &text, &*tok, cfg.model.vocab_size)?;
    memory::check_generate(cfg, device, args.batch, prompt.len(), cfg.data.seq_len)?;
    let req = Request {
        max_tokens: args.max_tokens,
        sampling,
        batch: args.batch,
        window: args.window.unwrap_or(cfg.train.w_long),
        piece: cfg.data.seq_len,
        stop: (!args.no_stop).then(|| tok.eot()),
    };
    let mut out = std::io::stdout().lock();
    let streamed = args.batch == 1;
    let mut text = Utf8Stream::default();
    // Tokens as printed: ids, or text (a character split over tokens held until whole; an id
    // past the tokenizer's, which a vocabulary padded for speed allows, as `[id]`).
    let show = |tokens: &[u32], text: &mut Utf8Stream| -> String {
        let mut s = String::new();
        for &t in tokens {
            match (args.ids, tok.decode_bytes(&[t])) {
                (true, _) => s += &format!("{t} "),
                (false, Ok(bytes)) => s += &text.push(&bytes),
                (false, Err(_)) => s += &(text.finish() + &format!("[{t}]")),
            }
        }
        s
    };
    let (rows, profile) = generate_profiled(
        &loaded.model,
        &prompt,
        &req,
        compute_dtype(cfg, device),
        device,
        &mut |_, token| {
            if streamed && (args.no_stop || token != tok.eot()) {
                let _ = out.write_all(show(&[token], &mut text).as_bytes());
                let _ = out.flush();
            }
        },
    )?;
    if streamed {
        writeln!(out, "{}", text.finish())?;
    } else {
        for (i, row) in rows.iter().enumerate() {
            let body: Vec<u32> = row
                .iter()
                .copied()
                .filter(|&t| args.no_stop || t != tok.eot())
                .collect();
            let shown = show(&body, &mut text) + &text.finish();
            writeln!(out, "--- {i}\n{shown}")?;
        }
    }
    if text.replaced() > 0 {
        eprintln!(
            "note: {} generated byte(s) were not UTF-8 and print as U+FFFD; --ids prints the \
             token ids",
            text.replaced()
        );
    }
    if args.profile {
        eprintln!("profile: {}", profile.per_step());
    }
    Ok(())
}

/// The text to continue: --prompt, --prompt-file (`-`: standard input), or none where
/// --prompt-ids gives the ids.
fn prompt_text(args: &GenerateArgs) -> Result<String, Box<dyn std::error::Error>> {
    Ok(match (&args.prompt, &args.prompt_file) {
        _ if args.prompt_ids.is_some() => String::new(),
        (Some(p), _) => p.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        (None, Some(f)) => {
            std::fs::read_to_string(f).map_err(|e| format!("--prompt-file {}: {e}", f.display()))?
        }
        (None, None) => {
            return Err("give the text to continue: --prompt, --prompt-file or --prompt-ids".into())
        }
    })
}

/// The prompt's token ids: --prompt-ids as given (each below the vocabulary), else the
/// end-of-text token then the text's tokens.
fn prompt_ids(
    args: &GenerateArgs,
    text: &str,
    tok: &dyn Tokenizer,
    vocab: usize,
) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let Some(ids) = &args.prompt_ids else {
        // Every document in training began after the end-of-text token: so does the prompt.
        let mut prompt = vec![tok.eot()];
        prompt.extend(tok.encode(text));
        return Ok(prompt);
    };
    let prompt = ids
        .split_whitespace()
        .map(|id| match id.parse::<u32>() {
            Ok(id) if (id as usize) < vocab => Ok(id),
            _ => Err(format!(
                "--prompt-ids: {id:?} is not a token id below the vocabulary's {vocab}"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if prompt.is_empty() {
        return Err("--prompt-ids: no token ids".into());
    }
    Ok(prompt)
}
