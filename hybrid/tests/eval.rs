//! Long-context evaluation without a trained model: the exact-match scorer on hand-made
//! predictors (always right, never right, right but for one answer token), the loss curve of a
//! uniform predictor and of one whose loss depends on the position, each handing its logits over
//! in pieces, and reports rendered from saved results files alone.
use std::path::Path;

use swax_data::{Answer, TaskSample, Tokenizer, TokenizerKind};
use swax_hybrid::config::Config;
use swax_hybrid::eval::evaluate::default_tasks;
use swax_hybrid::eval::report::{load, markdown, write_eval, write_report};
use swax_hybrid::eval::results::{EvalResults, LossBucket, LossCurve, TaskCell};
use swax_hybrid::eval::run::{
    eval_task, loss_curve, row_nll, sample_seed, score_sample, Forward, Task,
};
use swax_hybrid::eval::score::exact_answers;
use swax_tensor::{Device, Tensor};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const V: usize = 256;

/// Logits `[T, V]` with a 1 at `pick(t)` after token t and 0 elsewhere.
fn one_hot(t: usize, pick: impl Fn(usize) -> u32) -> Result<Tensor> {
    let mut v = vec![0f32; t * V];
    for i in 0..t {
        v[i * V + pick(i) as usize] = 1.0;
    }
    Ok(Tensor::from_vec(v, vec![t, V], Device::Cpu)?)
}

/// Hands `logits` `[T, V]` to `each` in pieces of `size` rows, as a model read in pieces would.
fn in_pieces(
    logits: Tensor,
    size: usize,
    each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
) -> Result<()> {
    let t = logits.dims()[0];
    for start in (0..t).step_by(size) {
        each(start, &logits.narrow(0, start, size.min(t - start))?)?;
    }
    Ok(())
}

/// Predicts `truth[t + 1]` after token t, except at the positions in `wrong`.
struct Oracle<'a> {
    truth: &'a [u32],
    wrong: Vec<usize>,
}

impl Forward for Oracle<'_> {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()> {
        assert_eq!(
            tokens,
            &self.truth[..tokens.len()],
            "teacher forcing feeds the truth"
        );
        let logits = one_hot(tokens.len(), |t| {
            let right = self.truth[t + 1];
            match self.wrong.contains(&t) {
                true => (right + 1) % V as u32,
                false => right,
            }
        })?;
        in_pieces(logits, 37, each)
    }
}

/// Always predicts token 0.
struct Constant;

impl Forward for Constant {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()> {
        each(0, &one_hot(tokens.len(), |_| 0)?)
    }
}

/// Every logit 0: the uniform distribution.
struct Uniform;

impl Forward for Uniform {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()> {
        let logits = Tensor::zeros(vec![tokens.len(), V], swax_tensor::DType::F32, Device::Cpu)?;
        in_pieces(logits, 7, each)
    }
}

/// After token t, a logit of `t / 10` on the token that follows it in `truth` and 0 elsewhere:
/// the loss falls with the position, `ln(V - 1 + e^a) - a` at `a = t / 10`.
struct Sharpening<'a> {
    truth: &'a [u32],
}

impl Sharpening<'_> {
    fn logit(t: usize) -> f32 {
        t as f32 / 10.0
    }
}

impl Forward for Sharpening<'_> {
    fn pieces(
        &self,
        tokens: &[u32],
        each: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<()> {
        let t = tokens.len();
        let mut v = vec![0f32; t * V];
        for i in 0..t {
            v[i * V + self.truth[i + 1] as usize] = Self::logit(i);
        }
        in_pieces(Tensor::from_vec(v, vec![t, V], Device::Cpu)?, 13, each)
    }
}

fn bytes() -> Box<dyn Tokenizer> {
    TokenizerKind::Bytes.build().unwrap()
}

#[test]
fn a_hand_made_sample_scores_by_exact_match() {
    let sample = TaskSample {
        tokens: vec![5, 6, 7, 8, 9, 5, 6, 7, 8, 9],
        answers: vec![
            Answer {
                pos: 6,
                tokens: vec![6, 7],
                source: 1,
            },
            Answer {
                pos: 9,
                tokens: vec![9],
                source: 4,
            },
        ],
    };
    // pred[t] predicts token t + 1; the last answer token needs no prediction past it.
    let truth: Vec<u32> = sample.tokens[1..].to_vec();
    assert_eq!(exact_answers(&sample, &truth).unwrap(), [true, true]);
    let mut partial = truth.clone();
    partial[6] = 0; // the answer at 6..8 has its second token wrong
    assert_eq!(exact_answers(&sample, &partial).unwrap(), [false, true]);
    assert!(
        exact_answers(&sample, &truth[..8]).is_err(),
        "too few predictions is an error"
    );
}

#[test]
fn always_right_scores_100_never_right_0_and_partial_answers_do_not_count() {
    let tok = bytes();
    for task in [Task::Niah, Task::Passkey, Task::Mqar] {
        let sample = task.sample(&*tok, 600, 0.5, 7).unwrap();
        assert!(sample.answers.iter().all(|a| !a.tokens.is_empty()));
        let right = Oracle {
            truth: &sample.tokens,
            wrong: vec![],
        };
        assert!(
            score_sample(&right, &sample).unwrap().iter().all(|&ok| ok),
            "{task:?}"
        );
        // Wrong at the first token of each answer: nothing counts.
        let first = sample.answers.iter().map(|a| a.pos - 1).collect();
        let wrong = Oracle {
            truth: &sample.tokens,
            wrong: first,
        };
        assert!(
            score_sample(&wrong, &sample).unwrap().iter().all(|&ok| !ok),
            "{task:?}"
        );
        // Wrong only at the last token of each multi-token answer: those do not count.
        let last = sample
            .answers
            .iter()
            .filter(|a| a.tokens.len() > 1)
            .map(|a| a.pos + a.tokens.len() - 2)
            .collect();
        let partial = Oracle {
            truth: &sample.tokens,
            wrong: last,
        };
        let exact = score_sample(&partial, &sample).unwrap();
        for (a, ok) in sample.answers.iter().zip(exact) {
            assert_eq!(
                ok,
                a.tokens.len() == 1,
                "{task:?}: a partial answer counted"
            );
        }
    }
}

#[test]
fn eval_task_tallies_samples_and_answers() {
    let tok = bytes();
    // Passkey answers are digits: a model that always says token 0 never gets one.
    let cell = eval_task(&Constant, &*tok, Task::Passkey, 400, Some(0.25), 3, 1, 64).unwrap();
    assert_eq!(
        (cell.task.as_str(), cell.length, cell.samples),
        ("passkey", 400, 3)
    );
    assert_eq!(cell.depth, Some(0.25));
    assert!(cell.answers >= 3);
    assert_eq!((cell.correct, cell.accuracy()), (0, 0.0));
    // The key lies some 300 tokens before the question: beyond a window of 64, within 1000.
    assert_eq!(cell.near_answers, 0);
    let wide = eval_task(&Constant, &*tok, Task::Passkey, 400, Some(0.25), 3, 1, 1000).unwrap();
    assert_eq!(wide.near_answers, wide.answers);
    assert!(eval_task(&Constant, &*tok, Task::Niah, 50, Some(0.5), 1, 0, 64).is_err());
}

#[test]
fn eval_task_splits_the_right_answers_by_the_window() {
    // A model that knows the text scores every answer; near needles (depth 1: some 80 tokens
    // before the answer) sit within a window of 128, far ones (depth 0) beyond it.
    let tok = bytes();
    for (depth, near) in [(0.0, false), (1.0, true)] {
        let seed = sample_seed(5, 400, Some(depth), 0);
        let sample = Task::Passkey.sample(&*tok, 400, depth, seed).unwrap();
        let oracle = Oracle {
            truth: &sample.tokens,
            wrong: Vec::new(),
        };
        let cell = eval_task(&oracle, &*tok, Task::Passkey, 400, Some(depth), 1, 5, 128);
        let cell = cell.unwrap();
        assert_eq!(cell.correct, cell.answers);
        assert_eq!(cell.near_correct, if near { cell.answers } else { 0 });
        assert_eq!(
            cell.far(),
            if near {
                (0, 0)
            } else {
                (cell.answers, cell.answers)
            }
        );
    }
}

#[test]
fn the_uniform_predictor_has_log2_v_bits_in_every_bucket() {
    let seqs: Vec<Vec<u32>> = (0..2)
        .map(|s| (0..101).map(|t| (t * 7 + s) % 256).collect())
        .collect();
    let curve = loss_curve(&Uniform, &seqs, 30, "bits/byte").unwrap();
    assert_eq!((curve.length, curve.samples), (100, 2));
    let spans: Vec<(usize, usize)> = curve.buckets.iter().map(|b| (b.start, b.end)).collect();
    assert_eq!(spans, [(0, 30), (30, 60), (60, 90), (90, 100)]);
    for b in &curve.buckets {
        assert!((b.bits - 8.0).abs() < 1e-5, "{b:?}");
    }
    let ragged = vec![vec![1u32; 10], vec![1u32; 11]];
    assert!(loss_curve(&Uniform, &ragged, 4, "bits/byte").is_err());
}

#[test]
fn the_loss_curve_places_each_pieces_rows_at_their_positions() {
    let seq: Vec<u32> = (0..61).map(|t| (t * 11 + 3) % 256).collect();
    let seqs = std::slice::from_ref(&seq);
    let curve = loss_curve(&Sharpening { truth: &seq }, seqs, 16, "bits/byte").unwrap();
    let nll = |t: usize| {
        let a = f64::from(Sharpening::logit(t));
        ((V - 1) as f64 + a.exp()).ln() - a
    };
    for b in &curve.buckets {
        let want = (b.start..b.end).map(nll).sum::<f64>()
            / (b.end - b.start) as f64
            / std::f64::consts::LN_2;
        assert!((b.bits - want).abs() < 1e-4, "{b:?}: want {want}");
    }
    assert!(curve.buckets[0].bits > curve.buckets[3].bits + 1.0);
}

#[test]
fn row_nll_is_the_log_softmax_at_the_target_and_rejects_a_token_outside_the_vocabulary() {
    let (t, v) = (5, 7);
    let x: Vec<f32> = (0..t * v)
        .map(|i| ((i * 13) % 11) as f32 * 0.3 - 1.0)
        .collect();
    let logits = Tensor::from_vec(x.clone(), vec![t, v], Device::Cpu).unwrap();
    let targets = [0u32, 6, 3, 3, 1];
    let got = row_nll(&logits, &targets).unwrap();
    for (r, &y) in targets.iter().enumerate() {
        let row = &x[r * v..(r + 1) * v];
        let lse = row.iter().map(|&a| f64::from(a).exp()).sum::<f64>().ln();
        let want = lse - f64::from(row[y as usize]);
        assert!((f64::from(got[r]) - want).abs() < 1e-5, "row {r}");
    }
    let err = row_nll(&logits, &[0, 1, 7, 0, 0]).unwrap_err().to_string();
    assert!(
        err.contains("token 7") && err.contains("vocabulary of 7"),
        "{err}"
    );
    assert!(
        row_nll(&logits, &[0, 1]).is_err(),
        "fewer targets than rows"
    );
}

fn results(run: &Path, window: usize, niah: [usize; 2]) -> EvalResults {
    let cell = |task: &str, length, depth, correct| TaskCell {
        task: task.into(),
        length,
        depth,
        samples: 4,
        answers: 4,
        correct,
        near_answers: 0,
        near_correct: 0,
        generated: None,
    };
    EvalResults {
        run: run.display().to_string(),
        checkpoint: run.join("checkpoints/step-0000100").display().to_string(),
        step: 100,
        model: "swax-tiny".into(),
        pattern: "SM".into(),
        train_len: 256,
        trained_on: "corpus".into(),
        window,
        tokenizer: "bytes".into(),
        tasks: vec![
            cell("niah", 256, Some(0.0), niah[0]),
            cell("niah", 256, Some(1.0), 4),
            cell("niah", 512, Some(0.0), niah[1]),
            cell("niah", 512, Some(1.0), 0),
            cell("mqar", 256, None, 1),
        ],
        loss: Some(LossCurve {
            length: 512,
            samples: 2,
            unit: "bits/byte".into(),
            data: "corpus".into(),
            buckets: vec![
                LossBucket {
                    start: 0,
                    end: 256,
                    bits: 2.0,
                },
                LossBucket {
                    start: 256,
                    end: 512,
                    bits: 2.5 + window as f64 / 1000.0,
                },
            ],
        }),
        other_data: None,
    }
}

#[test]
fn reports_render_from_saved_results_without_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("swax-w32");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":5.0}\n{\"step\":2,\"loss\":4.0}\n",
    )
    .unwrap();
    let short = results(&run, 32, [2, 1]);
    let long = results(&run, 128, [4, 3]);
    for r in [&short, &long] {
        let files = write_eval(&run.join(format!("eval/w{}", r.window)), r).unwrap();
        assert!(files.iter().any(|f| f.ends_with("niah-heatmap.svg")));
    }
    // Both evaluations come back from the run folder, in window order, unchanged.
    let back = load(&run).unwrap();
    assert_eq!(back, vec![short.clone(), long.clone()]);
    assert_eq!(
        load(&run.join("eval/w32/results.json")).unwrap(),
        vec![short.clone()]
    );
    assert!(load(dir.path()).is_err());

    let table = markdown(&back);
    assert!(
        table.contains("| swax-w32 w=32 | swax-w32 w=128 |"),
        "{table}"
    );
    assert!(
        table.contains("| niah acc % | 256 | 75.0 | 100.0 |"),
        "{table}"
    );
    assert!(
        table.contains("| niah acc % | 512 | 12.5 | 37.5 |"),
        "{table}"
    );
    assert!(
        table.contains("| mqar acc % | 256 | 25.0 | 25.0 |"),
        "{table}"
    );
    assert!(
        table.contains("| loss bits/byte | 256..512 | 2.532 | 2.628 |"),
        "{table}"
    );

    let out = dir.path().join("report");
    let files = write_report(&out, &back).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "report.md",
        "accuracy-mqar.svg",
        "accuracy-niah.svg",
        "loss-by-position.svg",
        "train-loss.svg",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "svg"))
    {
        let svg = std::fs::read_to_string(f).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.ends_with("</svg>\n"),
            "{}",
            f.display()
        );
        assert!(
            !svg.contains("NaN") && !svg.contains("inf"),
            "{}",
            f.display()
        );
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(&table));
    let heat = std::fs::read_to_string(run.join("eval/w128/niah-heatmap.svg")).unwrap();
    assert_eq!(heat.matches("<rect x=").count(), 4, "2 depths x 2 lengths");
}

/// A micro model of every mixer, evaluated in pieces that do not divide the sequence, with
/// windows shorter and longer than a piece (RAttention's linear branch then reads keys from
/// the carried state, from the tail and from the piece itself).
#[test]
fn a_loss_that_overflowed_is_kept_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let mut r = results(&run, 128, [4, 2]);
    let buckets = &mut r.loss.as_mut().unwrap().buckets;
    buckets[0].bits = f64::NAN;
    buckets[1].bits = f64::INFINITY;
    let eval = run.join("eval/w128");
    write_eval(&eval, &r).unwrap();
    let back = load(&run).unwrap();
    let bits: Vec<f64> = back[0].loss.as_ref().unwrap().buckets[..2]
        .iter()
        .map(|b| b.bits)
        .collect();
    assert!(bits.iter().all(|b| b.is_nan()), "{bits:?}");
    let files = write_report(&dir.path().join("report"), &back).unwrap();
    assert!(!files.is_empty());
    assert!(markdown(&back).contains("NaN"), "{}", markdown(&back));
}

#[test]
fn evaluation_in_pieces_equals_one_shot() {
    use swax_hybrid::config::Config;
    use swax_hybrid::eval::run::{all_logits, InPieces, OneShot};
    use swax_hybrid::model::Model;
    let sets: Vec<String> = [
        "model.pattern=SMGRF",
        "model.n_layers=5",
        "model.d_model=32",
        "model.n_heads=2",
        "model.n_kv_heads=1",
        "model.d_ff=48",
        "model.chunk=8",
    ]
    .map(String::from)
    .to_vec();
    let cfg = Config::resolve(Some("swax-tiny"), &sets).unwrap();
    let model = Model::new(&cfg.model, 3, Device::Cpu).unwrap();
    let tokens: Vec<u32> = (0..75u32).map(|t| (t * 37 + 11) % 256).collect();
    for (window, piece) in [(5, 16), (24, 7), (100, 20), (1, 9)] {
        let dtype = swax_tensor::DType::F32;
        let one = OneShot {
            model: &model,
            window,
            dtype,
            device: Device::Cpu,
        };
        let pieces = InPieces {
            model: &model,
            window,
            piece,
            dtype,
            device: Device::Cpu,
        };
        let a = all_logits(&one, &tokens).unwrap().to_f64_vec().unwrap();
        let b = all_logits(&pieces, &tokens).unwrap().to_f64_vec().unwrap();
        assert_eq!(a.len(), b.len());
        let err = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(
            err < 1e-4,
            "window {window} piece {piece}: max |one-shot - in pieces| {err}"
        );
    }
}

#[test]
fn string_match_all_is_the_share_of_references_found() {
    use swax_hybrid::eval::generated::string_match_all;
    let refs = vec![" 48213".to_string(), " Elmsford".to_string()];
    assert_eq!(
        string_match_all("The code is 48213 and she lives in elmsford.", &refs),
        1.0
    );
    assert_eq!(string_match_all("The code is 48213.", &refs), 0.5);
    assert_eq!(string_match_all("4821", &refs), 0.0);
    assert_eq!(string_match_all("anything", &[]), 0.0);
}

/// An MQAR run is evaluated on MQAR recall, a text run on the loss and the text tasks: neither
/// is scored by default on what it never read.
#[test]
fn the_default_tasks_fit_what_the_run_was_trained_on() {
    let tasks = |source: &str| {
        let cfg = Config::resolve(Some("swax-tiny"), &[format!("data.source={source:?}")]).unwrap();
        default_tasks(&cfg)
    };
    assert_eq!(tasks("mqar"), ["mqar"]);
    for text in ["corpus", "passkey", "recall-mix", "datasets/mine"] {
        assert_eq!(tasks(text), ["niah", "passkey", "loss"], "{text}");
    }
}
