//! `swax study`: a window study from one TOML file. The file names a base config and its
//! overrides, a grid of window schedules (fixed short, fixed long, stochastic `p_short` with and
//! without the anneal, optionally for several layer patterns), each schedule at several seeds,
//! and an evaluation (tasks, lengths as multiples of the training length, depths, samples). The
//! study trains each run into `STUDY/runs/NAME` (a finished run is not trained again, an
//! interrupted one resumes), evaluates it at each window it trained at (`RUN/eval/wW/`, skipped
//! when that checkpoint's results are there), and writes `STUDY/report.md` and `report.json`
//! with its plots from the saved results alone (`report`): each figure as the median over the
//! seeds with its spread (`stats`).
pub mod report;
pub mod stats;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use swax_tensor::Device;

use crate::config::{Config, ConfigError};
use crate::eval::evaluate::{evaluate, Plan};
use crate::eval::results::EvalResults;
use crate::eval::run::Task;
use crate::eval::store;
use crate::loaded::load;
use crate::train::{self, checkpoint, memory, Options};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The studies shipped in `configs/studies/`, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "window-h200",
        include_str!("../../../configs/studies/window-h200.toml"),
    ),
    (
        "window-cpu",
        include_str!("../../../configs/studies/window-cpu.toml"),
    ),
    (
        "window-large",
        include_str!("../../../configs/studies/window-large.toml"),
    ),
    (
        "window-g",
        include_str!("../../../configs/studies/window-g.toml"),
    ),
    (
        "window-r",
        include_str!("../../../configs/studies/window-r.toml"),
    ),
    (
        "window-text",
        include_str!("../../../configs/studies/window-text.toml"),
    ),
    (
        "window-regime",
        include_str!("../../../configs/studies/window-regime.toml"),
    ),
    (
        "window-passkey",
        include_str!("../../../configs/studies/window-passkey.toml"),
    ),
];

/// A study file, or a shipped study's name; with the name its folder takes by default. A name
/// that is neither says so, listing the shipped studies; an error in a file that exists is that
/// error alone.
pub fn resolve(study: &str) -> Result<(StudySpec, String)> {
    if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == study) {
        return Ok((StudySpec::parse(text, name, None)?, name.to_string()));
    }
    let path = Path::new(study);
    let name = path
        .file_stem()
        .map_or("study".into(), |s| s.to_string_lossy().into_owned());
    if let Err(e) = std::fs::metadata(path) {
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "{study}: {e} (not a file, nor a shipped study: {})",
            names.join(", ")
        )
        .into());
    }
    Ok((StudySpec::load(path)?, name))
}

/// The study file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudySpec {
    pub study: Head,
    pub grid: Grid,
    pub eval: EvalSpec,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Head {
    /// What the study asks, for the report.
    pub description: String,
    /// A built-in config or a config file (relative to the study file).
    pub base: String,
    /// `key=value` overrides of the base for every run (as `swax train --set`).
    #[serde(default)]
    pub set: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    /// Layer patterns to study (each gets the whole grid); empty: the base's.
    #[serde(default)]
    pub patterns: Vec<String>,
    pub w_short: usize,
    pub w_long: usize,
    /// A run at the short window only and one at the long window only.
    #[serde(default = "yes")]
    pub fixed: bool,
    /// Stochastic runs: each step short with this probability, else long.
    #[serde(default)]
    pub p_short: Vec<f64>,
    /// Each stochastic run once per anneal fraction (0: none; 0.1: the last 10% long only).
    #[serde(default = "no_anneal")]
    pub anneal: Vec<f64>,
    /// Also attention alone (pattern S, the base's layers) at the long window, a schedule of its
    /// own (`S-long{w_long}`): whether attention solves the task within its window, which the
    /// papers' mechanism (a long window lets the memory stay lazy) needs.
    #[serde(default)]
    pub attention_alone: bool,
    /// Each schedule is trained this many times, at `train.seed` + 0, 1, ..: learning at this
    /// scale succeeds in some seeds and not others, so one seed says little.
    #[serde(default = "default_seeds")]
    pub seeds: usize,
}

/// Seeds a schedule when the study file does not say.
pub const DEFAULT_SEEDS: usize = 3;

fn default_seeds() -> usize {
    DEFAULT_SEEDS
}

fn yes() -> bool {
    true
}

fn no_anneal() -> Vec<f64> {
    vec![0.0]
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSpec {
    /// niah, passkey, mqar.
    pub tasks: Vec<String>,
    /// Evaluation lengths as multiples of the training length (1 to 16 and more).
    pub lengths: Vec<usize>,
    #[serde(default = "depths")]
    pub depths: Vec<f64>,
    pub samples: usize,
    /// Tokens per evaluation piece (0: the training length).
    #[serde(default, alias = "chunk")]
    pub piece: usize,
    /// The loss by position at the longest length.
    #[serde(default = "yes")]
    pub loss: bool,
    /// Also score the text tasks by generation, RULER's way, over this many generated tokens
    /// (0: teacher-forced exact match only).
    #[serde(default)]
    pub generate_tokens: usize,
}

fn depths() -> Vec<f64> {
    vec![0.0, 0.25, 0.5, 0.75, 1.0]
}

/// One run of the grid: its folder name (`SCHEDULE-seedN`), its schedule (`PATTERN-WINDOWS`,
/// what the report gathers its seeds under), its seed and its config.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub name: String,
    pub schedule: String,
    pub seed: u64,
    pub cfg: Config,
}

impl StudySpec {
    /// Reads and checks a study file.
    pub fn load(path: &Path) -> Result<StudySpec> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        StudySpec::parse(&text, &path.display().to_string(), path.parent())
    }

    /// A study from TOML text, checked (`origin` names it in errors); a `base` config file is
    /// looked for relative to `dir` first.
    pub fn parse(text: &str, origin: &str, dir: Option<&Path>) -> Result<StudySpec> {
        let mut spec: StudySpec = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        if let Some(base) = dir
            .map(|d| d.join(&spec.study.base))
            .filter(|b| b.is_file())
        {
            spec.study.base = base.display().to_string();
        }
        spec.runs().map_err(|e| format!("{origin}: {e}"))?;
        Ok(spec)
    }

    /// The study with `seeds` seeds per schedule (`swax study --seeds`), checked.
    pub fn with_seeds(&self, seeds: usize) -> Result<StudySpec> {
        if seeds == 0 {
            return Err(
                "--seeds 0: a study trains each schedule at one seed or more (3 by default)".into(),
            );
        }
        let mut spec = self.clone();
        spec.grid.seeds = seeds;
        Ok(spec)
    }

    /// The grid's runs, each config resolved and checked: every seed of the first schedule,
    /// then of the next.
    pub fn runs(&self) -> Result<Vec<RunSpec>> {
        self.check_grid()?;
        self.check_eval()?;
        let g = &self.grid;
        let base = Config::resolve(Some(&self.study.base), &self.study.set)?;
        let patterns = match g.patterns.is_empty() {
            true => vec![base.model.pattern.clone()],
            false => g.patterns.clone(),
        };
        let schedules = self.schedules()?;
        let long = self.long_schedule();
        // Every pattern with every schedule, then attention alone at the long window.
        let grid = patterns
            .iter()
            .flat_map(|pattern| schedules.iter().map(move |s| (pattern.clone(), s)));
        let alone = g.attention_alone.then(|| ("S".to_string(), &long));
        let mut runs = Vec::new();
        for (pattern, (schedule, p, anneal)) in grid.chain(alone) {
            let sets = [
                format!("model.pattern={pattern:?}"),
                format!("train.w_short={}", g.w_short),
                format!("train.w_long={}", g.w_long),
                format!("train.p_short={p}"),
                format!("train.anneal_fraction={anneal}"),
            ];
            let cfg = base
                .with_overrides(&sets)
                .map_err(|ConfigError(e)| format!("{pattern} {schedule}: {e}"))?;
            // The evaluation's lengths in tokens must be countable.
            self.plan(&cfg, g.w_long)?;
            runs.extend(self.seeds(&format!("{pattern}-{schedule}"), &cfg)?);
        }
        Ok(runs)
    }

    fn check_grid(&self) -> Result<()> {
        let g = &self.grid;
        if g.seeds == 0 {
            return Err(
                "grid.seeds = 0: a study trains each schedule at one seed or more (3 by default)"
                    .into(),
            );
        }
        if g.w_short == 0 || g.w_short >= g.w_long {
            return Err(format!(
                "grid.w_short {} must be positive and below grid.w_long {}",
                g.w_short, g.w_long
            )
            .into());
        }
        if let Some(p) = g
            .p_short
            .iter()
            .chain(&g.anneal)
            .find(|p| !(0.0..1.0).contains(*p))
        {
            return Err(format!("grid.p_short and grid.anneal hold {p}: each is in [0, 1)").into());
        }
        Ok(())
    }

    fn check_eval(&self) -> Result<()> {
        let e = &self.eval;
        if e.lengths.is_empty() || e.lengths.contains(&0) {
            return Err("eval.lengths: multiples of the training length, each at least 1".into());
        }
        if e.samples == 0 {
            return Err("eval.samples must be positive".into());
        }
        if e.depths.is_empty() {
            return Err("eval.depths is empty: at least one needle depth, in [0, 1]".into());
        }
        if let Some(d) = e.depths.iter().find(|d| !(0.0..=1.0).contains(*d)) {
            return Err(format!(
                "eval.depths holds {d}: a depth is a fraction of the context, in [0, 1]"
            )
            .into());
        }
        if e.tasks.is_empty() {
            let names: Vec<&str> = Task::ALL.iter().map(|t| t.name()).collect();
            return Err(format!(
                "eval.tasks is empty: the study evaluates retrieval, name at least one of {}",
                names.join(", ")
            )
            .into());
        }
        self.tasks()?;
        Ok(())
    }

    /// The grid's window schedules, as (name, p_short, anneal fraction): the fixed short and
    /// long windows, then each p_short with each anneal fraction.
    fn schedules(&self) -> Result<Vec<(String, f64, f64)>> {
        let g = &self.grid;
        let mut schedules = Vec::new();
        if g.fixed {
            schedules.push((format!("short{}", g.w_short), 1.0, 0.0));
            schedules.push(self.long_schedule());
        }
        for &p in &g.p_short {
            for &a in &g.anneal {
                let name = match a {
                    0.0 => format!("p{p}"),
                    _ => format!("p{p}-anneal{a}"),
                };
                schedules.push((name, p, a));
            }
        }
        if schedules.is_empty() {
            return Err("the grid has no run: set grid.fixed or grid.p_short".into());
        }
        Ok(schedules)
    }

    /// The fixed long window's schedule, which attention alone also trains at.
    fn long_schedule(&self) -> (String, f64, f64) {
        (format!("long{}", self.grid.w_long), 0.0, 0.0)
    }

    /// The runs of schedule `group`, one per seed from the config's `train.seed` on.
    fn seeds(&self, group: &str, cfg: &Config) -> Result<Vec<RunSpec>> {
        let mut runs = Vec::new();
        for i in 0..self.grid.seeds as u64 {
            let seed = cfg.train.seed.checked_add(i).ok_or_else(|| {
                format!("train.seed {} + {i}: past the largest seed", cfg.train.seed)
            })?;
            let cfg = cfg
                .with_overrides(&[format!("train.seed={seed}")])
                .map_err(|ConfigError(e)| format!("{group} seed {seed}: {e}"))?;
            runs.push(RunSpec {
                name: format!("{group}-seed{seed}"),
                schedule: group.to_string(),
                seed,
                cfg,
            });
        }
        Ok(runs)
    }

    fn tasks(&self) -> Result<Vec<Task>> {
        Ok(self
            .eval
            .tasks
            .iter()
            .map(|t| t.parse::<Task>())
            .collect::<std::result::Result<_, _>>()?)
    }

    /// The evaluation of `cfg`'s model at `window`.
    pub fn plan(&self, cfg: &Config, window: usize) -> Result<Plan> {
        let t = cfg.data.seq_len;
        Ok(Plan {
            tasks: self.tasks()?,
            loss: self.eval.loss,
            lengths: self
                .eval
                .lengths
                .iter()
                .map(|&k| {
                    k.checked_mul(t).ok_or_else(|| {
                        format!(
                            "eval.lengths {k} x data.seq_len {t}: more tokens than a length can \
                             count"
                        )
                    })
                })
                .collect::<std::result::Result<_, _>>()?,
            depths: self.eval.depths.clone(),
            window,
            samples: self.eval.samples,
            seed: 0,
            piece: match self.eval.piece {
                0 => t,
                c => c,
            },
            bucket: t,
            data: None,
            generate_tokens: self.eval.generate_tokens,
        })
    }
}

/// How the study is carried out.
pub struct StudyOptions<'a> {
    pub device: Device,
    pub progress: bool,
    /// Set (by a signal) to stop after the current training step, with a checkpoint.
    pub stop: &'static AtomicBool,
    pub say: &'a mut dyn FnMut(&str),
}

/// What the study did: `finished` is false when it was stopped before the report.
#[derive(Debug)]
pub struct Outcome {
    pub finished: bool,
    pub report: Option<PathBuf>,
}

/// The study of `spec` in the folder `out` (which keeps a copy of the spec: a folder holding
/// another study is refused).
pub fn run(spec: &StudySpec, out: &Path, mut opts: StudyOptions) -> Result<Outcome> {
    let runs = prepare(spec, out, opts.device)?;
    let mut results: Vec<EvalResults> = Vec::new();
    for r in &runs {
        match train_and_evaluate(spec, out, r, &mut opts)? {
            Some(mut evaluated) => results.append(&mut evaluated),
            None => {
                return Ok(Outcome {
                    finished: false,
                    report: None,
                })
            }
        }
    }
    let files = report::write(out, spec, &runs, &results)?;
    Ok(Outcome {
        finished: true,
        report: files.into_iter().next(),
    })
}

/// The study's run named `name` alone, trained and evaluated, without a report (`swax study
/// --jobs` gives each run to a process of its own, then writes the report from what they saved).
/// False when a stop interrupted it.
pub fn run_one(spec: &StudySpec, out: &Path, name: &str, mut opts: StudyOptions) -> Result<bool> {
    let runs = prepare(spec, out, opts.device)?;
    let Some(r) = runs.iter().find(|r| r.name == name) else {
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        return Err(format!("no run {name} in this study ({})", names.join(", ")).into());
    };
    Ok(train_and_evaluate(spec, out, r, &mut opts)?.is_some())
}

/// The study's runs, once every run's evaluation is known to fit the device and `out` keeps the
/// spec (before the first run trains).
pub fn prepare(spec: &StudySpec, out: &Path, device: Device) -> Result<Vec<RunSpec>> {
    let runs = spec.runs()?;
    for r in &runs {
        let plan = spec.plan(&r.cfg, r.cfg.train.w_long)?;
        let (lengths, samples) = (&plan.lengths, plan.samples);
        memory::check_eval(&r.cfg, device, lengths, samples, plan.piece, plan.loss)
            .map_err(|e| format!("{}: {e}", r.name))?;
    }
    keep_spec(spec, out)?;
    Ok(runs)
}

/// Trains run `r` (unless it has trained every step; from its checkpoint if it has one), then
/// evaluates it at each window it trained at. None when a stop interrupted the training.
fn train_and_evaluate(
    spec: &StudySpec,
    out: &Path,
    r: &RunSpec,
    opts: &mut StudyOptions,
) -> Result<Option<Vec<EvalResults>>> {
    let dir = out.join("runs").join(&r.name);
    let steps = r.cfg.train.steps;
    let at = checkpoint::latest(&dir).and_then(|c| checkpoint::read_state(&c).ok().map(|s| s.step));
    if at != Some(steps) {
        (opts.say)(&format!(
            "{}: training {} ({} steps{})",
            r.name,
            dir.display(),
            steps,
            at.map_or(String::new(), |s| format!(", resuming at {s}"))
        ));
        let summary = train::train(
            &r.cfg,
            &Options {
                out: dir.clone(),
                device: opts.device,
                resume: at.is_some(),
                allow_data_change: false,
                stop_at: None,
                progress: opts.progress,
                profile: false,
                stop: opts.stop,
            },
        )?;
        if summary.interrupted {
            (opts.say)("stopped: run the same command again to continue the study");
            return Ok(None);
        }
    }
    train::window_schedule(&r.cfg)
        .trained_windows()
        .into_iter()
        .map(|window| evaluated(spec, &dir, window, opts.device, steps, opts.say))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The results of `dir`'s final checkpoint at `window`: the saved ones when they are of that
/// step and hold every cell of the plan, else a new evaluation (saved).
fn evaluated(
    spec: &StudySpec,
    dir: &Path,
    window: usize,
    device: Device,
    step: u64,
    say: &mut dyn FnMut(&str),
) -> Result<EvalResults> {
    let eval_dir = dir.join("eval").join(format!("w{window}"));
    let saved = crate::eval::report::load(&eval_dir)
        .ok()
        .and_then(|mut r| r.pop());
    if let (Some(r), Some(latest)) = (saved.filter(|r| r.step == step), checkpoint::latest(dir)) {
        let plan = spec.plan(&checkpoint::config_of(&latest)?, window)?;
        if covers(&r, &plan) {
            return Ok(r);
        }
    }
    let loaded = load(dir, device)?;
    let plan = spec.plan(&loaded.cfg, window)?;
    say(&format!("{}: evaluating at window {window}", dir.display()));
    let results = evaluate(&loaded, &plan, &mut |line| say(line))?;
    store::save(&eval_dir, results.clone())?;
    Ok(results)
}

/// Whether `r` holds every (task, length) of `plan` and, if asked, the loss.
fn covers(r: &EvalResults, plan: &Plan) -> bool {
    let tasks = plan.tasks.iter().all(|t| {
        let have = r.lengths(t.name());
        plan.lengths.iter().all(|l| have.contains(l))
    });
    tasks && (!plan.loss || r.loss.is_some())
}

/// Writes the spec to `out/study.toml`, or checks that the one there is the same study. Only the
/// number of seeds may differ (`--seeds`): a run is named by its seed, so the runs of the seeds
/// both share are the same runs; the file then takes the new number.
fn keep_spec(spec: &StudySpec, out: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(format!(
            "{}: a file; a study's folder is a new folder or one a study made",
            out.display()
        )
        .into());
    }
    let path = out.join("study.toml");
    let text = toml::to_string(spec)?;
    // Compared as specs, not as text: one written under a field's old name (`eval.chunk`, now
    // `eval.piece`) is still the same study.
    let seeds_aside = |mut s: StudySpec| {
        s.grid.seeds = spec.grid.seeds;
        s
    };
    match std::fs::read_to_string(&path) {
        Ok(old) if toml::from_str::<StudySpec>(&old).is_ok_and(|old| old == *spec) => Ok(()),
        Ok(old) if toml::from_str::<StudySpec>(&old).is_ok_and(|old| seeds_aside(old) == *spec) => {
            swax_nn::checkpoint::write_atomic(&path, text.as_bytes())?;
            Ok(())
        }
        Ok(_) => Err(format!(
            "{} holds another study ({}): use another folder",
            out.display(),
            path.display()
        )
        .into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
            swax_nn::checkpoint::write_atomic(&path, text.as_bytes())?;
            Ok(())
        }
        Err(e) => Err(format!("{}: {e}", path.display()).into()),
    }
}
