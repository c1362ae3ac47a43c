//! `swax export RUN --hf OUT`: a run's latest checkpoint (or a checkpoint folder) as a folder
//! transformers loads with `trust_remote_code=True` (`swax_hybrid::export`, docs/export.md).
use std::path::PathBuf;

use clap::Args;

use super::CliResult;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A run folder (its latest checkpoint) or a checkpoint folder.
    path: PathBuf,
    /// The Hugging Face folder to write: new, or empty.
    #[arg(long)]
    hf: PathBuf,
}

pub fn run(args: ExportArgs) -> CliResult {
    let e = swax_hybrid::export::export(&args.path, &args.hf)?;
    println!(
        "exported {} (step {}): {} tensors; {} in {}",
        e.checkpoint.display(),
        e.step,
        e.tensors,
        e.files.join(", "),
        e.out.display()
    );
    Ok(())
}
