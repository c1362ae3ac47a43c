//! `swax eval RUN_OR_CHECKPOINT`: the long-context tasks at a list of lengths and depths and
//! the loss by position past the training length, for one checkpoint at one window; results,
//! tables and plots go to `RUN/eval/w<WINDOW>/` (see `swax_hybrid::eval`).
use std::path::{Path, PathBuf};

use clap::Args;
use swax_hybrid::config::Config;
use swax_hybrid::eval::evaluate::{default_tasks, evaluate, notes, Plan};
use swax_hybrid::eval::report::{markdown, MEANING};
use swax_hybrid::eval::results::EvalResults;
use swax_hybrid::eval::run::{held_out, Task};
use swax_hybrid::eval::store;
use swax_hybrid::loaded::{load, Loaded};
use swax_hybrid::train::data::shards_dir;
use swax_hybrid::train::run_dir::dataset_tokenizer;

use super::{whole, CliResult};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct EvalArgs {
    /// A run folder (its latest checkpoint) or a checkpoint folder (RUN/checkpoints/step-N).
    path: PathBuf,
    /// Comma-separated: niah, passkey, mqar, loss. Default: what fits the run's data: mqar for a
    /// run trained on MQAR, niah,passkey,loss for one trained on text.
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Comma-separated lengths in tokens (`1k` = 1024). Default: 1, 2, 4, 8 and 16 times the
    /// training length.
    #[arg(long, value_delimiter = ',', value_parser = parse_len)]
    lengths: Vec<usize>,
    /// Needle depths in [0, 1] for niah and passkey.
    #[arg(long, default_value = "0,0.25,0.5,0.75,1", value_delimiter = ',')]
    depths: Vec<f64>,
    /// The attention window. Default: the run's long training window (train.w_long).
    #[arg(long, value_parser = whole::<usize>)]
    window: Option<usize>,
    /// Samples per task, length and depth; held-out sequences for the loss.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 8)]
    samples: usize,
    /// Positions per bucket of the loss curve. Default: the training length.
    #[arg(long, value_parser = whole::<usize>)]
    bucket: Option<usize>,
    /// The held-out text of the loss by position, as `data.source` names it (`corpus`, a recall
    /// source, or a folder of shards); default: the run's own data.
    #[arg(long)]
    data: Option<String>,
    /// `cpu` or `cuda[:N]`. Default: the first GPU if there is one, else the CPU.
    #[arg(long)]
    device: Option<String>,
    /// Evaluate in pieces of this many tokens, carrying window tails and recurrent states
    /// (memory bounded by the piece, not the sequence); 0 for one pass per sequence. Default:
    /// the training length.
    #[arg(long, value_parser = whole::<usize>, alias = "chunk")]
    piece: Option<usize>,
    /// The seed of the task samples (the same seed, the same samples).
    #[arg(long, value_parser = whole::<u64>, default_value_t = 0)]
    seed: u64,
    /// `forced`: exact match of the greedy answer in one teacher-forced pass; `generate`: that,
    /// and RULER's string_match_all of up to --generate-tokens generated tokens (niah, passkey).
    #[arg(long, default_value = "forced", value_parser = ["forced", "generate"])]
    scoring: String,
    /// With --scoring generate: the most tokens generated per answer.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 128)]
    generate_tokens: usize,
    /// Also write the loss's held-out sequences, decoded with the run's tokenizer, to this file
    /// as JSON lines (`length`, `text`), so that another harness (lm-eval) scores the very text
    /// swax scores. Refuses an existing file.
    #[arg(long, value_name = "FILE")]
    write_held_out: Option<PathBuf>,
}

fn parse_len(s: &str) -> Result<usize, String> {
    let (digits, scale) = match s.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1024),
        None => (s, 1),
    };
    super::whole::<usize>(digits)
        .map_err(|e| format!("length {e}"))?
        .checked_mul(scale)
        .ok_or_else(|| format!("length {s}: more tokens than a length can count"))
}

/// The options' own ranges, checked before anything is loaded, each error naming its option.
fn check(args: &EvalArgs) -> Result<(), String> {
    if args.samples == 0 {
        return Err("--samples 0: at least one sample per task, length and depth".into());
    }
    if let Some(&d) = args.depths.iter().find(|d| !(0.0..=1.0).contains(*d)) {
        return Err(format!(
            "--depths {d}: a depth is a fraction of the context, in [0, 1]"
        ));
    }
    if args.lengths.contains(&0) {
        return Err("--lengths 0: a length is at least one token".into());
    }
    if args.window == Some(0) {
        return Err("--window 0: a query sees at least itself, so the window is at least 1".into());
    }
    if args.scoring == "generate" && args.generate_tokens == 0 {
        return Err(
            "--generate-tokens 0 with --scoring generate: an answer is at least one generated \
             token"
                .into(),
        );
    }
    if args.bucket == Some(0) {
        return Err("--bucket 0: a loss bucket holds at least one position".into());
    }
    if let Some(file) = &args.write_held_out {
        if file.exists() {
            return Err(format!(
                "--write-held-out {}: the file exists; it is not overwritten",
                file.display()
            ));
        }
    }
    Ok(())
}

/// The loss's held-out sequences at each length as JSON lines of text in `file`, written so
/// that the export's tokenizer reads back the very tokens swax scored: lm-eval's rolling
/// log-likelihood puts the end-of-text token before each document and scores every token
/// after it, so a row's leading end-of-text token is left out of its text, and one inside a row
/// is written as the export's tokenizer reads it (`export::eot_text`).
fn write_held_out(loaded: &Loaded, plan: &Plan, file: &Path) -> CliResult {
    let tok = loaded.cfg.data.tokenizer.open(&loaded.run)?;
    let (eot, eot_text) = (tok.eot(), swax_hybrid::export::eot_text(&loaded.cfg));
    let mut lines = String::new();
    for &length in &plan.lengths {
        for seq in held_out(&loaded.cfg, plan.data.as_deref(), length, plan.samples)? {
            let body = seq.strip_prefix(&[eot]).unwrap_or(&seq);
            let pieces = body
                .split(|&t| t == eot)
                .map(|piece| Ok(String::from_utf8_lossy(&tok.decode_bytes(piece)?).into_owned()))
                .collect::<Result<Vec<String>, swax_data::DataError>>()?;
            let text = pieces.join(&eot_text);
            lines.push_str(&serde_json::json!({ "length": length, "text": text }).to_string());
            lines.push('\n');
        }
    }
    std::fs::write(file, lines).map_err(|e| format!("--write-held-out {}: {e}", file.display()))?;
    eprintln!("wrote the held-out text of the loss to {}", file.display());
    Ok(())
}

pub fn run(args: EvalArgs) -> CliResult {
    check(&args)?;
    let data_dir = args.data.as_deref().map(shards_dir).transpose()?.flatten();
    let device = super::device(args.device.as_deref())?;
    let loaded = load(&args.path, device)?;
    let cfg = &loaded.cfg;
    let (plan, asked) = plan(&args, cfg)?;
    let kind = &cfg.data.tokenizer;
    if let Some(made) = dataset_tokenizer(data_dir.as_deref())?.filter(|k| k != kind) {
        return Err(format!(
            "--data {}: made with the {made} tokenizer, the model was trained with {kind}",
            args.data.as_deref().unwrap_or_default()
        )
        .into());
    }
    // Where the results go (`eval/wW`, or `eval/wW-on-NAME` beside it) is known to take them
    // before the evaluation runs.
    let window = plan.window;
    store::check_writable(&loaded.run.join("eval").join(format!("w{window}")))?;
    eprintln!(
        "evaluating {} (step {}) at window {window} on {device}: {} at lengths {:?}",
        loaded.checkpoint.display(),
        loaded.step,
        asked.join(", "),
        plan.lengths
    );
    let notes = notes(cfg, &plan);
    for note in &notes {
        eprintln!("note: {note}");
    }
    if let Some(file) = &args.write_held_out {
        write_held_out(&loaded, &plan, file)?;
    }
    let results = evaluate(&loaded, &plan, &mut |line| eprintln!("{line}"))?;
    let dir = store::folder(&loaded.run, &results);
    print!("{}", markdown(std::slice::from_ref(&results)));
    println!("\n{MEANING}");
    // Repeated after the table, where a reader of the scores looks.
    for note in &notes {
        println!("note: {note}");
    }
    save(&dir, results)
}

/// The evaluation the flags ask of a model trained as `cfg` (each default from its config), and
/// the tasks as asked (the loss among them).
fn plan(args: &EvalArgs, cfg: &Config) -> Result<(Plan, Vec<String>), Box<dyn std::error::Error>> {
    let train_len = cfg.data.seq_len;
    let lengths = match args.lengths.is_empty() {
        true => [1, 2, 4, 8, 16].map(|k| k * train_len).to_vec(),
        false => args.lengths.clone(),
    };
    let asked = match args.tasks.is_empty() {
        true => default_tasks(cfg),
        false => args.tasks.clone(),
    };
    let want_loss = asked.iter().any(|t| t == "loss");
    if args.write_held_out.is_some() && !want_loss {
        return Err("--write-held-out writes the loss's held-out text: add loss to --tasks".into());
    }
    let tasks: Vec<Task> = asked
        .iter()
        .filter(|t| *t != "loss")
        .map(|t| t.parse())
        .collect::<Result<_, _>>()?;
    let plan = Plan {
        tasks,
        loss: want_loss,
        lengths,
        depths: args.depths.clone(),
        window: args.window.unwrap_or(cfg.train.w_long),
        samples: args.samples,
        seed: args.seed,
        piece: args.piece.unwrap_or(train_len),
        bucket: args.bucket.unwrap_or(train_len),
        data: args.data.clone(),
        generate_tokens: match args.scoring.as_str() {
            "generate" => args.generate_tokens,
            _ => 0,
        },
    };
    Ok((plan, asked))
}

/// Saves the results into `dir`, saying what became of the results already there.
fn save(dir: &Path, results: EvalResults) -> CliResult {
    let saved = store::save(dir, results)?;
    if let Some(to) = &saved.moved {
        eprintln!(
            "moved the results of the checkpoint evaluated before to {}",
            to.display()
        );
    }
    if saved.merged {
        eprintln!(
            "merged with the earlier results of this checkpoint (re-evaluated cells replaced)"
        );
    }
    eprintln!("wrote {} files to {}", saved.files.len(), dir.display());
    Ok(())
}
