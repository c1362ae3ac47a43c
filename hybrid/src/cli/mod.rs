//! The `swax` subcommands. Each lives in its own file with its arguments and its `run`; adding
//! one is a new file, a variant of [`Command`] and an arm in [`Command::run`].

mod eval;
mod export;
mod generate;
mod import;
mod launch;
mod prepare;
mod report;
mod signals;
mod study;
mod study_jobs;
mod train;

use clap::{Parser, Subcommand};
use swax_tensor::Device;

#[derive(Debug, Parser)]
#[command(
    name = "swax",
    version,
    about = "Train hybrid sliding-window-attention / linear-RNN language models"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Tokenize text files, folders or stdin into train and validation shards.
    Prepare(prepare::PrepareArgs),
    /// Train a hybrid model (default: swax-tiny on generated MQAR, multi-query associative recall).
    Train(train::TrainArgs),
    /// Long-context tasks and the loss by position for a trained run's checkpoint.
    Eval(eval::EvalArgs),
    /// Text from a trained run, streamed as it comes (greedy, or sampled with a seed).
    Generate(generate::GenerateArgs),
    /// Several runs' evaluation results side by side: one table, one plot per measure.
    Report(report::ReportArgs),
    /// A window study from a TOML file: train its grid of runs, evaluate them, report.
    Study(study::StudyArgs),
    /// A run as a Hugging Face folder (transformers, trust_remote_code): `--hf OUT`.
    Export(export::ExportArgs),
    /// A folder `swax export` wrote back to a run folder with one checkpoint.
    Import(import::ImportArgs),
}

/// The device `--device` names (`cpu`, `cuda`, `cuda:N`); without it, the first GPU if there
/// is one, else the CPU.
pub(crate) fn device(arg: Option<&str>) -> Result<Device, String> {
    match arg {
        None if swax_tensor::cuda::device(0).is_ok() => Ok(Device::Cuda(0)),
        None | Some("cpu") => Ok(Device::Cpu),
        Some("cuda" | "gpu") => Ok(Device::Cuda(0)),
        Some(s) => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("--device {s}: expected cpu, cuda or cuda:N")),
    }
}

/// A flag's count, size or seed: a whole number, 0 or more. The subcommands take negative
/// numbers as values (`allow_negative_numbers`) so that a negative one meets this message, not
/// clap's "unexpected argument".
pub(crate) fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    if s.trim_start().starts_with('-') {
        return Err(format!("{s} is negative: a whole number, 0 or more"));
    }
    s.trim().parse().map_err(|e| format!("{s}: {e}"))
}

/// Subcommands report any error (data, model, I/O) to `main`, which prints it.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

impl Command {
    pub fn run(self) -> CliResult {
        match self {
            Command::Prepare(args) => prepare::run(args),
            Command::Train(args) => train::run(args),
            Command::Eval(args) => eval::run(args),
            Command::Generate(args) => generate::run(args),
            Command::Report(args) => report::run(args),
            Command::Study(args) => study::run(args),
            Command::Export(args) => export::run(args),
            Command::Import(args) => import::run(args),
        }
    }
}
