//! The `swax` subcommands. Each lives in its own file with its arguments and its `run`; adding
//! one is a new file, a variant of [`Command`] and an arm in [`Command::run`].

mod eval;
mod prepare;
mod report;
mod signals;
mod train;

use clap::{Parser, Subcommand};

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
    /// Train a hybrid model (default: swax-tiny on the embedded recall corpus).
    Train(train::TrainArgs),
    /// Long-context tasks and the loss by position for a trained run's checkpoint.
    Eval(eval::EvalArgs),
    /// Several runs' evaluation results side by side: one table, one plot per measure.
    Report(report::ReportArgs),
}

/// Subcommands report any error (data, model, I/O) to `main`, which prints it.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

impl Command {
    pub fn run(self) -> CliResult {
        match self {
            Command::Prepare(args) => prepare::run(args),
            Command::Train(args) => train::run(args),
            Command::Eval(args) => eval::run(args),
            Command::Report(args) => report::run(args),
        }
    }
}
