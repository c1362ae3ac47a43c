//! What a run shows while it trains: a progress bar on stderr, nothing with `--quiet`.
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub(super) enum Progress {
    /// `--quiet`, or a rank other than 0.
    Off,
    Bar(ProgressBar),
}

impl Progress {
    /// The progress of a run at step `at` of `total`, shown (if `show`) on stderr.
    pub(super) fn new(show: bool, at: u64, total: u64) -> Progress {
        if !show {
            return Progress::Off;
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

    /// The training loss of `step` (counted from 1) has reached the host.
    pub(super) fn logged(&mut self, _step: u64, loss: f64, window: usize, tokens_per_s: f64) {
        if let Progress::Bar(bar) = self {
            bar.set_message(format!(
                "loss {loss:.4} | w {window:>4} | {tokens_per_s:.0} tok/s"
            ));
        }
    }

    /// `step` was validated, with `val_loss` at `w_long`.
    pub(super) fn validated(&mut self, _step: u64, val_loss: f64) {
        if let Progress::Bar(bar) = self {
            bar.set_message(format!("val {val_loss:.4}"));
        }
    }

    /// Says `text` on a line of its own.
    pub(super) fn println(&self, text: &str) {
        if let Progress::Bar(bar) = self {
            bar.println(text);
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
