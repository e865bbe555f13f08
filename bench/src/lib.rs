//! Support for the `sparse-bench` program and the divan benches: timing,
//! table and JSON-lines output, and the subcommands.
//!
//! Every number a subcommand prints is measured in the same run as its
//! baseline, because the machines it runs on are noisy: ratios are the
//! figures to read.

pub mod allreduce;
pub mod calibrate;
pub mod encode;
pub mod models;

/// The workspace README's examples, compiled and run as doc tests here,
/// the crate that depends on every other one.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// `docs/guide.md`'s examples, compiled and run as doc tests here, so that
/// the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide.md")]
pub struct GuideDoctests;
pub mod scale;
pub mod select;
pub mod step;
pub mod train;

use std::time::{Duration, Instant};

/// Writes one line to stdout; a closed pipe (`sparse-bench ... | head`)
/// ends the program quietly instead of panicking as `println!` would.
pub fn emit(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{line}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("sparse-bench: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`emit`].
#[macro_export]
macro_rules! out {
    () => { $crate::emit(format_args!("")) };
    ($($arg:tt)*) => { $crate::emit(format_args!($($arg)*)) };
}

/// Runs `f` at least `min_reps` times and until `min_time` has passed, and
/// returns the median time of one run.
pub fn time_median<T>(min_reps: usize, min_time: Duration, mut f: impl FnMut() -> T) -> Duration {
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < min_reps || (start.elapsed() < min_time && samples.len() < 1000) {
        let t = Instant::now();
        std::hint::black_box(f());
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// Parses a count of milliseconds (`--min-ms 100`) into a [`Duration`].
///
/// # Errors
/// The text is not a whole number.
pub fn parse_millis(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|e| format!("{s:?} is not a whole number of milliseconds: {e}"))
}

/// Gigabytes per second for `bytes` processed in `t`.
pub fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64().max(1e-12) / 1e9
}

/// A progress bar that stays hidden for the first second, so short runs
/// print nothing extra; drawn on stderr, so JSON on stdout stays clean.
pub struct Progress {
    bar: indicatif::ProgressBar,
    start: Instant,
    shown: bool,
}

impl Progress {
    /// A bar of `len` steps.
    pub fn new(len: u64, what: &str) -> Self {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(len),
            indicatif::ProgressDrawTarget::hidden(),
        );
        bar.set_message(what.to_string());
        Self {
            bar,
            start: Instant::now(),
            shown: false,
        }
    }
    /// One step done.
    pub fn inc(&mut self) {
        if !self.shown && self.start.elapsed() > Duration::from_secs(1) {
            self.bar
                .set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.inc(1);
    }
    /// Removes the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// Prints rows as an aligned text table.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .zip(&width)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        out!("{}", s.join("  "));
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}
