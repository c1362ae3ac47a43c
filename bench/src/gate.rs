//! The learning gate (`learn --check`): does every fused mixer still learn what its reference
//! form learns? Each case of `bench/learning-gate.toml` (a pattern at one sequence length, with
//! its data and schedule) trains several seeds twice, with the fused kernels and with the
//! reference forms (`model.mixers`), and is judged against the reference and against the
//! figures the file keeps:
//!
//! - the seeds that learn (final held-out recall at least `learned`) must be as many for the
//!   fused form as for the reference, and at least the case's `min_learned`;
//! - the median final recall at least the case's `min_final` (the reference's minus `slack`);
//! - the median tokens to 50% recall at most the case's `max_tokens_to_50`, where it has one.
//!
//! A fail is not luck where the reference learns in every seed: the file's settings are chosen
//! (measured) so that it does. This module reads the file and judges scored runs; `learn`
//! trains them.
use serde::Deserialize;

use crate::learning::Outcome;

/// The two forms the gate compares: the fused kernels and the reference forms (`model.mixers`).
pub const FORMS: [&str; 2] = ["fused", "reference"];
/// The tasks a case can train (`learn --task`).
pub const TASKS: [&str; 2] = ["mqar", "passkey"];

/// The gate's file: shared settings and its cases.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub settings: Settings,
    #[serde(rename = "case")]
    pub cases: Vec<Case>,
}

/// What every case shares.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub layers: usize,
    pub d_model: usize,
    pub heads: usize,
    pub batch: usize,
    /// Seeds per case and form: 0, 1, ..
    pub seeds: u64,
    pub eval_every: u64,
    pub probes: usize,
    /// The final recall at which a seed counts as learned.
    pub learned: f64,
    /// How far the fused form's median final recall may fall below the reference's.
    pub slack: f64,
    /// Config overrides every case starts from, `KEY=VALUE` as `swax train --set` takes them
    /// (a case's own `sets` come after): a width, a warmup.
    #[serde(default)]
    pub sets: Vec<String>,
}

/// One pattern at one length, its schedule, and what it is expected to reach.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case is called in runs and reports (default `PATTERN-TLEN`, e.g. `M-T256`).
    pub name: Option<String>,
    pub pattern: String,
    /// The task the runs train and are scored on: `mqar` (absent) or `passkey`.
    pub task: Option<String>,
    pub seq_len: usize,
    /// MQAR's key-value pairs (passkey ignores them).
    pub pairs: usize,
    pub steps: u64,
    pub lr: f64,
    /// Seeds (of `settings.seeds`) that must learn, in either form.
    pub min_learned: u64,
    /// The median final recall either form must reach.
    pub min_final: f64,
    /// The median tokens to 50% recall either form must not exceed (absent: not judged).
    pub max_tokens_to_50: Option<f64>,
    /// Config overrides of this case, `KEY=VALUE` as `swax train --set` takes them (applied
    /// after the settings): a width, a warmup, an optimizer setting.
    #[serde(default)]
    pub sets: Vec<String>,
    /// The forms this case trains (absent: both). A long sequence's reference form can take
    /// several times the fused form's time; such a case is judged by its figures alone.
    pub forms: Option<Vec<String>>,
}

impl Case {
    /// `M-T256` (or the case's own name): how a case is named in runs and reports.
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}-T{}", self.pattern, self.seq_len))
    }

    /// The task this case trains: its own, else `default` (`learn --task`).
    pub fn task<'a>(&'a self, default: &'a str) -> &'a str {
        self.task.as_deref().unwrap_or(default)
    }

    /// Whether this case trains `form`.
    pub fn trains(&self, form: &str) -> bool {
        self.forms
            .as_ref()
            .is_none_or(|forms| forms.iter().any(|f| f == form))
    }
}

impl Gate {
    pub fn parse(text: &str) -> Result<Gate, String> {
        let gate: Gate = toml::from_str(text).map_err(|e| e.to_string())?;
        if gate.cases.is_empty() {
            return Err("the gate has no [[case]]".into());
        }
        let mut names: Vec<String> = gate.cases.iter().map(Case::name).collect();
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!(
                "two cases are named {}: give one a `name`, its runs share a folder",
                w[0]
            ));
        }
        for c in &gate.cases {
            if let Some(task) = c.task.as_deref().filter(|t| !TASKS.contains(t)) {
                return Err(format!(
                    "case {}: task {task:?}: a task is {}",
                    c.name(),
                    TASKS.join(" or ")
                ));
            }
            let forms = c.forms.as_deref().unwrap_or_default();
            if let Some(f) = forms.iter().find(|f| !FORMS.contains(&f.as_str())) {
                return Err(format!(
                    "case {}: form {f:?}: a form is fused or reference",
                    c.name()
                ));
            }
            if c.forms.is_some() && forms.is_empty() {
                return Err(format!("case {}: forms names no form", c.name()));
            }
        }
        if let Some(c) = gate
            .cases
            .iter()
            .find(|c| c.min_learned > gate.settings.seeds)
        {
            return Err(format!(
                "case {}: min_learned {} is more than the {} seeds",
                c.name(),
                c.min_learned,
                gate.settings.seeds
            ));
        }
        Ok(gate)
    }
}

/// One form's runs of a case, summarized.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub seeds: usize,
    pub learned: usize,
    pub median_final: f64,
    /// Over all seeds, a seed that never reached 50% counting as infinitely many tokens (so a
    /// median of None: half the seeds or more never did).
    pub median_tokens_to_50: Option<f64>,
}

/// The median of `v`, NaN for none (infinities sort last and stay infinite).
fn median(v: Vec<f64>) -> f64 {
    swax_hybrid::study::stats::median(&v).unwrap_or(f64::NAN)
}

impl Summary {
    pub fn of(runs: &[Outcome], learned: f64) -> Summary {
        let tokens = runs
            .iter()
            .map(|o| o.tokens_to_50.map_or(f64::INFINITY, |t| t as f64))
            .collect();
        let tokens = median(tokens);
        Summary {
            seeds: runs.len(),
            learned: runs.iter().filter(|o| o.final_accuracy >= learned).count(),
            median_final: median(runs.iter().map(|o| o.final_accuracy).collect()),
            median_tokens_to_50: tokens.is_finite().then_some(tokens),
        }
    }
}

/// What is wrong with a case's fused and reference runs, one line each (none: it passes).
pub fn judge(case: &Case, s: &Settings, fused: &Summary, reference: &Summary) -> Vec<String> {
    let mut bad = Vec::new();
    if fused.learned < reference.learned {
        bad.push(format!(
            "fused learned in {} of {} seeds, reference in {}",
            fused.learned, fused.seeds, reference.learned
        ));
    }
    if fused.median_final < reference.median_final - s.slack {
        bad.push(format!(
            "fused median recall {:.1}% below the reference's {:.1}% (slack {:.1})",
            100.0 * fused.median_final,
            100.0 * reference.median_final,
            100.0 * s.slack
        ));
    }
    bad.extend(judge_form(case, "fused", fused));
    bad.extend(judge_form(case, "reference", reference));
    bad
}

/// What is wrong with one form's runs against the figures the case expects (where the other
/// form was not run, this alone judges it).
pub fn judge_form(case: &Case, form: &str, r: &Summary) -> Vec<String> {
    let mut bad = Vec::new();
    if (r.learned as u64) < case.min_learned {
        bad.push(format!(
            "{form} learned in {} seeds, expected at least {}",
            r.learned, case.min_learned
        ));
    }
    if r.median_final < case.min_final {
        bad.push(format!(
            "{form} median recall {:.1}%, expected at least {:.1}%",
            100.0 * r.median_final,
            100.0 * case.min_final
        ));
    }
    if let Some(max) = case.max_tokens_to_50 {
        match r.median_tokens_to_50 {
            Some(t) if t <= max => {}
            Some(t) => bad.push(format!(
                "{form} median tokens to 50% {:.2}M, expected at most {:.2}M",
                t / 1e6,
                max / 1e6
            )),
            None => bad.push(format!("{form}: half its seeds or more never reached 50%")),
        }
    }
    bad
}

/// A case's recall curves as an SVG chart: held-out recall (%) against the tokens trained on
/// (millions), one line per seed of each form (`fused s0`, `reference s0`, ...), so a pass or a
/// fail can be read the way it happened: when each seed took off, or that it never did.
pub fn curves_svg(case: &str, forms: &[(&str, &[Outcome])]) -> String {
    use swax_hybrid::eval::svg::{line_plot, LinePlot, Series};
    let series = forms
        .iter()
        .flat_map(|&(form, outcomes)| {
            outcomes.iter().enumerate().map(move |(seed, o)| Series {
                label: format!("{form} s{seed}"),
                points: o
                    .curve
                    .iter()
                    .map(|p| (p.tokens as f64 / 1e6, 100.0 * p.accuracy))
                    .collect(),
                errors: Vec::new(),
            })
        })
        .collect();
    line_plot(&LinePlot {
        title: format!("learning gate, {case}: held-out recall of each seed"),
        x_label: "tokens (millions)".into(),
        y_label: "exact recall (%)".into(),
        log2_x: false,
        y_range: Some((0.0, 100.0)),
        series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learning::Point;

    fn run(final_accuracy: f64, tokens_to_50: Option<u64>) -> Outcome {
        Outcome {
            pattern: "M".into(),
            lr: 1e-3,
            curve: vec![Point {
                tokens: 1,
                accuracy: final_accuracy,
            }],
            final_accuracy,
            tokens_to_50,
            tokens_to_90: None,
            spike: 0.0,
        }
    }

    const FILE: &str = r#"
        [settings]
        layers = 4
        d_model = 128
        heads = 2
        batch = 32
        seeds = 4
        eval_every = 200
        probes = 256
        learned = 0.9
        slack = 0.05

        [[case]]
        pattern = "M"
        seq_len = 256
        pairs = 16
        steps = 2000
        lr = 1e-3
        min_learned = 4
        min_final = 0.9
        max_tokens_to_50 = 12e6
    "#;

    fn learned_all() -> Vec<Outcome> {
        (0..4).map(|i| run(0.95, Some(8_000_000 + i))).collect()
    }

    #[test]
    fn the_curves_chart_draws_every_seed_of_every_form() {
        let (fused, reference) = (learned_all(), learned_all()[..2].to_vec());
        let svg = curves_svg("M-T256", &[("fused", &fused), ("reference", &reference)]);
        assert!(svg.starts_with("<svg") && svg.contains("M-T256"));
        for seed in 0..4 {
            assert!(svg.contains(&format!(">fused s{seed}<")), "fused s{seed}");
        }
        assert!(svg.contains(">reference s1<") && !svg.contains(">reference s2<"));
    }

    #[test]
    fn a_fused_form_that_learns_as_the_reference_passes() {
        let g = Gate::parse(FILE).unwrap();
        let s = Summary::of(&learned_all(), g.settings.learned);
        assert_eq!(s.learned, 4);
        assert!(judge(&g.cases[0], &g.settings, &s, &s).is_empty());
    }

    #[test]
    fn a_fused_form_that_stops_learning_fails() {
        let g = Gate::parse(FILE).unwrap();
        let reference = Summary::of(&learned_all(), 0.9);
        // The regression this gate exists for: fused at chance in most seeds.
        let mut runs = learned_all();
        for r in &mut runs[1..] {
            *r = run(0.02, None);
        }
        let fused = Summary::of(&runs, 0.9);
        let bad = judge(&g.cases[0], &g.settings, &fused, &reference);
        assert!(
            bad.iter()
                .any(|b| b.contains("fused learned in 1 of 4 seeds")),
            "{bad:?}"
        );
        assert!(
            bad.iter().any(|b| b.contains("never reached 50%")),
            "{bad:?}"
        );
    }

    #[test]
    fn slower_learning_than_expected_fails() {
        let g = Gate::parse(FILE).unwrap();
        let slow: Vec<Outcome> = (0..4).map(|_| run(0.95, Some(15_000_000))).collect();
        let s = Summary::of(&slow, 0.9);
        let bad = judge(&g.cases[0], &g.settings, &s, &s);
        assert!(bad.iter().any(|b| b.contains("tokens to 50%")), "{bad:?}");
    }

    #[test]
    fn the_median_is_the_middle_of_the_seeds() {
        let runs = vec![run(0.1, None), run(0.5, Some(3)), run(0.9, Some(1))];
        let s = Summary::of(&runs, 0.9);
        assert_eq!(s.median_final, 0.5);
        assert_eq!(s.median_tokens_to_50, Some(3.0));
        let two = Summary::of(&runs[..2], 0.9);
        assert_eq!(two.median_tokens_to_50, None);
    }

    #[test]
    fn the_shipped_gate_parses() {
        let g = Gate::parse(include_str!("../learning-gate.toml")).unwrap();
        assert!(g.cases.iter().any(|c| c.name() == "M-T256"));
        for sweep in [
            include_str!("../learning-robustness.toml"),
            include_str!("../study-regime.toml"),
            include_str!("../passkey-budget.toml"),
            include_str!("../gate-t1024.toml"),
            include_str!("../learning-benchmark.toml"),
        ] {
            let sweep = Gate::parse(sweep).unwrap();
            assert!(sweep.cases.iter().all(|c| c.min_learned == 0));
        }
    }

    #[test]
    fn a_file_that_asks_more_seeds_than_it_runs_is_refused() {
        let bad = FILE.replace("min_learned = 4", "min_learned = 5");
        assert!(Gate::parse(&bad).unwrap_err().contains("min_learned 5"));
        assert!(Gate::parse(&FILE.replace("pairs", "pair")).is_err());
        let task = |t: &str| FILE.replace("lr = 1e-3", &format!("lr = 1e-3\ntask = \"{t}\""));
        assert!(Gate::parse(&task("passkey")).is_ok());
        let err = Gate::parse(&task("needle")).unwrap_err();
        assert!(err.contains("task \"needle\""), "{err}");
    }

    #[test]
    fn a_case_trains_the_forms_it_names() {
        let g = Gate::parse(FILE).unwrap();
        assert!(g.cases[0].trains("fused") && g.cases[0].trains("reference"));
        assert!(g.settings.sets.is_empty());
        let fused = FILE.replace("lr = 1e-3", "lr = 1e-3\nforms = [\"fused\"]");
        let g = Gate::parse(&fused).unwrap();
        assert!(g.cases[0].trains("fused") && !g.cases[0].trains("reference"));
        for bad in ["forms = [\"fast\"]", "forms = []"] {
            let text = FILE.replace("lr = 1e-3", &format!("lr = 1e-3\n{bad}"));
            let err = Gate::parse(&text).unwrap_err();
            assert!(err.contains("case M-T256: form"), "{err}");
        }
        let shared = FILE.replace(
            "slack = 0.05",
            "slack = 0.05\nsets = [\"optim.warmup_steps=500\"]",
        );
        assert_eq!(
            Gate::parse(&shared).unwrap().settings.sets,
            ["optim.warmup_steps=500"]
        );
    }

    #[test]
    fn cases_of_one_name_are_refused_and_a_name_tells_them_apart() {
        let twice = format!("{FILE}\n{}", &FILE[FILE.find("[[case]]").unwrap()..]);
        assert!(Gate::parse(&twice)
            .unwrap_err()
            .contains("two cases are named M-T256"));
        let named = twice.replacen(
            "[[case]]",
            "[[case]]\nname = \"M-T256-wide\"\nsets = [\"model.d_model=256\"]",
            1,
        );
        let g = Gate::parse(&named).unwrap();
        assert_eq!(g.cases[0].name(), "M-T256-wide");
        assert_eq!(g.cases[0].sets, ["model.d_model=256"]);
        assert!(g.cases[1].sets.is_empty());
    }
}
