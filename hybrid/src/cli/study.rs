//! `swax study STUDY`: train a window study's grid of runs, evaluate each at the windows it
//! trained at, and write `OUT/report.md` with its plots (see `swax_hybrid::study`). STUDY is a
//! TOML file or the name of a shipped one (`configs/studies/`). Interrupted (Ctrl-C, SIGTERM),
//! it saves the run in training and exits 130 / 143; the same command continues it.
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::Args;
use swax_hybrid::study::{self, report, StudyOptions};

use super::{signals, CliResult};

#[derive(Debug, Args)]
pub struct StudyArgs {
    /// A study file, or a shipped study's name.
    study: String,
    /// The study folder. Default: studies/<the study's name>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// `cpu`, `cuda` or `cuda:N`. Default: the first GPU if there is one, else the CPU.
    #[arg(long)]
    device: Option<String>,
    /// Only write the report again, from the results saved in --out.
    #[arg(long)]
    report: bool,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(args: StudyArgs) -> CliResult {
    signals::install(&STOP)?;
    let (spec, name) = study::resolve(&args.study)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("studies").join(&name));
    if args.report {
        let files = report::from_saved(&out)?;
        println!("wrote {}", files[0].display());
        return Ok(());
    }
    let device = super::device(args.device.as_deref())?;
    let runs = spec.runs()?;
    eprintln!(
        "study {name}: {} runs on {device} into {} ({})",
        runs.len(),
        out.display(),
        runs.iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let outcome = study::run(
        &spec,
        &out,
        StudyOptions {
            device,
            progress: !args.quiet,
            stop: &STOP,
            say: &mut |line| eprintln!("{line}"),
        },
    )?;
    match outcome.report {
        Some(report) => println!("{}", std::fs::read_to_string(&report)?),
        None => {
            std::io::stdout().flush()?;
            std::process::exit(signals::exit_status().unwrap_or(130));
        }
    }
    Ok(())
}
