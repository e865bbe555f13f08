//! A simulated cluster: the real code of P ranks, run as threads, over a
//! transport that records what each rank sends, receives and computes; a
//! [`Network`] model then turns those records into simulated times.
//!
//! # Why record, then replay
//! A virtual clock advanced inside each thread's calls cannot model a
//! resource that several ranks share (a node's NIC) without depending on
//! the order in which the operating system runs the threads. Here the run
//! and the timing are two steps:
//! 1. [`SimCluster::run`] runs the ranks' code unchanged over
//!    [`SimTransport`] (a mailbox per rank, no structure of P x P) and keeps
//!    each rank's [`Trace`]: its sends, receives and exchanges with their
//!    sizes and peers, its marks, and, where asked, its local computation;
//! 2. [`replay`] runs a discrete-event simulation of the traces over a
//!    network: events in order of simulated time (ties broken by rank), the
//!    messages that cross a link at the same time sharing its bandwidth.
//!    Its times are a deterministic function of the traces, and the traces
//!    of a deterministic program do not depend on the thread schedule:
//!    with computation off, the same inputs give the same times bit for
//!    bit. A run's traces can be replayed over other networks without
//!    running the code again.
//!
//! # The model of a message
//! A message of `m` bytes from rank `a` to rank `b` takes the [`Route`]
//! the network gives: a latency `alpha`, a time per byte `beta`, the link it
//! leaves by and the link it arrives by. From its send on, it is a flow over
//! both links at once, and the flows on a link share its bandwidth
//! max-min fairly (progressive filling, recomputed whenever a flow starts
//! or ends: SimGrid's flow model with its correction factors at 1, as
//! SimGrid's `CM02` network model computes it): `k` flows alone on a link
//! move at `1 / (k beta)` bytes a second each, and a flow held back on
//! another link leaves the rest of this one to the others. A send returns
//! when its message's last byte has left (`MPI_Send` of a buffered
//! message); the message has finished arriving `alpha` later (a receive
//! returns then); an exchange returns when both are done. So one message
//! alone takes `alpha + m beta` (its send returns after `m beta`), as
//! before links were shared, and messages that never share a link keep
//! the times of the alpha-beta model exactly. SimGrid counts the latency
//! before the bytes instead of after; with one latency per link (every
//! preset), that shifts every flow on a link by the same `alpha` and
//! changes no share.
//!
//! That is an eager send. A network may put sends in rendezvous instead
//! ([`Rendezvous`], MPI's protocol above its eager limit, SMPI's): the
//! message starts to move only once its receive is posted, and the send
//! returns when the message has arrived. So an incast that its receiver
//! takes in order is served one message after another, latency included,
//! and a rank whose send crosses a slower link than its receive waits for
//! the slower latency.
//!
//! An eager send may also be detached instead ([`Detached`], SMPI's send
//! below its detach limit, an MPI whose eager messages a buffer takes at
//! once): it completes at once, and its rank goes on with its message
//! still moving, so that it may have several messages of its own on its
//! link, sharing it. Without that a rank has one message of its own
//! moving at a time; where ranks would run ahead over a shared link the
//! two differ most (OmniReduce's block messages across a node's NIC:
//! 32.7 ms against 92.2 ms detached at P = 512 on `nvlink8-25gbe`,
//! `docs/sparse-bench.md`).
//!
//! A link may have a token bucket in front of it ([`Bucket`], from
//! [`Network::bucket`]: a Linux `tbf` shaper): while the bucket holds
//! tokens the link carries up to the bucket's peak, and its flows' bytes
//! above the rate drain it; dry, the link carries its rate, and the
//! bucket refills at the rate while the link carries less. The shares are
//! recomputed when a bucket runs dry, as when a flow starts or ends.
//!
//! Every figure computed here is simulated: print it with
//! [`Timeline::label`], which names the network model.

mod flows;
mod network;
mod replay;
pub mod smpi;

pub use crate::transport::sim::{Compute, MAX_RANKS, Op, SimCluster, SimRun, SimTransport, Trace};
pub use network::{
    AlphaBeta, Bucket, Detached, FullBisection, Link, MAX_NETWORK_FILE, Network, PRESETS,
    Rendezvous, Route, TwoLevel, full_bisection_file, network, parse_network, preset, read_network,
};
pub use replay::{Timeline, replay};
