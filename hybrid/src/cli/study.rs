//! `swax study STUDY`: train a window study's grid of runs, evaluate each at the windows it
//! trained at, and write `OUT/report.md` with its plots (see `swax_hybrid::study`). STUDY is a
//! TOML file or the name of a shipped one (`configs/studies/`). Interrupted (Ctrl-C, SIGTERM),
//! it saves the run in training and exits 130 / 143; the same command continues it.
//! `swax study --compare A B ..` puts the reports of several study folders side by side.
//! `--jobs N` trains N runs at a time, each in a process of its own (`study_jobs`).
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::Args;
use swax_hybrid::study::{self, report, StudyOptions};

use super::{signals, study_jobs, CliResult};

#[derive(Debug, Args)]
pub struct StudyArgs {
    /// A study file, or a shipped study's name.
    #[arg(required_unless_present = "compare")]
    study: Option<String>,
    /// The study folder. Default: studies/<the study's name> (with --compare: studies/compare).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seeds a schedule, instead of the study file's `grid.seeds` (3 when it has none). A
    /// finished study run again with more seeds trains only the new ones.
    #[arg(long, conflicts_with = "report")]
    seeds: Option<usize>,
    /// Study folders whose reports to put side by side, into --out (`compare.md`).
    #[arg(long, num_args = 2.., value_name = "STUDY_FOLDER",
          conflicts_with_all = ["study", "report", "seeds"])]
    compare: Vec<PathBuf>,
    /// `cpu`, `cuda` or `cuda:N`. Default: the first GPU if there is one, else the CPU.
    #[arg(long)]
    device: Option<String>,
    /// Only write the report again, from the results saved in --out.
    #[arg(long)]
    report: bool,
    /// Runs trained at a time, each by a process of this program (its log in OUT/logs/). A
    /// small model leaves most of a GPU idle, so several at once finish a grid sooner.
    #[arg(long, default_value_t = 1, conflicts_with = "report")]
    jobs: usize,
    /// Train and evaluate only this run of the study, without the report (what each process of
    /// --jobs does).
    #[arg(long, hide = true, conflicts_with_all = ["report", "jobs"])]
    run: Option<String>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(args: StudyArgs) -> CliResult {
    signals::install(&STOP)?;
    let Some(study) = &args.study else {
        let out = args.out.unwrap_or_else(|| PathBuf::from("studies/compare"));
        let files = report::compare(&args.compare, &out)?;
        println!("{}", std::fs::read_to_string(&files[0])?);
        return Ok(());
    };
    let (mut spec, name) = study::resolve(study)?;
    if let Some(n) = args.seeds {
        spec = spec.with_seeds(n)?;
    }
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
    let options = StudyOptions {
        device,
        progress: !args.quiet,
        stop: &STOP,
        say: &mut |line| eprintln!("{line}"),
    };
    if let Some(run) = &args.run {
        if !study::run_one(&spec, &out, run, options)? {
            std::process::exit(signals::exit_status().unwrap_or(130));
        }
        return Ok(());
    }
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
    if args.jobs == 0 {
        return Err("--jobs 0: a study trains one run at a time or more".into());
    }
    if args.jobs > 1 {
        study::prepare(&spec, &out, device)?;
        let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        let mut common = vec!["--quiet".to_string()];
        if let Some(d) = &args.device {
            common.extend(["--device".into(), d.clone()]);
        }
        if let Some(n) = args.seeds {
            common.extend(["--seeds".into(), n.to_string()]);
        }
        if !study_jobs::train(study, &common, &out, &names, args.jobs, &STOP)? {
            std::process::exit(signals::exit_status().unwrap_or(130));
        }
    }
    let outcome = study::run(&spec, &out, options)?;
    match outcome.report {
        Some(report) => println!("{}", std::fs::read_to_string(&report)?),
        None => {
            std::io::stdout().flush()?;
            std::process::exit(signals::exit_status().unwrap_or(130));
        }
    }
    Ok(())
}
