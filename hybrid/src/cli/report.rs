//! `swax report RUN...`: several runs' saved evaluation results side by side, in one markdown
//! table (a column per run and window) and one SVG plot per measure; no model is loaded.
use std::path::PathBuf;

use clap::Args;
use swax_hybrid::eval::report::{load, markdown, write_report};

use super::CliResult;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run folders (every eval/w*/results.json in each), evaluation folders or results files.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Where the report goes.
    #[arg(long, default_value = "runs/report")]
    out: PathBuf,
}

pub fn run(args: ReportArgs) -> CliResult {
    if args.out.is_file() {
        return Err(format!(
            "--out {}: a file; the report is a folder",
            args.out.display()
        )
        .into());
    }
    let mut seen: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for p in &args.paths {
        let real = p
            .canonicalize()
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if let Some((_, first)) = seen.iter().find(|(r, _)| *r == real) {
            return Err(format!(
                "{} and {} are the same; give each once",
                first.display(),
                p.display()
            )
            .into());
        }
        seen.push((real, p));
    }
    let mut runs = Vec::new();
    for p in &args.paths {
        runs.extend(load(p)?);
    }
    let files = write_report(&args.out, &runs)?;
    print!("{}", markdown(&runs));
    eprintln!("wrote {} files to {}", files.len(), args.out.display());
    Ok(())
}
