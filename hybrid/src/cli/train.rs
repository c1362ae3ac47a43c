//! `swax train`: resolve the config (`--config`, `--set`), pick the device (the GPU when there
//! is one), train (see `swax_hybrid::train`), print the summary. SIGINT (Ctrl-C) or SIGTERM
//! stops after the current step with a checkpoint and exits 130 or 143 (`signals`); `--resume`
//! continues a run from its latest one.
//!
//! Several GPUs: `--gpus N` starts N ranks of this command (`launch`); a process started by an
//! external launcher (torchrun, srun) finds its rank in the environment (`train::nccl::Place`)
//! and trains as that rank, through NCCL.
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::Args;
use swax_hybrid::config::Config;
use swax_hybrid::train::nccl::{NcclGroup, Place};
use swax_hybrid::train::{self, Options};

use super::{launch, signals, whole, CliResult};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct TrainArgs {
    /// A config file, or the name of a built-in one (swax-tiny, swax-tiny-gdn, rattention-tiny,
    /// swa-full-tiny, transformer-tiny, swax-small, swax-small-gdn, rattention-small, swax-1.4b).
    /// Default: swax-tiny. With --resume, the run's own config.toml.
    #[arg(long)]
    config: Option<String>,
    /// Override a config field, e.g. `--set train.steps=200 --set model.pattern=SG`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// What to train on (sets data.source): `corpus`, `mqar`, `passkey`, `recall-mix`, or a
    /// folder of shards from `swax prepare`.
    #[arg(long)]
    data: Option<String>,
    /// `cpu`, `cuda` or `cuda:N`. Default: the first GPU if there is one, else the CPU.
    #[arg(long)]
    device: Option<String>,
    /// The run folder. Default: runs/<model name>, or the first free runs/<model name>-N.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in --out from its latest checkpoint.
    #[arg(long, requires = "out")]
    resume: bool,
    /// With --resume, go on with data other than the run was trained on (from its start).
    #[arg(long, requires = "resume")]
    allow_data_change: bool,
    /// Stop (with a checkpoint) after this many steps in total, short of train.steps.
    #[arg(long, value_parser = whole::<u64>)]
    stop_at: Option<u64>,
    /// No progress bar, nor progress lines where stderr is not a terminal.
    #[arg(long)]
    quiet: bool,
    /// Time the phases of each step (data, forward, backward, optimizer) with the device
    /// synchronized between them, and print where the time went, and (on the GPU) the kernel
    /// launches, cuBLAS calls and host syncs a step makes. Slows training a little.
    #[arg(long)]
    profile: bool,
    /// Train on this many GPUs of this machine, one process each, through NCCL (the global
    /// batch stays data.batch_size x train.grad_accum; N must divide train.grad_accum).
    #[arg(long, value_parser = whole::<usize>, value_name = "N")]
    gpus: Option<usize>,
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(mut args: TrainArgs) -> CliResult {
    // First: every thread started later inherits the blocked signals.
    signals::install(&STOP)?;
    if let Some(source) = &args.data {
        let quoted = toml::Value::String(source.clone()).to_string();
        args.sets.push(format!("data.source={quoted}"));
    }
    let cfg = match (&args.out, args.resume) {
        (Some(out), true) => {
            if args.config.is_some() {
                return Err(
                    "--resume continues with the run's own config.toml; drop --config".into(),
                );
            }
            let path = out.join("config.toml");
            Config::load(&path)
                .map_err(|e| format!("{e} (is {} a run folder?)", out.display()))?
                .with_overrides(&args.sets)?
        }
        _ => Config::resolve(args.config.as_deref(), &args.sets)?,
    };
    let place = Place::from_env(|k| std::env::var(k).ok())?;
    let made = args.out.is_none();
    let out = match (&args.out, &place) {
        (Some(out), _) => out.clone(),
        // Each rank would take a folder of its own.
        (None, Some(p)) => {
            return Err(format!(
                "rank {} of {}, started by a launcher: give --out, the run folder every rank \
                 shares",
                p.rank, p.world
            )
            .into())
        }
        (None, None) => train::fresh_run_dir("runs".as_ref(), &cfg.model.name)?,
    };
    let trained = train_into(&args, &cfg, place, out.clone());
    if made {
        train::remove_unused_run_dir(&out);
    }
    trained
}

/// Trains `cfg` into `out` as this process's place says (one process, the launcher of
/// `--gpus` ranks, or one rank).
fn train_into(args: &TrainArgs, cfg: &Config, place: Option<Place>, out: PathBuf) -> CliResult {
    if let (Some(gpus), None) = (args.gpus.filter(|&n| n > 1), &place) {
        swax_hybrid::train::distributed::micro_batches(cfg.train.grad_accum, gpus)?;
        let argv: Vec<String> = std::env::args().skip(1).collect();
        return launch::launch(gpus, &launch::rank_args(&argv, &out), &STOP);
    }
    let device = match &place {
        Some(p) => p.device(),
        None => super::device(args.device.as_deref())?,
    };
    let rank = place.as_ref().map_or(0, |p| p.rank);
    let m = &cfg.model;
    let ranks = place
        .as_ref()
        .map_or(String::new(), |p| format!(" x {} ranks", p.world));
    if rank == 0 {
        eprintln!(
            "training {} ({} x{} layers, d_model {}, T {}, B {}) on {device}{ranks} for {} steps \
         into {}",
            m.name,
            m.pattern,
            m.n_layers,
            m.d_model,
            cfg.data.seq_len,
            cfg.data.batch_size,
            cfg.train.steps,
            out.display()
        );
    }
    let opts = Options {
        out,
        device,
        resume: args.resume,
        allow_data_change: args.allow_data_change,
        stop_at: args.stop_at,
        progress: !args.quiet,
        profile: args.profile,
        stop: &STOP,
    };
    let summary = match &place {
        None => train::train(cfg, &opts)?,
        Some(p) => {
            let mut group = NcclGroup::join(p).map_err(|e| format!("rank {}: {e}", p.rank))?;
            train::train_in(cfg, &opts, &mut group).map_err(|e| format!("rank {}: {e}", p.rank))?
        }
    };
    if rank == 0 {
        print!("{}", summary.report());
    }
    if let Some(status) = signals::exit_status().filter(|_| summary.interrupted) {
        std::io::stdout().flush()?;
        std::process::exit(status);
    }
    Ok(())
}
