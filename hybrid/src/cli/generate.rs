//! `swax generate RUN`: text from a trained run's checkpoint, streamed to stdout as it comes.
//! The prompt is read in pieces, then one token a step with every layer's decoding state
//! carried (see `swax_hybrid::generate`); greedy at temperature 0, reproducible for a seed.
use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Args;
use swax_hybrid::generate::{generate, Request, Sampling};
use swax_hybrid::loaded::load;
use swax_hybrid::train::{compute_dtype, memory};

use super::{whole, CliResult};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct GenerateArgs {
    /// A run folder (its latest checkpoint) or a checkpoint folder.
    path: PathBuf,
    /// The text to continue.
    #[arg(long, conflicts_with = "prompt_file")]
    prompt: Option<String>,
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
    let text = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        (None, Some(f)) => {
            std::fs::read_to_string(f).map_err(|e| format!("--prompt-file {}: {e}", f.display()))?
        }
        (None, None) => return Err("give the text to continue: --prompt or --prompt-file".into()),
    };
    let device = super::device(args.device.as_deref())?;
    let loaded = load(&args.path, device)?;
    let cfg = &loaded.cfg;
    let tok = cfg.data.tokenizer.build()?;
    // Every document in training began after the end-of-text token: so does the prompt.
    let mut prompt = vec![tok.eot()];
    prompt.extend(tok.encode(&text));
    memory::check_generate(cfg, device, args.batch, prompt.len(), cfg.data.seq_len)?;
    let req = Request {
        max_tokens: args.max_tokens,
        sampling,
        batch: args.batch,
        window: args.window.unwrap_or(cfg.train.w_long),
        piece: cfg.data.seq_len,
        stop: Some(tok.eot()),
    };
    let mut out = std::io::stdout().lock();
    let streamed = args.batch == 1;
    let rows = generate(
        &loaded.model,
        &prompt,
        &req,
        compute_dtype(cfg, device),
        device,
        &mut |_, token| {
            if streamed && token != tok.eot() {
                // A byte of a multi-byte character decodes only with the rest: written raw.
                if let Ok(bytes) = tok.decode_bytes(&[token]) {
                    let _ = out.write_all(&bytes);
                }
                let _ = out.flush();
            }
        },
    )?;
    if streamed {
        writeln!(out)?;
    } else {
        for (i, row) in rows.iter().enumerate() {
            let body: Vec<u32> = row.iter().copied().filter(|&t| t != tok.eot()).collect();
            writeln!(out, "--- {i}\n{}", tok.decode(&body)?)?;
        }
    }
    Ok(())
}
