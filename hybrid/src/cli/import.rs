//! `swax import HF_DIR --out RUN`: a folder `swax export` wrote (perhaps changed in PyTorch)
//! back to a run folder with one checkpoint (`swax_hybrid::export::import`, docs/export.md).
use std::path::PathBuf;

use clap::Args;

use super::CliResult;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The exported folder: config.json, model.safetensors and the tokenizer's files.
    path: PathBuf,
    /// The run folder to write: new, or empty.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: ImportArgs) -> CliResult {
    let i = swax_hybrid::export::import(&args.path, &args.out)?;
    println!(
        "imported {}: {} tensors, step {}, into {}",
        args.path.display(),
        i.tensors,
        i.step,
        i.checkpoint.display()
    );
    Ok(())
}
