//! The learning benchmark: trains each layer pattern on recall data (Zoology's MQAR, or pass keys
//! to copy) at a few learning rates and prints held-out recall against the tokens seen, each
//! pattern at its best rate, beside what Zoology (arXiv 2312.04927) reports: attention solves MQAR
//! at every width, gated recurrences when their state is large enough.
//!
//!   learn --task mqar --patterns S,M,SM --lrs 1e-3,3e-3 --steps 2000
//!
//! Runs go to `--out` (default `bench/runs/learn`), one folder each; a finished run is not
//! trained again, and one cut off continues from its last checkpoint (`--save-every`), so an
//! interrupted benchmark continues where it stopped. Each run's outcome is
//! appended to `bench/results/learn.jsonl`.
//!
//!   learn --check bench/learning-gate.toml [--jobs 16]
//!
//! runs the learning gate (`swax_bench::gate`): every case of the file, several seeds, with the
//! fused kernels and with the reference forms, `--jobs` runs at a time (each a process of this
//! program), then prints each case's verdict beside the figures the file expects, appends a line
//! per case and form to `bench/results/learning-gate.jsonl`, and exits non-zero where a fused
//! form falls short. Run again into the same `--out`, a gate trains only the runs it has not
//! finished, each from its last checkpoint, so one that a time limit cut off goes on where it
//! stopped.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use clap::Parser;
use serde_json::{json, Value};
use swax_bench::gate::{self, Gate, Summary};
use swax_bench::learning::{best_per_pattern, Outcome};
use swax_bench::record;
use swax_hybrid::config::Config;
use swax_hybrid::train::{self, checkpoint, Options};
use swax_tensor::Device;

#[derive(Debug, Parser)]
struct Args {
    /// `mqar` or `passkey` (the recall sources of `swax train --data`).
    #[arg(long, default_value = "mqar")]
    task: String,
    #[arg(long, value_delimiter = ',', default_value = "F,S,M,G,R,SM,SG,RRRF")]
    patterns: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "1e-3,3e-3")]
    lrs: Vec<f64>,
    #[arg(long, default_value_t = 2)]
    layers: usize,
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    #[arg(long, default_value_t = 2)]
    heads: usize,
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// MQAR key-value pairs per row (0: seq_len / 16).
    #[arg(long, default_value_t = 16)]
    pairs: usize,
    /// The attention window of S and R layers (0: the whole sequence).
    #[arg(long, default_value_t = 0)]
    window: usize,
    #[arg(long, default_value_t = 1500)]
    steps: u64,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long, default_value_t = 100)]
    eval_every: u64,
    /// Steps between a run's checkpoints (0: only at its end). A process killed by a time limit
    /// saves nothing, so its run continues from the last of these when trained again.
    #[arg(long, default_value_t = 500)]
    save_every: u64,
    /// Held-out answers scored at each evaluation.
    #[arg(long, default_value_t = 256)]
    probes: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `cpu`, `cuda`; default: the GPU if there is one. With --judge, the device that trained
    /// the runs, as the results should record it (for example `cuda:0 (H100)`).
    #[arg(long)]
    device: Option<String>,
    #[arg(long, default_value = "bench/runs/learn")]
    out: PathBuf,
    #[arg(long, default_value = "bench/results/learn.jsonl")]
    results: PathBuf,
    /// Further config overrides, `KEY=VALUE` as `swax train --set` takes them (applied last).
    #[arg(long = "set")]
    sets: Vec<String>,
    /// Run the learning gate of this file (see `swax_bench::gate`) instead of the benchmark.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// The gate's runs at a time (default: 16 on a GPU, 1 on the CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// The gate's cases to run, by name (`M-T256`); default all.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// With --check: train nothing, judge the finished runs already in --out (a gate whose
    /// judgement a time limit cut off); a run that did not finish is an error naming it.
    #[arg(long)]
    judge: bool,
    /// The gate's forms to train: `fused`, `reference` or both (the default). With one, each
    /// case is judged only against the figures its file keeps, not against the other form.
    #[arg(long, value_delimiter = ',', default_values_t = gate::FORMS.map(String::from))]
    forms: Vec<String>,
}

static NEVER: AtomicBool = AtomicBool::new(false);

fn config(a: &Args, pattern: &str, lr: f64) -> Result<Config, Box<dyn std::error::Error>> {
    let window = match a.window {
        0 => a.seq_len,
        w => w,
    };
    let sets = [
        format!("model.name=\"learn-{}-{pattern}\"", a.task),
        format!("model.pattern=\"{pattern}\""),
        format!("model.n_layers={}", a.layers.max(pattern.len())),
        format!("model.d_model={}", a.d_model),
        format!("model.n_heads={}", a.heads),
        format!("model.n_kv_heads={}", a.heads),
        format!("model.d_ff={}", 2 * a.d_model),
        format!("data.source=\"{}\"", a.task),
        format!("data.seq_len={}", a.seq_len),
        format!("data.batch_size={}", a.batch),
        format!("data.mqar_pairs={}", a.pairs),
        format!("train.steps={}", a.steps),
        format!("train.w_short={window}"),
        format!("train.w_long={window}"),
        "train.p_short=0".into(),
        "train.anneal_fraction=0".into(),
        format!("train.eval_every={}", a.eval_every),
        "train.eval_batches=2".into(),
        format!("train.save_every={}", a.save_every),
        format!("train.recall_probes={}", a.probes),
        format!("train.seed={}", a.seed),
        format!("optim.lr={lr}"),
        format!("optim.warmup_steps={}", (a.steps / 20).max(1)),
    ];
    let sets: Vec<String> = sets.into_iter().chain(a.sets.iter().cloned()).collect();
    Ok(Config::resolve(Some("swax-tiny"), &sets)?)
}

fn records(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn main() {
    // Errors in plain words (a returned error would print as its Debug form, quotes escaped).
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let device = match a.device.as_deref() {
        Some("cpu") => Device::Cpu,
        Some(_) => Device::Cuda(0),
        None if swax_tensor::cuda::device(0).is_ok() => Device::Cuda(0),
        None => Device::Cpu,
    };
    if a.judge && a.check.is_none() {
        return Err("--judge judges a gate's runs: give the gate with --check".into());
    }
    if let Some(file) = &a.check {
        let passed = check(&a, file, device)?;
        std::process::exit(if passed { 0 } else { 1 });
    }
    let window = match a.window {
        0 => a.seq_len,
        w => w,
    };
    let mut outcomes = Vec::new();
    for pattern in &a.patterns {
        for &lr in &a.lrs {
            let cfg = config(&a, pattern, lr)?;
            let run = a
                .out
                .join(format!("{}-{pattern}-lr{lr:e}-s{}", a.task, a.seed));
            let done = checkpoint::latest(&run)
                .is_some_and(|c| c.ends_with(format!("step-{:07}", a.steps)));
            if !done {
                eprintln!("training {pattern} at lr {lr:e} into {}", run.display());
                let resume = checkpoint::latest(&run).is_some();
                if !resume {
                    let _ = std::fs::remove_dir_all(&run);
                }
                train::train(
                    &cfg,
                    &Options {
                        out: run.clone(),
                        device,
                        resume,
                        allow_data_change: false,
                        stop_at: None,
                        progress: false,
                        profile: false,
                        stop: &NEVER,
                    },
                )?;
            }
            outcomes.push(Outcome::score(pattern, lr, &records(&run), window));
        }
    }

    let tokens = |t: Option<u64>| t.map_or("-".to_string(), |t| format!("{:.2}M", t as f64 / 1e6));
    println!(
        "\n{} recall, {} layers, d_model {}, T {}, {} pairs, window {window}, {} steps of {} rows, on {device}",
        a.task, a.layers, a.d_model, a.seq_len, a.pairs, a.steps, a.batch
    );
    println!("| pattern | best lr | final accuracy | tokens to 50% | tokens to 90% | loss spike |");
    println!("|---|---|---|---|---|---|");
    for o in best_per_pattern(&outcomes) {
        println!(
            "| {} | {:e} | {:.1}% | {} | {} | {:.2} |",
            o.pattern,
            o.lr,
            100.0 * o.final_accuracy,
            tokens(o.tokens_to_50),
            tokens(o.tokens_to_90),
            o.spike
        );
    }
    let (date, commit) = (record::today(), record::commit());
    let lines: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "task": a.task, "pattern": o.pattern, "lr": o.lr, "layers": a.layers,
                "d_model": a.d_model, "heads": a.heads, "seq_len": a.seq_len, "pairs": a.pairs,
                "window": window, "steps": a.steps, "batch": a.batch, "seed": a.seed,
                "device": device.to_string(), "final_accuracy": o.final_accuracy,
                "tokens_to_50": o.tokens_to_50, "tokens_to_90": o.tokens_to_90,
                "spike": o.spike, "curve": o.curve, "sets": a.sets, "date": date,
                "commit": commit,
            })
        })
        .collect();
    record::append(&a.results, &lines)?;
    Ok(())
}

/// One run of the gate: a case in a form at a seed, trained by a process of this program.
struct GateRun<'a> {
    case: &'a gate::Case,
    form: &'a str,
    seed: u64,
    dir: PathBuf,
}

impl GateRun<'_> {
    /// The child's command line (without the program): the case's shape and schedule, the
    /// settings' and the case's own `sets`.
    fn args(&self, a: &Args, s: &gate::Settings, device: Device) -> Vec<String> {
        let c = self.case;
        let device = match device {
            Device::Cuda(_) => "cuda",
            _ => "cpu",
        };
        let args = vec![
            format!("--device={device}"),
            format!("--task={}", c.task(&a.task)),
            format!("--patterns={}", c.pattern),
            format!("--lrs={:e}", c.lr),
            format!("--layers={}", s.layers),
            format!("--d-model={}", s.d_model),
            format!("--heads={}", s.heads),
            format!("--seq-len={}", c.seq_len),
            format!("--pairs={}", c.pairs),
            format!("--steps={}", c.steps),
            format!("--batch={}", s.batch),
            format!("--eval-every={}", s.eval_every),
            format!("--save-every={}", a.save_every),
            format!("--probes={}", s.probes),
            format!("--seed={}", self.seed),
            format!("--out={}", self.dir.display()),
            format!("--results={}", self.dir.join("learn.jsonl").display()),
            format!("--set=model.mixers={:?}", self.form),
        ];
        let sets = s.sets.iter().chain(&c.sets);
        args.into_iter()
            .chain(sets.map(|set| format!("--set={set}")))
            .collect()
    }

    fn command(&self, a: &Args, s: &gate::Settings, device: Device) -> std::process::Command {
        let mut cmd = std::process::Command::new(std::env::current_exe().expect("this program"));
        cmd.args(self.args(a, s, device));
        cmd
    }

    /// The config the child would train, resolved here: a mistyped key or a bad value in the
    /// gate's file is named before any run starts.
    fn child_config(&self, a: &Args, s: &gate::Settings, device: Device) -> Result<Config, String> {
        let name = self.case.name();
        let argv = std::iter::once("learn".to_string()).chain(self.args(a, s, device));
        let child = Args::try_parse_from(argv).map_err(|e| format!("case {name}: {e}"))?;
        config(&child, &self.case.pattern, self.case.lr).map_err(|e| format!("case {name}: {e}"))
    }

    /// Refuses a run already in --out that its case, as the gate's file now has it, would not
    /// train (the file changed since): judged, it would pass for the case; continued, it would
    /// mix two settings. How often the run saved does not count.
    fn trained_as_now(&self, a: &Args, s: &gate::Settings, device: Device) -> Result<(), String> {
        let path = self.run_dir(a).join("config.toml");
        if !path.exists() {
            return Ok(());
        }
        let saved = Config::load(&path).map_err(|e| e.to_string())?;
        let mut now = self.child_config(a, s, device)?;
        now.train.save_every = saved.train.save_every;
        if saved == now {
            return Ok(());
        }
        let table = |c: &Config| toml::Value::try_from(c).expect("a config is TOML");
        Err(format!(
            "{}: trained with {}, where case {} now trains {}: the gate's file changed since \
             the run; train into another --out, or remove the run",
            self.run_dir(a).display(),
            differences(&table(&saved), &table(&now)).join(", "),
            self.case.name(),
            differences(&table(&now), &table(&saved)).join(", "),
        ))
    }

    /// Whether the run trained every step of its case (its metrics' last step): the judgement
    /// of a run cut short would read its recall part way.
    fn finished(&self, a: &Args) -> Result<(), String> {
        let dir = self.run_dir(a);
        let last = records(&dir)
            .iter()
            .filter_map(|r| r["step"].as_u64())
            .max();
        match last {
            Some(step) if step >= self.case.steps => Ok(()),
            last => Err(format!(
                "--judge: {} ended at step {} of {}: train it (without --judge) first",
                dir.display(),
                last.unwrap_or(0),
                self.case.steps
            )),
        }
    }

    /// The run folder the child trains into (as the benchmark names it).
    fn run_dir(&self, a: &Args) -> PathBuf {
        let c = self.case;
        self.dir.join(format!(
            "{}-{}-lr{:e}-s{}",
            a.task, c.pattern, c.lr, self.seed
        ))
    }
}

/// The `section.key = value` entries of config `a` that config `b` does not have alike.
fn differences(a: &toml::Value, b: &toml::Value) -> Vec<String> {
    let mut out = Vec::new();
    for (section, entries) in a.as_table().into_iter().flatten() {
        for (key, value) in entries.as_table().into_iter().flatten() {
            if b.get(section).and_then(|t| t.get(key)) != Some(value) {
                out.push(format!("{section}.{key} = {value}"));
            }
        }
    }
    out
}

/// Trains every run of the gate `--jobs` at a time, then judges each case. Returns whether
/// every case passed.
fn check(a: &Args, file: &Path, device: Device) -> Result<bool, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let g = Gate::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let cases: Vec<&gate::Case> = g
        .cases
        .iter()
        .filter(|c| a.cases.is_empty() || a.cases.contains(&c.name()))
        .collect();
    if cases.is_empty() {
        return Err(format!("{}: no case named {:?}", file.display(), a.cases).into());
    }
    if let Some(f) = a.forms.iter().find(|f| !gate::FORMS.contains(&f.as_str())) {
        return Err(format!("--forms {f}: a form is fused or reference").into());
    }
    let mut distinct = a.forms.clone();
    distinct.sort();
    distinct.dedup();
    if a.forms.is_empty() || distinct.len() < a.forms.len() {
        return Err("--forms: name fused, reference or both, each once".into());
    }
    let mut runs = Vec::new();
    for &case in &cases {
        for form in a.forms.iter().filter(|f| case.trains(f)) {
            for seed in 0..g.settings.seeds {
                let dir = a.out.join("gate").join(format!("{}-{form}", case.name()));
                runs.push(GateRun {
                    case,
                    form,
                    seed,
                    dir,
                });
            }
        }
    }
    if runs.is_empty() {
        return Err(format!("--forms {:?}: no case of those asked trains them", a.forms).into());
    }
    let jobs = a
        .jobs
        .unwrap_or(if matches!(device, Device::Cuda(_)) {
            16
        } else {
            1
        })
        .max(1);
    for run in runs.iter().filter(|r| r.seed == 0) {
        run.child_config(a, &g.settings, device)
            .map_err(|e| format!("{}: {e}", file.display()))?;
    }
    for run in &runs {
        run.trained_as_now(a, &g.settings, device)?;
    }
    let (minutes, runs_trained) = match a.judge {
        true => {
            runs.iter().try_for_each(|r| r.finished(a))?;
            (None, 0)
        }
        false => {
            // A gate that a time limit cut off goes on where it stopped: the runs it finished
            // are judged as they are, and the time is that of the runs trained now.
            let train: Vec<&GateRun> = runs.iter().filter(|r| r.finished(a).is_err()).collect();
            eprintln!(
                "learning gate: {} cases, {} runs ({} of them already trained in {}), {jobs} at a time on {device}",
                cases.len(),
                runs.len(),
                runs.len() - train.len(),
                a.out.display()
            );
            let clock = std::time::Instant::now();
            train_all(a, &g.settings, device, &train, jobs)?;
            (Some(clock.elapsed().as_secs_f64() / 60.0), train.len())
        }
    };
    let how = match minutes {
        Some(m) if runs_trained < runs.len() => format!(
            "{m:.1} min on {device} for {runs_trained} of its {} runs (the others were trained before)",
            runs.len()
        ),
        Some(m) => format!("{m:.1} min on {device}"),
        None => format!("judged from the runs in {}", a.out.display()),
    };
    println!("\nlearning gate ({}), {how}", file.display());
    println!("| case | form | seeds learned | median final | median tokens to 50% | per seed | verdict |");
    println!("|---|---|---|---|---|---|---|");
    let (date, commit) = (record::today(), record::commit());
    // Judged runs were trained elsewhere: the device that trained them is what `--device` names,
    // not the one judging them.
    let trained_on = match (a.judge, a.device.as_deref()) {
        (true, None) => "not recorded (judged; --device names it)".to_string(),
        (true, Some(d)) => d.to_string(),
        (false, _) => device.to_string(),
    };
    let (mut lines, mut passed) = (Vec::new(), true);
    for &case in &cases {
        let summary = |form: &str| -> (Summary, Vec<Outcome>) {
            let outcomes: Vec<Outcome> = runs
                .iter()
                .filter(|r| std::ptr::eq(r.case, case) && r.form == form)
                .map(|r| {
                    Outcome::score(
                        &case.pattern,
                        case.lr,
                        &records(&r.run_dir(a)),
                        case.seq_len,
                    )
                })
                .collect();
            (Summary::of(&outcomes, g.settings.learned), outcomes)
        };
        let forms: Vec<(&str, Summary, Vec<Outcome>)> = a
            .forms
            .iter()
            .filter(|f| case.trains(f))
            .map(|f| {
                let (s, o) = summary(f);
                (f.as_str(), s, o)
            })
            .collect();
        let of = |name: &str| forms.iter().find(|f| f.0 == name).map(|f| &f.1);
        let bad = match (of("fused"), of("reference")) {
            (Some(fused), Some(reference)) => gate::judge(case, &g.settings, fused, reference),
            (Some(s), None) => gate::judge_form(case, "fused", s),
            (None, Some(s)) => gate::judge_form(case, "reference", s),
            (None, None) => {
                println!(
                    "| {} | - | not run: it trains only {:?} | | | | |",
                    case.name(),
                    case.forms
                );
                continue;
            }
        };
        passed &= bad.is_empty();
        let chart = a.out.join("gate").join(format!("{}.svg", case.name()));
        let curves: Vec<(&str, &[Outcome])> =
            forms.iter().map(|(f, _, o)| (*f, o.as_slice())).collect();
        std::fs::write(&chart, gate::curves_svg(&case.name(), &curves))
            .map_err(|e| format!("{}: {e}", chart.display()))?;
        for (i, (form, s, outcomes)) in forms.iter().enumerate() {
            let per_seed: Vec<String> = outcomes
                .iter()
                .map(|o| format!("{:.1}", 100.0 * o.final_accuracy))
                .collect();
            // The verdict goes on the case's first line.
            let verdict = match (i, bad.is_empty()) {
                (0, true) => "pass".to_string(),
                (0, false) => format!("FAIL: {}", bad.join("; ")),
                _ => String::new(),
            };
            println!(
                "| {} | {form} | {} of {} | {:.1}% | {} | {} | {verdict} |",
                case.name(),
                s.learned,
                s.seeds,
                100.0 * s.median_final,
                s.median_tokens_to_50
                    .map_or("-".to_string(), |t| format!("{:.2}M", t / 1e6)),
                per_seed.join(" "),
            );
            lines.push(json!({
                "case": case.name(), "form": form, "pattern": case.pattern,
                "task": case.task(&a.task), "seq_len": case.seq_len, "pairs": case.pairs,
                "steps": case.steps, "lr": case.lr,
                "sets": g.settings.sets.iter().chain(&case.sets).collect::<Vec<_>>(),
                "seeds": s.seeds, "learned": s.learned,
                "median_final": s.median_final, "median_tokens_to_50": s.median_tokens_to_50,
                "finals": outcomes.iter().map(|o| o.final_accuracy).collect::<Vec<_>>(),
                "tokens_to_50": outcomes.iter().map(|o| o.tokens_to_50).collect::<Vec<_>>(),
                "curves": outcomes.iter().map(|o| &o.curve).collect::<Vec<_>>(),
                "passed": bad.is_empty(), "failures": bad,
                "device": trained_on, "minutes": minutes, "runs": runs.len(),
                "runs_trained": runs_trained, "date": date, "commit": commit,
            }));
        }
    }
    let results = a.results.with_file_name("learning-gate.jsonl");
    record::append(&results, &lines)?;
    println!(
        "\nlearning gate: {} ({} appended to {}; each case's curves in {})",
        if passed { "passed" } else { "FAILED" },
        lines.len(),
        results.display(),
        a.out.join("gate").join("CASE.svg").display()
    );
    Ok(passed)
}

/// Runs the children, `jobs` at a time; each child's output goes to a log in its folder. A
/// child that fails fails the gate, naming its log.
fn train_all(
    a: &Args,
    s: &gate::Settings,
    device: Device,
    runs: &[&GateRun],
    jobs: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut pending = runs.iter();
    let mut running: Vec<(std::process::Child, &GateRun, PathBuf)> = Vec::new();
    loop {
        while running.len() < jobs {
            let Some(run) = pending.next() else { break };
            std::fs::create_dir_all(&run.dir)?;
            let log = run.dir.join(format!("s{}.log", run.seed));
            let out = std::fs::File::create(&log)?;
            let child = run
                .command(a, s, device)
                .stdout(out.try_clone()?)
                .stderr(out)
                .spawn()?;
            running.push((child, run, log));
        }
        if running.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            match running[i].0.try_wait()? {
                None => i += 1,
                Some(status) => {
                    let (_, run, log) = running.swap_remove(i);
                    if !status.success() {
                        return Err(format!(
                            "{} {} seed {} failed ({status}): see {}",
                            run.case.name(),
                            run.form,
                            run.seed,
                            log.display()
                        )
                        .into());
                    }
                    eprintln!("done: {} {} seed {}", run.case.name(), run.form, run.seed);
                }
            }
        }
    }
}
