//! Running SimGrid's `smpirun -replay` on a trace directory and reading
//! its simulated time.

use super::trace::INDEX_FILE;
use crate::sim::{Detached, Network, Rendezvous};
use sparse_core::{Error, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The name of the platform file in a trace directory.
pub const PLATFORM_FILE: &str = "platform.xml";
/// The name of the hostfile in a trace directory.
pub const HOSTFILE: &str = "hostfile.txt";

/// The name of the file of a trace directory that lists its replays: one
/// a line, `<model> <platform name> <smpirun's arguments>` ([`args_line`]),
/// run from inside the directory; `scripts/simgrid-replay.sh` reads it.
pub const ARGS_FILE: &str = "smpirun.args";

/// The Debian package that has `smpirun` and `smpireplaymain`.
pub const PACKAGE: &str = "libsimgrid-dev";

/// How SMPI models a point-to-point message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SmpiModel {
    /// Plain alpha-beta, as the simulator: SimGrid's CM02 network model
    /// (max-min bandwidth sharing) without correction factors (latency
    /// and bandwidth factors 1, no weight by latency), no TCP window bound
    /// (`TCP-gamma` 0), no cross-traffic of acknowledgements; and every
    /// send in rendezvous (it completes when its message has arrived, so a
    /// rank never has more than its current messages on its link), as the
    /// simulator's [`Rendezvous`] at 0 bytes sends.
    /// [`SmpiModel::cfg`] lists the settings.
    AlphaBeta,
    /// [`SmpiModel::AlphaBeta`]'s network with every send detached and
    /// eager: it returns at once and its message moves at once, so a rank
    /// that has its receive runs ahead with its send still on its link,
    /// sharing the link with its next ones, as the simulator's
    /// [`Detached`] sends (its plain eager send keeps a rank to one
    /// message of its own moving at a time).
    AlphaBetaEager,
    /// SMPI's defaults: the `SMPI` network model (piecewise latency and
    /// bandwidth factors fitted on a real cluster, a flow's share weighted
    /// by its latency), TCP's window bound, cross-traffic, sends of 64 KiB
    /// and more in rendezvous (they wait for the receive).
    Default,
}

/// The `--cfg` options of CM02 as plain alpha-beta.
const PLAIN: [&str; 6] = [
    "--cfg=network/model:CM02",
    "--cfg=network/latency-factor:1",
    "--cfg=network/bandwidth-factor:1",
    "--cfg=network/weight-S:0",
    "--cfg=network/TCP-gamma:0",
    "--cfg=network/crosstraffic:0",
];

impl SmpiModel {
    /// The `--cfg` options of `smpirun` that select the model.
    pub fn cfg(self) -> Vec<&'static str> {
        let mut out = match self {
            SmpiModel::Default => return Vec::new(),
            _ => PLAIN.to_vec(),
        };
        out.extend(match self {
            SmpiModel::AlphaBetaEager => [
                "--cfg=smpi/send-is-detached-thresh:2147483647",
                "--cfg=smpi/async-small-thresh:2147483647",
            ],
            _ => [
                "--cfg=smpi/send-is-detached-thresh:0",
                "--cfg=smpi/async-small-thresh:0",
            ],
        });
        out
    }
    /// The simulator's network whose sends are this model's, over `base`
    /// (the platform's network, [`super::Platform::network`]): in
    /// rendezvous for [`SmpiModel::AlphaBeta`] ([`Rendezvous`] at 0 bytes),
    /// eager and detached for [`SmpiModel::AlphaBetaEager`] ([`Detached`]);
    /// `None` for [`SmpiModel::Default`], whose correction factors the
    /// simulator does not have. `base` must send eagerly (a platform's
    /// network does).
    pub fn simulator(self, base: Box<dyn Network>) -> Option<Box<dyn Network>> {
        match self {
            SmpiModel::AlphaBeta => Some(Box::new(Rendezvous::new(base, 0))),
            SmpiModel::AlphaBetaEager => Some(Box::new(Detached::new(base))),
            SmpiModel::Default => None,
        }
    }
    /// How [`SmpiModel::simulator`]'s network sends: `rendezvous` or
    /// `detached` (`None` for [`SmpiModel::Default`]).
    pub fn sends(self) -> Option<&'static str> {
        match self {
            SmpiModel::AlphaBeta => Some("rendezvous"),
            SmpiModel::AlphaBetaEager => Some("detached"),
            SmpiModel::Default => None,
        }
    }
    /// Every model, in the order of [`SmpiModel::name`]'s list.
    pub const ALL: [SmpiModel; 3] = [
        SmpiModel::AlphaBeta,
        SmpiModel::AlphaBetaEager,
        SmpiModel::Default,
    ];
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SmpiModel::AlphaBeta => "alpha-beta",
            SmpiModel::AlphaBetaEager => "alpha-beta-eager",
            SmpiModel::Default => "default",
        }
    }
    /// The model named `name` (`alpha-beta`, `alpha-beta-eager` or
    /// `default`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `smpi model` for another name.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                Error::invalid(
                    "smpi model",
                    format!("{name:?} is not alpha-beta, alpha-beta-eager or default"),
                )
            })
    }
}

/// Options every replay is run with: no privatization (a replay has no
/// globals to copy), a host speed (silences SMPI's benchmark warning; a
/// replay's computation uses the platform's speed), quiet configuration
/// logs, and the replay's message printed with the simulated clock to
/// the nanosecond (`Simulation time <s>@<clock>`; its own figure has six
/// decimals).
const COMMON: &[&str] = &[
    "-no-privatize",
    "--cfg=smpi/host-speed:1e9f",
    "--log=xbt_cfg.thres:warning",
    "--log=smpi_config.thres:warning",
    "--log=smpi_replay.fmt:%m@%.12d%n",
];

/// The `smpirun` found on `PATH` (or named by `SMPIRUN`).
///
/// # Errors
/// [`Error::Unsupported`] naming [`PACKAGE`] where there is none, or where
/// `SMPIRUN` names no file.
pub fn smpirun() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SMPIRUN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Error::Unsupported {
                backend: "simgrid",
                what: format!(
                    "replays: SMPIRUN names {}, which is no file; point it at smpirun or unset \
                     it (Debian and Ubuntu: `apt-get install {PACKAGE}`)",
                    p.display()
                ),
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("smpirun"))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Unsupported {
            backend: "simgrid",
            what: format!(
                "replays: no smpirun on PATH; install SimGrid's SMPI (Debian and Ubuntu: `apt-get \
                 install {PACKAGE}`), or set SMPIRUN to its path"
            ),
        })
}

/// The command line that replays the trace directory of `ranks` ranks
/// on [`PLATFORM_FILE`] and [`HOSTFILE`] under `model`, relative to the
/// directory (run it from there).
pub fn replay_args(ranks: usize, model: SmpiModel) -> Vec<String> {
    replay_args_on(ranks, model, PLATFORM_FILE, HOSTFILE)
}

/// [`replay_args`] on the platform file `platform` and hostfile
/// `hostfile` of the directory.
pub fn replay_args_on(
    ranks: usize,
    model: SmpiModel,
    platform: &str,
    hostfile: &str,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "-np",
        &ranks.to_string(),
        "-platform",
        platform,
        "-hostfile",
        hostfile,
        "-replay",
        INDEX_FILE,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(COMMON.iter().chain(&model.cfg()).map(|s| s.to_string()));
    args
}

/// One line of [`ARGS_FILE`]: the replay of `ranks` ranks under `model` on
/// the platform named `name` (its file `platform`, its hostfile
/// `hostfile`).
pub fn args_line(
    ranks: usize,
    model: SmpiModel,
    name: &str,
    platform: &str,
    hostfile: &str,
) -> String {
    let args = replay_args_on(ranks, model, platform, hostfile);
    format!("{} {name} {}\n", model.name(), args.join(" "))
}

/// The most bytes of `smpirun`'s output kept (its end is what matters).
const MAX_OUTPUT: usize = 1 << 20;

/// Replays the trace directory `dir` (traces, [`PLATFORM_FILE`] and
/// [`HOSTFILE`]) of `ranks` ranks with `smpirun` under `model`; returns
/// SimGrid's simulated time, seconds. A replay still running after
/// `timeout` is killed.
///
/// # Errors
/// [`Error::Unsupported`] where `smpirun` is not installed (naming
/// [`PACKAGE`]); [`Error::Transport`] where it cannot start, fails
/// (SimGrid's deadlock report, say: its output's end is in the error),
/// runs past `timeout`, or prints no simulated time.
pub fn replay_dir(dir: &Path, ranks: usize, model: SmpiModel, timeout: Duration) -> Result<f64> {
    replay_dir_with(dir, &replay_args(ranks, model), timeout)
}

/// Runs `smpirun args` in `dir` ([`replay_args_on`] gives them) and
/// returns SimGrid's simulated time, as [`replay_dir`].
///
/// # Errors
/// As [`replay_dir`].
pub fn replay_dir_with(dir: &Path, args: &[String], timeout: Duration) -> Result<f64> {
    let smpirun = smpirun()?;
    let fail = |detail: String| Error::Transport {
        rank: 0,
        detail: format!("smpirun -replay in {}: {detail}", dir.display()),
    };
    let mut child = Command::new(&smpirun)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("{} cannot start: {e}", smpirun.display())))?;
    // Both pipes drained on threads, so that a chatty replay cannot block.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = p.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.len() > 2 * MAX_OUTPUT {
                        buf.drain(..buf.len() - MAX_OUTPUT);
                    }
                }
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "still running after {:.0} s, killed",
                    timeout.as_secs_f64()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(fail(format!("cannot wait for it: {e}"))),
        }
    };
    let mut text = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
    text += &String::from_utf8_lossy(&err.join().unwrap_or_default());
    let tail = || {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    };
    if !status.success() {
        return Err(fail(format!("failed ({status}):\n{}", tail())));
    }
    simulated_time(&text).ok_or_else(|| fail(format!("printed no simulated time:\n{}", tail())))
}

/// SimGrid's simulated time in `smpirun`'s output: the clock printed
/// beside the replay's `Simulation time` line (`...@<clock>`), else that
/// line's own figure.
pub fn simulated_time(output: &str) -> Option<f64> {
    let line = output
        .lines()
        .rev()
        .find_map(|l| l.split_once("Simulation time ").map(|(_, t)| t))?;
    let (coarse, fine) = match line.split_once('@') {
        Some((c, f)) => (c, Some(f)),
        None => (line, None),
    };
    let parse = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t >= 0.0)
    };
    fine.and_then(parse).or_else(|| parse(coarse))
}
