//! SimGrid as the referee of the simulator: a run's traces in SMPI's
//! time-independent format, a SimGrid platform equivalent to the network
//! model, and the replay of both by `smpirun -replay` (Debian's
//! `libsimgrid-dev`).
//!
//! # The traces
//! A trace directory ([`write_dir`]) holds one file per rank
//! ([`rank_file`]), the index that lists them ([`INDEX_FILE`]), the
//! platform ([`PLATFORM_FILE`]) and the hostfile ([`HOSTFILE`]). Each op of
//! a [`Trace`] becomes SMPI replay actions (sizes in bytes: `init` without
//! a datatype selects `MPI_BYTE`; one tag, 0):
//!
//! | op | SMPI actions of rank `r` |
//! |---|---|
//! | `Send { to, bytes }` | `r send to 0 bytes` |
//! | `Recv { from }` | `r recv from 0 size` (the size of the send it matches) |
//! | `Exchange { to, bytes, from }` | `r isend to 0 bytes`, `r irecv from 0 size`, `r wait r to 0`, `r wait from r 0` |
//! | `Compute(s)` | `r compute f`, `f = s` x [`HOST_SPEED`] flops (every host's speed) |
//! | `Mark` | nothing (cut the traces at marks with [`between_marks`]) |
//!
//! framed by `r init` and `r finalize`.
//!
//! # What SMPI's send does
//! SMPI sends a message below `smpi/send-is-detached-thresh` (64 KiB by
//! default) detached: `MPI_Send` returns at once; above it, it waits for
//! its message to arrive (rendezvous). And a message starts to move only
//! once its receive is posted, unless it is below `smpi/async-small-thresh`
//! (0 by default; SMPI wants it at most the first). The simulator's
//! eager send returns when its message has left the sender's link, and the
//! message moves from the send on: SMPI has no such send.
//! [`SmpiModel::AlphaBeta`] sends in rendezvous (both thresholds 0), as
//! the simulator's [`Rendezvous`](crate::sim::Rendezvous) at 0 bytes does;
//! [`SmpiModel::AlphaBetaEager`] sends detached and eager (both at their
//! maximum), as the simulator's [`Detached`](crate::sim::Detached) does: a
//! rank whose receive is done goes on while its send still moves, and its
//! next send shares its link with that one. [`SmpiModel::simulator`] gives
//! each its like in the simulator.
//! [`SmpiModel::Default`] keeps SMPI's defaults.
//!
//! # What differs between the models with alpha-beta settings
//! Both share a link's bandwidth among the flows on it (max-min fairness,
//! recomputed at every start and end of a flow), so one message alone
//! costs `alpha + m beta` in both, and `k` messages that start together
//! on one link all finish `alpha + k m beta` after. SimGrid counts a
//! message's latency before its bytes, the simulator after; with one
//! latency per link this shifts every flow of a link alike and changes no
//! share. The send differs: in rendezvous a message waits for its receive
//! (an incast that the receiver takes in order is served one message after
//! the other, latency included, where the simulator's messages move from
//! their sends on and share the link) and the send completes when it has
//! arrived, `alpha` after the simulator's send returns. Where a rank's
//! send crosses a link of larger latency than its receive (a node's NIC
//! against NVLink), it waits for that latency under rendezvous and not in
//! the simulator's eager send. That send is not SMPI's eager one either: it
//! keeps a rank to one message of its own moving at a time, where
//! [`SmpiModel::AlphaBetaEager`]'s detached sends let a rank run ahead and
//! share its link among several. Most calls take about the same time
//! both ways; where ranks do run ahead over a shared link (OmniReduce's
//! block messages across a node's NIC) the detached sends are up to 3x
//! slower, and only [`Detached`](crate::sim::Detached) matches them (to
//! 5% at P = 512, `docs/sparse-bench.md`: how much running ahead costs
//! depends on the order of events, so much that SimGrid's own lazy and
//! full updates differ by 8%).
//! On the two-level platform, ranks of a node talk over the host's
//! loopback, which SimGrid does not share at all (`FATPIPE`) where the
//! simulator shares each rank's own ports among its messages.

mod platform;
mod run;
mod trace;

pub use platform::{
    DRAGONFLY_RANKS_PER_ROUTER, DRAGONFLY_ROUTERS_PER_GROUP, DragonflyShape, Platform,
    dragonfly_shape,
};
pub use run::{
    ARGS_FILE, HOSTFILE, PACKAGE, PLATFORM_FILE, SmpiModel, args_line, replay_args, replay_args_on,
    replay_dir, replay_dir_with, simulated_time, smpirun,
};
pub use trace::{
    HOST_SPEED, INDEX_FILE, between_marks, index_text, rank_file, trace_texts, write_traces,
};

use crate::sim::Trace;
use sparse_core::{Error, Result};
use std::path::Path;

/// The name of the platform of a trace directory's [`PLATFORM_FILE`] in
/// its [`ARGS_FILE`].
pub const SAME: &str = "same";

/// Writes a whole trace directory into `dir` (created where missing): the
/// traces ([`write_traces`]), `platform`'s file for their ranks after the
/// comment `about`, the hostfile, and [`ARGS_FILE`] with the replay of
/// both models on that platform (named [`SAME`]).
///
/// # Errors
/// As [`write_traces`] and [`Platform::xml`]; named `trace directory`
/// where a file cannot be written.
pub fn write_dir(dir: &Path, traces: &[Trace], platform: &Platform, about: &str) -> Result<()> {
    let xml = platform.xml(traces.len(), about)?;
    write_traces(dir, traces)?;
    let p = traces.len();
    let args: String = SmpiModel::ALL
        .iter()
        .map(|&m| args_line(p, m, SAME, PLATFORM_FILE, HOSTFILE))
        .collect();
    for (name, text) in [
        (PLATFORM_FILE, xml),
        (HOSTFILE, platform.hostfile(p)),
        (ARGS_FILE, args),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::invalid("trace directory", format!("{}: {e}", path.display())))?;
    }
    Ok(())
}
