//! kvfabric's progress display for long commands (`cluster up`, `demo`, every `bench`,
//! `kvfabric-chaos`): one bar per running step saying what runs, how far it is, how long it
//! has taken and how long is left, drawn on standard error with `indicatif`.
//!
//! Owns: the choice of display ([`Mode`]: a bar when standard error is a terminal, nothing
//! otherwise; `KVFABRIC_PROGRESS=off` turns bars off on a terminal too), the one bar style every command uses, and
//! [`Progress::line`], the plain line a command prints about a step (above the bar on a
//! terminal, as is on standard error elsewhere). Must never: write to standard output (the
//! commands' results and `ratio` lines live there), or draw control characters when standard
//! error is not a terminal, so that logs and tests stay clean.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The environment variable that turns bars off (`off`) even on a terminal.
pub const MODE_ENV: &str = "KVFABRIC_PROGRESS";
/// Redraws per second at most.
const REFRESH_HZ: u8 = 8;
/// How often a bar driven by the clock ([`Progress::clock`]) moves.
const CLOCK_TICK_MS: u64 = 250;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bars on standard error.
    Bars,
    /// No bars; [`Progress::line`] still prints its plain lines.
    Off,
}

impl Mode {
    /// Bars exactly when standard error is a terminal and `KVFABRIC_PROGRESS` is not `off`.
    pub fn detect() -> Mode {
        Mode::choose(
            std::env::var(MODE_ENV).ok().as_deref(),
            std::io::stderr().is_terminal(),
        )
    }

    /// The mode for an override value `env` and whether standard error is a terminal.
    pub fn choose(env: Option<&str>, stderr_is_terminal: bool) -> Mode {
        match env.map(str::trim) {
            Some("off") => Mode::Off,
            _ if stderr_is_terminal => Mode::Bars,
            _ => Mode::Off,
        }
    }
}

/// What a bar counts (shown after the count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Nodes, agents, requests, rounds: plain counts.
    Items(&'static str),
    /// Seconds of a run of known length.
    Seconds,
}

/// One step's progress: a bar in [`Mode::Bars`], nothing drawn in [`Mode::Off`]. Cloning
/// shares the bar (threads may advance it together). Dropping the last clone clears it.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

/// What the clones share; dropped with the last one, which stops the clock and clears the bar.
struct Inner {
    bar: ProgressBar,
    mode: Mode,
    clock: Option<Arc<AtomicBool>>,
}

fn style(unit: Unit) -> ProgressStyle {
    let count = match unit {
        Unit::Items(what) => format!("{{pos}}/{{len}} {what}"),
        Unit::Seconds => "{pos}/{len} s".to_owned(),
    };
    let template = format!(
        "{{prefix:.bold}} [{{bar:28.cyan/blue}}] {count} · {{elapsed}} elapsed, ~{{eta}} left · {{wide_msg}}"
    );
    ProgressStyle::with_template(&template)
        .expect("the bar template is valid")
        .progress_chars("=> ")
}

/// A bar for `what` drawn on `target`.
fn bar_on(target: ProgressDrawTarget, what: &str, total: u64, unit: Unit) -> ProgressBar {
    ProgressBar::with_draw_target(Some(total), target)
        .with_style(style(unit))
        .with_prefix(what.to_owned())
}

/// A bar for `what` on standard error (hidden in [`Mode::Off`]).
fn stderr_bar(mode: Mode, what: &str, total: u64, unit: Unit) -> ProgressBar {
    let target = match mode {
        Mode::Bars => ProgressDrawTarget::stderr_with_hz(REFRESH_HZ),
        Mode::Off => ProgressDrawTarget::hidden(),
    };
    bar_on(target, what, total, unit)
}

impl Progress {
    /// A bar for `what` (e.g. `cluster up`) counting `total` `unit`s, in the detected mode.
    pub fn new(what: &str, total: u64, unit: Unit) -> Progress {
        Progress::with_mode(Mode::detect(), what, total, unit)
    }

    /// A bar in `mode`.
    pub fn with_mode(mode: Mode, what: &str, total: u64, unit: Unit) -> Progress {
        Progress::from_parts(stderr_bar(mode, what, total, unit), mode, None)
    }

    /// A bar drawn on `target` (tests draw on an in-memory terminal).
    pub fn on(
        target: ProgressDrawTarget,
        mode: Mode,
        what: &str,
        total: u64,
        unit: Unit,
    ) -> Progress {
        Progress::from_parts(bar_on(target, what, total, unit), mode, None)
    }

    fn from_parts(bar: ProgressBar, mode: Mode, clock: Option<Arc<AtomicBool>>) -> Progress {
        Progress {
            inner: Arc::new(Inner { bar, mode, clock }),
        }
    }

    fn bar(&self) -> &ProgressBar {
        &self.inner.bar
    }

    /// A bar for a run of known length `total`: it advances with the clock, by itself, until
    /// finished (the chaos run's fault phase).
    pub fn clock(what: &str, total: Duration) -> Progress {
        let mode = Mode::detect();
        let secs = total.as_secs().max(1);
        let bar = stderr_bar(mode, what, secs, Unit::Seconds);
        let stop = Arc::new(AtomicBool::new(false));
        if mode == Mode::Bars {
            // The thread holds a weak handle, so that dropping the last Progress clears the bar.
            let (weak, stop, start) = (bar.downgrade(), stop.clone(), Instant::now());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(bar) = weak.upgrade() else { return };
                    if bar.is_finished() {
                        return;
                    }
                    bar.set_position(start.elapsed().as_secs().min(secs));
                    drop(bar);
                    std::thread::sleep(Duration::from_millis(CLOCK_TICK_MS));
                }
            });
        }
        Progress::from_parts(bar, mode, Some(stop))
    }

    /// The display mode.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Advances by `n`.
    pub fn inc(&self, n: u64) {
        self.bar().inc(n);
    }

    /// Sets how far it is.
    pub fn set(&self, done: u64) {
        self.bar().set_position(done);
    }

    /// How far it is.
    pub fn position(&self) -> u64 {
        self.bar().position()
    }

    /// Changes the total (a step that learns its size late).
    pub fn set_total(&self, total: u64) {
        self.bar().set_length(total);
    }

    /// Sets what the step is doing now (after the counts).
    pub fn message(&self, msg: impl Into<String>) {
        self.bar().set_message(msg.into());
    }

    /// Prints `line` about the step: above the bar on a terminal, else as a plain line on
    /// standard error.
    pub fn line(&self, line: impl AsRef<str>) {
        // A hidden bar drops what it is asked to print (indicatif hides a bar whose terminal
        // is not one), so the line goes out plain then.
        if self.bar().is_hidden() {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}", line.as_ref());
        } else {
            self.bar().println(line.as_ref());
        }
    }

    /// Runs `f` with the bar taken off the screen (for a line on standard output).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar().suspend(f)
    }

    /// Ends the step and clears its bar.
    pub fn finish(&self) {
        if let Some(stop) = &self.inner.clock {
            stop.store(true, Ordering::Relaxed);
        }
        self.bar().finish_and_clear();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(stop) = &self.clock {
            stop.store(true, Ordering::Relaxed);
        }
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::InMemoryTerm;

    #[test]
    fn the_mode_is_bars_on_a_terminal_unless_turned_off() {
        assert_eq!(Mode::choose(None, true), Mode::Bars);
        assert_eq!(Mode::choose(None, false), Mode::Off);
        assert_eq!(Mode::choose(Some("off"), true), Mode::Off);
        assert_eq!(Mode::choose(Some("bars"), false), Mode::Off);
        assert_eq!(Mode::choose(Some("what"), true), Mode::Bars);
    }

    #[test]
    fn a_bar_shows_what_runs_how_far_and_how_long_is_left() {
        let term = InMemoryTerm::new(4, 160);
        let p = Progress::on(
            ProgressDrawTarget::term_like(Box::new(term.clone())),
            Mode::Bars,
            "cluster up",
            5,
            Unit::Items("nodes ready"),
        );
        p.message("waiting for n4, n5");
        p.set(3);
        p.bar().force_draw();
        let shown = term.contents();
        assert!(shown.contains("cluster up"), "{shown}");
        assert!(shown.contains("3/5 nodes ready"), "{shown}");
        assert!(shown.contains("left"), "{shown}");
        assert!(shown.contains("waiting for n4, n5"), "{shown}");
        p.line("n3 ready");
        assert!(term.contents().contains("n3 ready"), "{}", term.contents());
        p.finish();
        assert!(!term.contents().contains("3/5"), "{}", term.contents());
    }

    #[test]
    fn seconds_are_counted_as_seconds() {
        let term = InMemoryTerm::new(2, 160);
        let p = Progress::on(
            ProgressDrawTarget::term_like(Box::new(term.clone())),
            Mode::Bars,
            "chaos",
            60,
            Unit::Seconds,
        );
        p.set(12);
        p.bar().force_draw();
        assert!(term.contents().contains("12/60 s"), "{}", term.contents());
    }

    #[test]
    fn off_draws_nothing() {
        let p = Progress::with_mode(Mode::Off, "bench", 10, Unit::Items("rounds"));
        p.inc(4);
        assert!(p.bar().is_hidden());
        assert_eq!(p.position(), 4);
    }
}
