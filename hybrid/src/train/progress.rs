//! What a run shows while it trains: a progress bar redrawn in place where stderr is a
//! terminal; where it is a file or a pipe (a log, a job scheduler's output), where a bar draws
//! nothing, a plain line every so often and at every validation; nothing with `--quiet`.
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The most time between two progress lines: often enough to see a run is alive, seldom enough
/// that a long run's log stays readable.
pub(super) const LINE_EVERY: Duration = Duration::from_secs(20);

pub(super) enum Progress {
    /// `--quiet`, or a rank other than 0.
    Off,
    Bar(ProgressBar),
    Lines(Lines),
}

/// The state of the plain progress lines.
pub(super) struct Lines {
    /// The step this invocation started at and the run's last: the ETA is this invocation's pace
    /// over the steps left.
    from: u64,
    total: u64,
    started: Instant,
    /// When the last line was written (None: no line yet).
    last: Option<Instant>,
}

impl Progress {
    /// The progress of a run at step `at` of `total`, shown (if `show`) on stderr.
    pub(super) fn new(show: bool, at: u64, total: u64) -> Progress {
        if !show {
            return Progress::Off;
        }
        if !std::io::stderr().is_terminal() {
            return Progress::Lines(Lines {
                from: at,
                total,
                started: Instant::now(),
                last: None,
            });
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {pos}/{len} {msg} eta {eta}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_position(at);
        Progress::Bar(bar)
    }

    /// The training loss of `step` (counted from 1) has reached the host. A line is written for
    /// the first step logged, the last of the run, and the first after [`LINE_EVERY`].
    pub(super) fn logged(&mut self, step: u64, loss: f64, window: usize, tokens_per_s: f64) {
        match self {
            Progress::Off => {}
            Progress::Bar(bar) => bar.set_message(format!(
                "loss {loss:.4} | w {window:>4} | {tokens_per_s:.0} tok/s"
            )),
            Progress::Lines(lines) => {
                let due = lines.last.is_none_or(|t| t.elapsed() >= LINE_EVERY);
                if due || step == lines.total {
                    lines.write(&format!(
                        "step {step}/{}: loss {loss:.4}, window {window}, {tokens_per_s:.0} \
                         tokens/s, eta {}",
                        lines.total,
                        lines.eta(step)
                    ));
                }
            }
        }
    }

    /// `step` was validated, with `val_loss` at `w_long`.
    pub(super) fn validated(&mut self, step: u64, val_loss: f64) {
        match self {
            Progress::Off => {}
            Progress::Bar(bar) => bar.set_message(format!("val {val_loss:.4}")),
            Progress::Lines(lines) => lines.write(&format!(
                "step {step}/{}: validation loss {val_loss:.4}",
                lines.total
            )),
        }
    }

    /// Says `text` on a line of its own.
    pub(super) fn println(&self, text: &str) {
        match self {
            Progress::Off => {}
            Progress::Bar(bar) => bar.println(text),
            Progress::Lines(_) => eprintln!("{text}"),
        }
    }

    /// The run is at `step`.
    pub(super) fn set_position(&self, step: u64) {
        if let Progress::Bar(bar) = self {
            bar.set_position(step);
        }
    }

    /// The run ended: the bar is cleared, for the summary.
    pub(super) fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }

    /// The run failed: the bar is left where it stopped, above the error.
    pub(super) fn abandon(&self) {
        if let Progress::Bar(bar) = self {
            bar.abandon();
        }
    }
}

impl Lines {
    fn write(&mut self, text: &str) {
        eprintln!("{text}");
        self.last = Some(Instant::now());
    }

    /// The time left at this invocation's pace, once `step` is done.
    fn eta(&self, step: u64) -> String {
        let done = step.saturating_sub(self.from);
        if done == 0 {
            return "unknown".into();
        }
        let per_step = self.started.elapsed().as_secs_f64() / done as f64;
        let secs = (per_step * self.total.saturating_sub(step) as f64).round() as u64;
        match secs {
            0..60 => format!("{secs}s"),
            60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
            _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        }
    }
}
