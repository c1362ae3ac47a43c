//! `learn --check FILE`: the learning gate's driver. It reads the gate's file
//! (`swax_bench::gate`), plans a run for every case, form and seed, trains those not yet
//! finished `--jobs` at a time (each a process of this program, which trains it as the
//! benchmark does), then judges each case from its runs' metrics, prints the table, draws each
//! case's curves and appends a line per case and form to the results, named after the gate's
//! file (`learning-gate.toml`: `learning-gate.jsonl`).
use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::{json, Value};
use swax_bench::gate::{self, Gate, Summary};
use swax_bench::learning::Outcome;
use swax_bench::record;
use swax_hybrid::config::Config;
use swax_tensor::Device;

use super::{config, records, Args};

type Error = Box<dyn std::error::Error>;

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
    /// of a run cut short would read its recall part way, and of a run with no metrics, 0%.
    fn finished(&self, a: &Args) -> Result<(), String> {
        let dir = self.run_dir(a);
        let last = records(&dir)
            .iter()
            .filter_map(|r| r["step"].as_u64())
            .max();
        match last {
            Some(step) if step >= self.case.steps => Ok(()),
            last => Err(format!(
                "{} ended at step {} of {}",
                dir.display(),
                last.unwrap_or(0),
                self.case.steps
            )),
        }
    }

    /// The run folder the child trains into (as the benchmark names it: after the case's task).
    fn run_dir(&self, a: &Args) -> PathBuf {
        let c = self.case;
        self.dir.join(format!(
            "{}-{}-lr{:e}-s{}",
            c.task(&a.task),
            c.pattern,
            c.lr,
            self.seed
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
pub fn check(a: &Args, file: &Path, device: Device) -> Result<bool, Error> {
    let g = load(file)?;
    let cases = chosen_cases(a, &g, file)?;
    let runs = plan(a, &g, &cases)?;
    for run in runs.iter().filter(|r| r.seed == 0) {
        run.child_config(a, &g.settings, device)
            .map_err(|e| format!("{}: {e}", file.display()))?;
    }
    for run in &runs {
        run.trained_as_now(a, &g.settings, device)?;
    }
    let timing = train_or_judge(a, &g.settings, device, &runs, cases.len())?;
    let how = match timing {
        Some((m, trained)) if trained < runs.len() => format!(
            "{m:.1} min on {device} for {trained} of its {} runs (the others were trained before)",
            runs.len()
        ),
        Some((m, _)) => format!("{m:.1} min on {device}"),
        None => format!("judged from the runs in {}", a.out.display()),
    };
    println!("\nlearning gate ({}), {how}", file.display());
    println!("| case | form | seeds learned | median final | median tokens to 50% | per seed | verdict |");
    println!("|---|---|---|---|---|---|---|");
    let stem = file
        .file_stem()
        .map_or("learning-gate".into(), |s| s.to_string_lossy());
    let record = Record {
        bench: stem.to_string(),
        // Judged runs were trained elsewhere: the device that trained them is what `--device`
        // names, not the one judging them.
        device: match (a.judge, a.device.as_deref()) {
            (true, None) => "not recorded (judged; --device names it)".to_string(),
            (true, Some(d)) => d.to_string(),
            (false, _) => record::device(device),
        },
        minutes: timing.map(|t| t.0),
        runs: runs.len(),
        runs_trained: timing.map_or(0, |t| t.1),
        date: record::today(),
        commit: record::commit(),
    };
    let (mut lines, mut passed) = (Vec::new(), true);
    for &case in &cases {
        let forms = outcomes(a, &g.settings, case, &runs);
        let Some(bad) = verdict(case, &g.settings, &forms) else {
            println!(
                "| {} | - | not run: it trains only {:?} | | | | |",
                case.name(),
                case.forms
            );
            continue;
        };
        passed &= bad.is_empty();
        let chart = a.out.join("gate").join(format!("{}.svg", case.name()));
        let curves: Vec<(&str, &[Outcome])> = forms
            .iter()
            .map(|f| (f.form, f.outcomes.as_slice()))
            .collect();
        std::fs::write(&chart, gate::curves_svg(&case.name(), &curves))
            .map_err(|e| format!("{}: {e}", chart.display()))?;
        lines.extend(report(a, &g.settings, case, &forms, &bad, &record));
    }
    let results = a.results.with_file_name(format!("{stem}.jsonl"));
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

fn load(file: &Path) -> Result<Gate, Error> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Gate::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?)
}

/// The cases `--cases` names (all where it names none), after checking `--forms`.
fn chosen_cases<'g>(a: &Args, g: &'g Gate, file: &Path) -> Result<Vec<&'g gate::Case>, Error> {
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
    Ok(cases)
}

/// A run for every case, form it trains and seed.
fn plan<'g>(a: &'g Args, g: &Gate, cases: &[&'g gate::Case]) -> Result<Vec<GateRun<'g>>, Error> {
    let mut runs = Vec::new();
    for &case in cases {
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
    Ok(runs)
}

/// Trains the runs not yet finished (with --judge: checks that every run finished). Returns the
/// minutes the training took and how many runs it trained; none with --judge.
fn train_or_judge(
    a: &Args,
    s: &gate::Settings,
    device: Device,
    runs: &[GateRun],
    cases: usize,
) -> Result<Option<(f64, usize)>, Error> {
    if a.judge {
        runs.iter()
            .try_for_each(|r| r.finished(a))
            .map_err(|e| format!("--judge: {e}: train it (without --judge) first"))?;
        return Ok(None);
    }
    // A gate that a time limit cut off goes on where it stopped: the runs it finished are
    // judged as they are, and the time is that of the runs trained now.
    let jobs = a
        .jobs
        .unwrap_or(if matches!(device, Device::Cuda(_)) {
            16
        } else {
            1
        })
        .max(1);
    let train: Vec<&GateRun> = runs.iter().filter(|r| r.finished(a).is_err()).collect();
    eprintln!(
        "learning gate: {cases} cases, {} runs ({} of them already trained in {}), {jobs} at a time on {device}",
        runs.len(),
        runs.len() - train.len(),
        a.out.display()
    );
    let clock = std::time::Instant::now();
    train_all(a, s, device, &train, jobs)?;
    // Every run judged must have trained to its end where the gate reads it.
    runs.iter().try_for_each(|r| r.finished(a)).map_err(|e| {
        format!("{e} after training it: its process succeeded without its metrics there")
    })?;
    Ok(Some((clock.elapsed().as_secs_f64() / 60.0, train.len())))
}

/// One form of a case: its runs' outcomes, seed by seed, and their summary.
struct FormOutcomes<'a> {
    form: &'a str,
    summary: Summary,
    outcomes: Vec<Outcome>,
}

/// The outcomes of each form of `case` that was trained.
fn outcomes<'a>(
    a: &'a Args,
    s: &gate::Settings,
    case: &gate::Case,
    runs: &[GateRun],
) -> Vec<FormOutcomes<'a>> {
    let form = |form: &'a str| {
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
        FormOutcomes {
            form,
            summary: Summary::of(&outcomes, s.learned),
            outcomes,
        }
    };
    a.forms
        .iter()
        .filter(|f| case.trains(f))
        .map(|f| form(f))
        .collect()
}

/// The case's failures (empty: it passed): fused against reference where both trained, else the
/// one form against the figures the file keeps. None where no form trained.
fn verdict(case: &gate::Case, s: &gate::Settings, forms: &[FormOutcomes]) -> Option<Vec<String>> {
    let of = |name: &str| forms.iter().find(|f| f.form == name).map(|f| &f.summary);
    Some(match (of("fused"), of("reference")) {
        (Some(fused), Some(reference)) => gate::judge(case, s, fused, reference),
        (Some(f), None) => gate::judge_form(case, "fused", f),
        (None, Some(r)) => gate::judge_form(case, "reference", r),
        (None, None) => return None,
    })
}

/// What every line of a gate's results records beside its case.
struct Record {
    bench: String,
    device: String,
    minutes: Option<f64>,
    runs: usize,
    runs_trained: usize,
    date: String,
    commit: String,
}

/// Prints the case's rows of the table (its verdict on the first) and returns their JSON lines.
fn report(
    a: &Args,
    s: &gate::Settings,
    case: &gate::Case,
    forms: &[FormOutcomes],
    bad: &[String],
    r: &Record,
) -> Vec<Value> {
    let mut lines = Vec::new();
    for (i, f) in forms.iter().enumerate() {
        let per_seed: Vec<String> = f
            .outcomes
            .iter()
            .map(|o| format!("{:.1}", 100.0 * o.final_accuracy))
            .collect();
        let verdict = match (i, bad.is_empty()) {
            (0, true) => "pass".to_string(),
            (0, false) => format!("FAIL: {}", bad.join("; ")),
            _ => String::new(),
        };
        let sum = &f.summary;
        println!(
            "| {} | {} | {} of {} | {:.1}% | {} | {} | {verdict} |",
            case.name(),
            f.form,
            sum.learned,
            sum.seeds,
            100.0 * sum.median_final,
            sum.median_tokens_to_50
                .map_or("-".to_string(), |t| format!("{:.2}M", t / 1e6)),
            per_seed.join(" "),
        );
        lines.push(json!({
            "bench": r.bench, "case": case.name(), "form": f.form, "pattern": case.pattern,
            "task": case.task(&a.task), "seq_len": case.seq_len, "pairs": case.pairs,
            "steps": case.steps, "lr": case.lr,
            "sets": s.sets.iter().chain(&case.sets).collect::<Vec<_>>(),
            "seeds": sum.seeds, "learned": sum.learned,
            "median_final": sum.median_final, "median_tokens_to_50": sum.median_tokens_to_50,
            "finals": f.outcomes.iter().map(|o| o.final_accuracy).collect::<Vec<_>>(),
            "tokens_to_50": f.outcomes.iter().map(|o| o.tokens_to_50).collect::<Vec<_>>(),
            "curves": f.outcomes.iter().map(|o| &o.curve).collect::<Vec<_>>(),
            "passed": bad.is_empty(), "failures": bad,
            "device": r.device, "minutes": r.minutes, "runs": r.runs,
            "runs_trained": r.runs_trained, "date": r.date, "commit": r.commit,
        }));
    }
    lines
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
