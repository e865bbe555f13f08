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
//!    network: events in order of simulated time (ties broken by rank), each
//!    link a FIFO server. Its times are a deterministic function of the
//!    traces, and the traces of a deterministic program do not depend on the
//!    thread schedule: with computation off, the same inputs give the same
//!    times bit for bit. A run's traces can be replayed over other networks
//!    without running the code again.
//!
//! # The model of a message
//! A message of `m` bytes from rank `a` to rank `b` takes the [`Route`]
//! the network gives: a latency `alpha`, a time per byte `beta`, the link it
//! leaves by and the link it arrives by. It enters its outgoing link when
//! the link is free (`start`), occupies it for `m beta`, reaches the
//! incoming link `alpha` after `start`, and occupies that one for `m beta`
//! once it is free, finishing no sooner than `alpha` after it left the
//! outgoing link. A send returns when its message has left (`MPI_Send` of
//! a buffered message); a receive returns when its message has finished
//! arriving; an exchange returns when both are done. So one message alone
//! takes `alpha + m beta`, and messages that share a link queue on it.
//!
//! Every figure computed here is simulated: print it with
//! [`Timeline::label`], which names the network model.

use crate::transport::{BufferPool, Traffic, TrafficCounter, Transport};
use sparse_core::{Error, Result};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A link that carries one message at a time (a FIFO server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Link {
    /// A rank's own outgoing port.
    RankOut(usize),
    /// A rank's own incoming port.
    RankIn(usize),
    /// A node's outgoing NIC, shared by the ranks of the node.
    NodeOut(usize),
    /// A node's incoming NIC, shared by the ranks of the node.
    NodeIn(usize),
}

/// How a message from one rank to another travels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    /// Latency, seconds.
    pub alpha: f64,
    /// Time per byte, seconds.
    pub beta: f64,
    /// The link it leaves by.
    pub out: Link,
    /// The link it arrives by.
    pub into: Link,
}

/// A network model: the route of every message.
pub trait Network: Send + Sync + fmt::Debug {
    /// A short description printed beside every simulated figure, with
    /// the model and its parameters.
    fn label(&self) -> String;
    /// The route of a message from `from` to `to`.
    fn route(&self, from: usize, to: usize) -> Route;
}

/// Latency and bandwidth of one kind of link, checked: both finite,
/// latency at least zero and bandwidth above zero.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlphaBeta {
    alpha: f64,
    beta: f64,
}

impl AlphaBeta {
    /// A link of latency `alpha_s` seconds and `bytes_per_s` bytes per
    /// second.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a negative or non-finite latency or
    /// a bandwidth that is not finite and positive.
    pub fn new(alpha_s: f64, bytes_per_s: f64) -> Result<Self> {
        if !(alpha_s.is_finite() && alpha_s >= 0.0) {
            return Err(Error::invalid("alpha", format!("{alpha_s} s")));
        }
        if !(bytes_per_s.is_finite() && bytes_per_s > 0.0) {
            return Err(Error::invalid("bandwidth", format!("{bytes_per_s} B/s")));
        }
        Ok(Self {
            alpha: alpha_s,
            beta: 1.0 / bytes_per_s,
        })
    }
    /// Latency, seconds.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
    /// Time per byte, seconds.
    pub fn beta(&self) -> f64 {
        self.beta
    }
    fn describe(&self) -> String {
        format!(
            "alpha {:.3} us, {:.3} GB/s",
            self.alpha * 1e6,
            1e-9 / self.beta
        )
    }
}

/// Full bisection: every rank has its own port in each direction, and a
/// message costs `alpha + m beta` (the alpha-beta model of RedSync eq. 1
/// and SparDL's Table 1).
#[derive(Debug, Clone, PartialEq)]
pub struct FullBisection {
    name: String,
    link: AlphaBeta,
}

impl FullBisection {
    /// A full-bisection network named `name` (printed in its label).
    pub fn new(name: impl Into<String>, link: AlphaBeta) -> Self {
        Self {
            name: name.into(),
            link,
        }
    }
}

impl Network for FullBisection {
    fn label(&self) -> String {
        format!("{}: full bisection, {}", self.name, self.link.describe())
    }
    fn route(&self, from: usize, to: usize) -> Route {
        Route {
            alpha: self.link.alpha,
            beta: self.link.beta,
            out: Link::RankOut(from),
            into: Link::RankIn(to),
        }
    }
}

/// Two levels: nodes of `ranks_per_node` consecutive ranks; within a node
/// each rank has its own ports (NVLink through a switch, or PCIe), across
/// nodes the node's NIC carries every message of its ranks, one at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct TwoLevel {
    name: String,
    ranks_per_node: usize,
    intra: AlphaBeta,
    inter: AlphaBeta,
}

impl TwoLevel {
    /// A two-level network named `name`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `ranks_per_node == 0`.
    pub fn new(
        name: impl Into<String>,
        ranks_per_node: usize,
        intra: AlphaBeta,
        inter: AlphaBeta,
    ) -> Result<Self> {
        if ranks_per_node == 0 {
            return Err(Error::invalid("ranks_per_node", "0"));
        }
        Ok(Self {
            name: name.into(),
            ranks_per_node,
            intra,
            inter,
        })
    }
    /// Ranks per node.
    pub fn ranks_per_node(&self) -> usize {
        self.ranks_per_node
    }
}

impl Network for TwoLevel {
    fn label(&self) -> String {
        format!(
            "{}: {} ranks per node; intra-node {}; inter-node {} per node's NIC",
            self.name,
            self.ranks_per_node,
            self.intra.describe(),
            self.inter.describe()
        )
    }
    fn route(&self, from: usize, to: usize) -> Route {
        let (a, b) = (from / self.ranks_per_node, to / self.ranks_per_node);
        if a == b {
            Route {
                alpha: self.intra.alpha,
                beta: self.intra.beta,
                out: Link::RankOut(from),
                into: Link::RankIn(to),
            }
        } else {
            Route {
                alpha: self.inter.alpha,
                beta: self.inter.beta,
                out: Link::NodeOut(a),
                into: Link::NodeIn(b),
            }
        }
    }
}

/// The preset networks: name, description with the source of its figures.
///
/// Bandwidths are the links' nominal rates (the papers' clusters: SparDL
/// and SparCML ran on Gigabit Ethernet, RedSync cites 10 Gb/s on EC2,
/// Zen's EC2 p3.16xlarge machines have 8 V100 over NVLink and a 25 Gb/s
/// network, SparCML's production cluster InfiniBand and NVLink). Latencies
/// are assumptions, typical of MPI over each fabric: 50 us over TCP on
/// Gigabit Ethernet, 30 us at 10 GbE, 25 us at 25 GbE, 1.5 us over EDR
/// InfiniBand (100 Gb/s), 5 us between GPUs over NVLink (NVLink 2 of the
/// V100: 6 links of 25 GB/s each way, 150 GB/s per GPU). Replace them with
/// measured ones through a network file (`sparse-bench calibrate`).
pub const PRESETS: &[(&str, &str)] = &[
    (
        "1gbe",
        "Gigabit Ethernet, full bisection (SparDL sec. 5, SparCML sec. 7)",
    ),
    ("10gbe", "10 Gb/s Ethernet, full bisection (RedSync sec. 2)"),
    ("25gbe", "25 Gb/s Ethernet, full bisection (Zen sec. 6)"),
    ("ib100", "100 Gb/s InfiniBand EDR, full bisection"),
    (
        "nvlink8-25gbe",
        "8 ranks per node over NVLink 2, nodes over a shared 25 Gb/s NIC (Zen sec. 6: EC2 p3.16xlarge)",
    ),
    (
        "nvlink8-ib100",
        "8 ranks per node over NVLink 2, nodes over a shared 100 Gb/s InfiniBand NIC",
    ),
];

/// The preset network `name` (see [`PRESETS`]).
///
/// # Errors
/// [`Error::InvalidParameter`] for an unknown name, listing the known ones.
pub fn preset(name: &str) -> Result<Box<dyn Network>> {
    let gbit = |g: f64| g * 1e9 / 8.0;
    let ethernet = |alpha: f64, g: f64| AlphaBeta::new(alpha, gbit(g));
    let nvlink = AlphaBeta::new(5e-6, 150e9)?;
    Ok(match name {
        "1gbe" => Box::new(FullBisection::new(name, ethernet(50e-6, 1.0)?)),
        "10gbe" => Box::new(FullBisection::new(name, ethernet(30e-6, 10.0)?)),
        "25gbe" => Box::new(FullBisection::new(name, ethernet(25e-6, 25.0)?)),
        "ib100" => Box::new(FullBisection::new(name, ethernet(1.5e-6, 100.0)?)),
        "nvlink8-25gbe" => Box::new(TwoLevel::new(name, 8, nvlink, ethernet(25e-6, 25.0)?)?),
        "nvlink8-ib100" => Box::new(TwoLevel::new(name, 8, nvlink, ethernet(1.5e-6, 100.0)?)?),
        _ => {
            let known: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
            return Err(Error::invalid(
                "network",
                format!("{name:?} is not one of {}", known.join(", ")),
            ));
        }
    })
}

/// The largest network file [`read_network`] reads.
pub const MAX_NETWORK_FILE: u64 = 64 * 1024;

/// A network file: `key = value` lines (`#` starts a comment), the model
/// and its constants, as `sparse-bench calibrate` writes it:
///
/// ```text
/// # measured by sparse-bench calibrate under mpiexec -n 2
/// name = calibrated
/// model = full_bisection
/// alpha_s = 2.1e-6
/// bytes_per_s = 4.8e9
/// ```
///
/// A two-level file has `model = two_level`, `ranks_per_node` and
/// `intra_alpha_s`, `intra_bytes_per_s`, `inter_alpha_s`,
/// `inter_bytes_per_s` instead.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the line and the key: a line without
/// `=`, an unknown or repeated key, a missing one, a value that is not a
/// number, or constants [`AlphaBeta::new`] refuses.
pub fn parse_network(text: &str) -> Result<Box<dyn Network>> {
    let bad =
        |line: usize, what: String| Error::invalid("network file", format!("line {line}: {what}"));
    let mut kv: Vec<(&str, &str, usize)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| bad(i + 1, format!("{line:?} is not `key = value`")))?;
        let (k, v) = (k.trim(), v.trim());
        if kv.iter().any(|(seen, _, _)| *seen == k) {
            return Err(bad(i + 1, format!("{k} given twice")));
        }
        kv.push((k, v, i + 1));
    }
    let get = |k: &str| kv.iter().find(|(key, _, _)| *key == k);
    let text_of = |k: &str| -> Result<&str> {
        get(k)
            .map(|(_, v, _)| *v)
            .ok_or_else(|| Error::invalid("network file", format!("no {k}")))
    };
    let num = |k: &str| -> Result<f64> {
        let (_, v, line) =
            get(k).ok_or_else(|| Error::invalid("network file", format!("no {k}")))?;
        v.parse::<f64>()
            .map_err(|_| bad(*line, format!("{k} = {v:?} is not a number")))
    };
    let link = |prefix: &str| -> Result<AlphaBeta> {
        AlphaBeta::new(
            num(&format!("{prefix}alpha_s"))?,
            num(&format!("{prefix}bytes_per_s"))?,
        )
    };
    let name = get("name").map_or("file", |(_, v, _)| *v).to_string();
    let (net, keys): (Box<dyn Network>, &[&str]) = match text_of("model")? {
        "full_bisection" => (
            Box::new(FullBisection::new(name, link("")?)),
            &["name", "model", "alpha_s", "bytes_per_s"],
        ),
        "two_level" => {
            let (_, v, line) = get("ranks_per_node")
                .ok_or_else(|| Error::invalid("network file", "no ranks_per_node"))?;
            let g: usize = v
                .parse()
                .map_err(|_| bad(*line, format!("ranks_per_node = {v:?} is not a count")))?;
            (
                Box::new(TwoLevel::new(name, g, link("intra_")?, link("inter_")?)?),
                &[
                    "name",
                    "model",
                    "ranks_per_node",
                    "intra_alpha_s",
                    "intra_bytes_per_s",
                    "inter_alpha_s",
                    "inter_bytes_per_s",
                ],
            )
        }
        other => {
            return Err(Error::invalid(
                "network file",
                format!("model {other:?} is not full_bisection or two_level"),
            ));
        }
    };
    if let Some((k, _, line)) = kv.iter().find(|(k, _, _)| !keys.contains(k)) {
        return Err(bad(*line, format!("unknown key {k:?} for this model")));
    }
    Ok(net)
}

/// The text of a full-bisection network file ([`parse_network`]) of
/// `link`, named `name`, after `comment` (each line prefixed with `# `).
pub fn full_bisection_file(name: &str, link: AlphaBeta, comment: &str) -> String {
    let mut out: String = comment.lines().map(|l| format!("# {l}\n")).collect();
    out += &format!(
        "name = {name}\nmodel = full_bisection\nalpha_s = {:e}\nbytes_per_s = {:e}\n",
        link.alpha(),
        1.0 / link.beta()
    );
    out
}

/// Reads the network file at `path` ([`parse_network`]).
///
/// # Errors
/// [`Error::InvalidParameter`] naming the path: it cannot be read, is
/// longer than [`MAX_NETWORK_FILE`], or does not parse.
pub fn read_network(path: &std::path::Path) -> Result<Box<dyn Network>> {
    use std::io::Read;
    let what = |e: String| Error::invalid("network file", format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| what(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_NETWORK_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| what(e.to_string()))?;
    if text.len() as u64 > MAX_NETWORK_FILE {
        return Err(what(format!("longer than {MAX_NETWORK_FILE} bytes")));
    }
    parse_network(&text).map_err(|e| what(e.to_string()))
}

/// The network `spec` names: a preset ([`PRESETS`]) or, where it names
/// none, the path of a network file ([`read_network`]).
///
/// # Errors
/// Neither a preset nor a readable network file (the error lists the
/// presets).
pub fn network(spec: &str) -> Result<Box<dyn Network>> {
    if PRESETS.iter().any(|(n, _)| *n == spec) {
        return preset(spec);
    }
    let path = std::path::Path::new(spec);
    if path.exists() {
        return read_network(path);
    }
    preset(spec).map_err(|e| Error::invalid("network", format!("{e}; nor is it a network file")))
}

/// One step of a rank's trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// Local computation of this many simulated seconds.
    Compute(f64),
    /// A send of `bytes` to `to`.
    Send {
        /// Destination.
        to: usize,
        /// Payload bytes.
        bytes: usize,
    },
    /// A receive from `from`.
    Recv {
        /// Source.
        from: usize,
    },
    /// A send to `to` and a receive from `from` in one round.
    Exchange {
        /// Destination.
        to: usize,
        /// Payload bytes sent.
        bytes: usize,
        /// Source.
        from: usize,
    },
    /// A point whose simulated time the replay reports
    /// ([`SimTransport::mark`]).
    Mark,
}

/// What one rank did, in order.
pub type Trace = Vec<Op>;

/// How local computation advances a rank's simulated clock.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Compute {
    /// Not at all: communication only; times are then a deterministic
    /// function of the inputs.
    #[default]
    Off,
    /// By the thread's CPU time between communication calls, times
    /// `factor` (below 1 for a faster device, above for a slower one).
    Measured {
        /// Simulated seconds per second of this machine's CPU time.
        factor: f64,
    },
}

/// A simulated cluster of `size` ranks: see the [module](self) doc.
#[derive(Debug, Clone)]
pub struct SimCluster {
    size: usize,
    compute: Compute,
    timeout: Duration,
}

/// The outcome of [`SimCluster::run`]: each rank's result, traffic and
/// trace, by rank.
#[derive(Debug)]
pub struct SimRun<T> {
    /// Each rank's result.
    pub results: Vec<Result<T>>,
    /// Each rank's traffic, counted as the thread transport counts it.
    pub traffic: Vec<Traffic>,
    /// Each rank's trace.
    pub traces: Vec<Trace>,
}

impl<T> SimRun<T> {
    /// The simulated times of this run over `net` ([`replay`]).
    ///
    /// # Errors
    /// As [`replay`].
    pub fn timeline(&self, net: &dyn Network) -> Result<Timeline> {
        replay(&self.traces, net)
    }
}

impl SimCluster {
    /// `size` ranks (at least 1), computation off, a 600 s receive
    /// timeout (a thousand ranks share this machine's cores).
    ///
    /// # Panics
    /// If `size == 0`.
    pub fn new(size: usize) -> Self {
        assert!(size > 0, "SimCluster::new(0)");
        Self {
            size,
            compute: Compute::Off,
            timeout: Duration::from_secs(600),
        }
    }
    /// How computation advances the clocks.
    ///
    /// # Panics
    /// If a measured factor is negative or not finite.
    pub fn compute(mut self, compute: Compute) -> Self {
        if let Compute::Measured { factor } = compute {
            assert!(
                factor.is_finite() && factor >= 0.0,
                "compute factor {factor}"
            );
        }
        self.compute = compute;
        self
    }
    /// Sets the receive timeout (wall time).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// Runs `f` on every rank (a thread each, with a small stack) and
    /// returns the results, traffic and traces. A panic inside `f` becomes
    /// that rank's [`Error::Panicked`]; a rank that returns closes its
    /// mailbox, so peers still waiting on it get [`Error::PeerFailed`].
    ///
    /// # Errors
    /// [`Error::Transport`] if the operating system refuses a thread (the
    /// ranks already started fail with [`Error::PeerFailed`]).
    pub fn run<T: Send, F>(&self, f: F) -> Result<SimRun<T>>
    where
        F: Fn(&mut SimTransport) -> Result<T> + Sync,
    {
        let shared = Arc::new(Shared::new(self.size));
        let outs: Vec<Result<(Result<T>, Traffic, Trace)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.size)
                .map(|rank| {
                    let mut t = SimTransport::new(rank, self, Arc::clone(&shared));
                    let f = &f;
                    std::thread::Builder::new()
                        .name(format!("sim-rank-{rank}"))
                        .stack_size(1 << 20)
                        .spawn_scoped(scope, move || t.run_rank(f))
                        .map_err(|e| {
                            shared.close(rank);
                            Error::Transport {
                                rank,
                                detail: format!("cannot start its thread: {e}"),
                            }
                        })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.map(|h| h.join().expect("rank threads catch their panics")))
                .collect()
        });
        let mut run = SimRun {
            results: Vec::with_capacity(self.size),
            traffic: Vec::with_capacity(self.size),
            traces: Vec::with_capacity(self.size),
        };
        for out in outs {
            let (result, traffic, trace) = out?;
            run.results.push(result);
            run.traffic.push(traffic);
            run.traces.push(trace);
        }
        Ok(run)
    }
}

/// One rank's mailbox: the messages sent to it, by source.
#[derive(Debug, Default)]
struct Mailbox {
    queues: Mutex<HashMap<usize, VecDeque<Vec<u8>>>>,
    arrived: Condvar,
}

/// What the ranks share: one mailbox each, and which ranks are gone.
#[derive(Debug)]
struct Shared {
    boxes: Vec<Mailbox>,
    gone: Vec<AtomicBool>,
}

impl Shared {
    fn new(size: usize) -> Self {
        Self {
            boxes: (0..size).map(|_| Mailbox::default()).collect(),
            gone: (0..size).map(|_| AtomicBool::new(false)).collect(),
        }
    }
    fn lock(&self, rank: usize) -> MutexGuard<'_, HashMap<usize, VecDeque<Vec<u8>>>> {
        // A rank that panicked while holding the lock left whole queues:
        // each push and pop is one call on the map.
        self.boxes[rank]
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
    /// Marks `rank` gone and wakes every waiting rank, so that waits on it
    /// end (each mailbox is locked while notified: no wake-up is lost
    /// between a waiter's check and its wait).
    fn close(&self, rank: usize) {
        self.gone[rank].store(true, Ordering::SeqCst);
        for (r, b) in self.boxes.iter().enumerate() {
            let _held = self.lock(r);
            b.arrived.notify_all();
        }
    }
}

/// One rank's end of a [`SimCluster`].
#[derive(Debug)]
pub struct SimTransport {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
    counter: TrafficCounter,
    pool: BufferPool,
    trace: Trace,
    compute: Compute,
    /// The thread's CPU time at the end of its last communication call.
    cpu_mark: Option<Duration>,
    timeout: Duration,
    abandoned: bool,
}

impl SimTransport {
    fn new(rank: usize, c: &SimCluster, shared: Arc<Shared>) -> Self {
        Self {
            rank,
            size: c.size,
            shared,
            counter: TrafficCounter::default(),
            pool: BufferPool::for_ranks(c.size),
            trace: Vec::new(),
            compute: c.compute,
            cpu_mark: None,
            timeout: c.timeout,
            abandoned: false,
        }
    }

    fn run_rank<T>(
        &mut self,
        f: &(impl Fn(&mut SimTransport) -> Result<T> + Sync),
    ) -> (Result<T>, Traffic, Trace) {
        self.cpu_mark = thread_cpu_time();
        let result = crate::transport::catch_rank(self.rank, || f(self));
        self.computed();
        self.shared.close(self.rank);
        (
            result,
            self.counter.traffic(),
            std::mem::take(&mut self.trace),
        )
    }

    /// Marks this point of the rank's code: the replay reports the rank's
    /// simulated time here ([`Timeline::marks`]), so a caller can time one
    /// call among many.
    pub fn mark(&mut self) {
        self.computed();
        self.trace.push(Op::Mark);
    }

    /// Records the computation since the last call, where measured.
    fn computed(&mut self) {
        if let Compute::Measured { factor } = self.compute
            && let (Some(then), Some(now)) = (self.cpu_mark, thread_cpu_time())
        {
            let secs = now.saturating_sub(then).as_secs_f64() * factor;
            if secs > 0.0 {
                self.trace.push(Op::Compute(secs));
            }
        }
    }

    /// Starts a communication call: records the computation before it,
    /// counts the round, refuses a call after [`Transport::abandon`].
    fn begin(&mut self) -> Result<()> {
        self.computed();
        if self.abandoned {
            return Err(Error::Transport {
                rank: self.rank,
                detail: "abandoned after a failed collective".into(),
            });
        }
        self.counter.round();
        Ok(())
    }

    /// Ends a communication call: its own CPU time is the network's, not
    /// computation.
    fn end(&mut self) {
        if self.compute != Compute::Off {
            self.cpu_mark = thread_cpu_time();
        }
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        crate::transport::check_peer(peer, self.size)
    }

    fn post(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.check_peer(to)?;
        if self.shared.gone[to].load(Ordering::SeqCst) {
            return Err(Error::PeerFailed {
                rank: self.rank,
                peer: to,
            });
        }
        let mut msg = self.pool.take_fitting(data.len());
        msg.clear();
        msg.extend_from_slice(data);
        self.shared
            .lock(to)
            .entry(self.rank)
            .or_default()
            .push_back(msg);
        self.shared.boxes[to].arrived.notify_all();
        self.counter.sent(data.len());
        Ok(())
    }

    fn take(&mut self, from: usize) -> Result<Vec<u8>> {
        self.check_peer(from)?;
        let deadline = Instant::now() + self.timeout;
        let mailbox = &self.shared.boxes[self.rank];
        let mut queues = self.shared.lock(self.rank);
        loop {
            if let Some(msg) = queues.get_mut(&from).and_then(VecDeque::pop_front) {
                drop(queues);
                self.counter.received(msg.len());
                return Ok(msg);
            }
            if self.shared.gone[from].load(Ordering::SeqCst) {
                return Err(Error::PeerFailed {
                    rank: self.rank,
                    peer: from,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    rank: self.rank,
                    peer: from,
                    timeout_ms: self.timeout.as_millis() as u64,
                });
            }
            queues = mailbox
                .arrived
                .wait_timeout(queues, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// This thread's CPU time, where the platform has a per-thread clock.
fn thread_cpu_time() -> Option<Duration> {
    cpu_time::ThreadTime::try_now()
        .ok()
        .map(|t| t.as_duration())
}

impl Transport for SimTransport {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.begin()?;
        self.post(to, data)?;
        self.trace.push(Op::Send {
            to,
            bytes: data.len(),
        });
        self.end();
        Ok(())
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        self.begin()?;
        let got = self.take(from)?;
        self.trace.push(Op::Recv { from });
        self.end();
        Ok(got)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.begin()?;
        self.post(to, data)?;
        let got = self.take(from)?;
        self.trace.push(Op::Exchange {
            to,
            bytes: data.len(),
            from,
        });
        self.end();
        Ok(got)
    }
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        let got = self.recv(from)?;
        self.pool.give(std::mem::replace(into, got));
        Ok(())
    }
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        let got = self.exchange(to, data, from)?;
        self.pool.give(std::mem::replace(into, got));
        Ok(())
    }
    fn take_buffer(&mut self) -> Vec<u8> {
        self.pool.take()
    }
    fn give_buffer(&mut self, buf: Vec<u8>) {
        self.pool.give(buf);
    }
    fn traffic(&self) -> Traffic {
        self.counter.traffic()
    }
    /// Closes this rank's mailbox for its peers: their waits on it end with
    /// [`Error::PeerFailed`], and its own later calls fail.
    fn abandon(&mut self) {
        self.abandoned = true;
        self.shared.close(self.rank);
    }
}

/// Simulated times of a replay, by rank, in seconds from the start.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Each rank's clock at the end of its trace.
    pub finish: Vec<f64>,
    /// Each rank's clock at each of its marks, in order.
    pub marks: Vec<Vec<f64>>,
    /// The network's label.
    pub network: String,
}

impl Timeline {
    /// The slowest rank's finish: the simulated time of the whole run.
    pub fn makespan(&self) -> f64 {
        self.finish.iter().copied().fold(0.0, f64::max)
    }
    /// The slowest rank's time from its mark `i` to its mark `i + 1` (the
    /// time of the call between them, as the papers time a collective),
    /// over the ranks that made both marks; `None` where no rank did.
    pub fn span(&self, i: usize) -> Option<f64> {
        self.marks
            .iter()
            .filter_map(|m| Some(m.get(i + 1)? - m.get(i)?))
            .reduce(f64::max)
    }
    /// `simulated (<network>)`: what every printed figure carries.
    pub fn label(&self) -> String {
        format!("simulated ({})", self.network)
    }
}

/// A time as an ordered key (times are finite and non-negative).
fn key(t: f64) -> u64 {
    t.to_bits()
}

/// What the replay schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A message's head reaches its incoming link (before ranks run at the
    /// same time, so that a rank that receives then sees it).
    Arrive(usize),
    /// A rank runs its next op.
    Run(usize),
}

/// A message in flight.
#[derive(Debug, Clone, Copy)]
struct Message {
    to: usize,
    bytes: usize,
    route: Route,
    /// When it has left its outgoing link.
    left: f64,
    /// When it has finished arriving; `None` until its arrival is replayed.
    done: Option<f64>,
    /// Whether its receiver waits for it.
    claimed: bool,
}

/// What a waiting rank waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// This message, already sent.
    Message(usize),
    /// The next message from this rank, not sent yet.
    Next(usize),
}

/// A rank's place in the replay.
#[derive(Debug, Clone, Default)]
struct RankState {
    pc: usize,
    clock: f64,
    /// What it waits for, with the time its own send leaves by (an
    /// exchange returns when both are done).
    waiting: Option<(Wait, f64)>,
}

/// Replays `traces` over `net`: a discrete-event simulation, events in
/// order of time, ties by kind and then by rank or message number, each
/// link a FIFO server (see the [module](self) doc for the model).
///
/// # Errors
/// [`Error::NoSuchRank`] if a trace names a rank outside the traces;
/// [`Error::InvalidParameter`] if the traces do not match (a receive
/// without its send, or a send that no receive takes: the run failed, or
/// the traces come from different runs), naming the ranks; if a trace
/// computes for a negative or non-finite time, or the network routes a
/// message with a negative or non-finite latency or time per byte.
pub fn replay(traces: &[Trace], net: &dyn Network) -> Result<Timeline> {
    let mut sim = Replay::new(traces, net);
    sim.run()?;
    Ok(Timeline {
        finish: sim.ranks.iter().map(|r| r.clock).collect(),
        marks: sim.marks,
        network: net.label(),
    })
}

struct Replay<'a> {
    traces: &'a [Trace],
    net: &'a dyn Network,
    ranks: Vec<RankState>,
    marks: Vec<Vec<f64>>,
    messages: Vec<Message>,
    /// Messages sent from `.0` to `.1` that no receive has claimed, in
    /// order.
    unclaimed: HashMap<(usize, usize), VecDeque<usize>>,
    free: HashMap<Link, f64>,
    events: BinaryHeap<Reverse<(u64, Event)>>,
}

impl<'a> Replay<'a> {
    fn new(traces: &'a [Trace], net: &'a dyn Network) -> Self {
        let p = traces.len();
        let events = (0..p).map(|r| Reverse((key(0.0), Event::Run(r)))).collect();
        Self {
            traces,
            net,
            ranks: vec![RankState::default(); p],
            marks: vec![Vec::new(); p],
            messages: Vec::new(),
            unclaimed: HashMap::new(),
            free: HashMap::new(),
            events,
        }
    }

    fn run(&mut self) -> Result<()> {
        while let Some(Reverse((at, event))) = self.events.pop() {
            let now = f64::from_bits(at);
            match event {
                Event::Arrive(m) => self.arrive(m, now),
                Event::Run(r) => self.step(r, now)?,
            }
        }
        let stuck: Vec<usize> = (0..self.ranks.len())
            .filter(|&r| self.ranks[r].pc < self.traces[r].len())
            .collect();
        let unreceived = self
            .unclaimed
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .min_by_key(|(link, _)| **link);
        if let Some((&(from, to), q)) = unreceived {
            return Err(Error::invalid(
                "traces",
                format!(
                    "{} messages from rank {from} to rank {to} are never received",
                    q.len()
                ),
            ));
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(
                "traces",
                format!("ranks {stuck:?} wait for messages that no rank sent"),
            ))
        }
    }

    fn check(&self, peer: usize) -> Result<()> {
        if peer < self.ranks.len() {
            Ok(())
        } else {
            Err(Error::NoSuchRank {
                rank: peer,
                size: self.ranks.len(),
            })
        }
    }

    fn schedule(&mut self, at: f64, event: Event) {
        self.events.push(Reverse((key(at), event)));
    }

    /// Runs rank `r`'s ops from time `now` until one makes it wait or
    /// schedules its next op later.
    fn step(&mut self, r: usize, now: f64) -> Result<()> {
        let rs = &mut self.ranks[r];
        rs.clock = rs.clock.max(now);
        if let Some((Wait::Message(m), left)) = rs.waiting {
            // Woken by its message's arrival.
            rs.waiting = None;
            let done = self.messages[m].done.unwrap_or(now);
            rs.clock = rs.clock.max(done).max(left);
            rs.pc += 1;
        }
        while let Some(&op) = self.traces[r].get(self.ranks[r].pc) {
            let clock = self.ranks[r].clock;
            match op {
                Op::Mark => {
                    self.marks[r].push(clock);
                    self.ranks[r].pc += 1;
                    continue;
                }
                Op::Compute(secs) => {
                    if !(secs.is_finite() && secs >= 0.0) {
                        return Err(Error::invalid(
                            "traces",
                            format!("rank {r} computes for {secs} s"),
                        ));
                    }
                    self.ranks[r].clock = clock + secs;
                    self.ranks[r].pc += 1;
                }
                Op::Send { to, bytes } => {
                    self.check(to)?;
                    self.ranks[r].clock = self.send(r, to, bytes, clock)?;
                    self.ranks[r].pc += 1;
                }
                Op::Recv { from } => {
                    self.check(from)?;
                    self.receive(r, from, clock);
                }
                Op::Exchange { to, bytes, from } => {
                    self.check(to)?;
                    self.check(from)?;
                    let left = self.send(r, to, bytes, clock)?;
                    self.receive(r, from, left);
                }
            }
            // The rank's next op runs in time order with the other ranks'
            // (unless it now waits: its message's arrival wakes it).
            if self.ranks[r].waiting.is_none() {
                let at = self.ranks[r].clock;
                self.schedule(at, Event::Run(r));
            }
            return Ok(());
        }
        Ok(())
    }

    /// Puts a message from `r` to `to` on its outgoing link at `now`;
    /// returns when it has left. A receiver already waiting for the next
    /// message from `r` claims it.
    fn send(&mut self, r: usize, to: usize, bytes: usize, now: f64) -> Result<f64> {
        let route = self.net.route(r, to);
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !(valid(route.alpha) && valid(route.beta)) {
            return Err(Error::invalid(
                "network",
                format!(
                    "route {r} -> {to}: alpha {} s, beta {} s/B",
                    route.alpha, route.beta
                ),
            ));
        }
        let link = self.free.entry(route.out).or_insert(0.0);
        let start = now.max(*link);
        let left = start + bytes as f64 * route.beta;
        *link = left;
        let m = self.messages.len();
        let waiting = &mut self.ranks[to].waiting;
        let claimed = match *waiting {
            Some((Wait::Next(from), their_left)) if from == r => {
                *waiting = Some((Wait::Message(m), their_left));
                true
            }
            _ => {
                self.unclaimed.entry((r, to)).or_default().push_back(m);
                false
            }
        };
        self.messages.push(Message {
            to,
            bytes,
            route,
            left,
            done: None,
            claimed,
        });
        self.schedule(start + route.alpha, Event::Arrive(m));
        Ok(left)
    }

    /// Rank `r` receives its next message from `from`; its own send, if
    /// any, has left at `left`. It goes on at once if that message has
    /// arrived, else it waits.
    fn receive(&mut self, r: usize, from: usize, left: f64) {
        let next = self
            .unclaimed
            .get_mut(&(from, r))
            .and_then(VecDeque::pop_front);
        let rs = &mut self.ranks[r];
        match next {
            Some(m) => match self.messages[m].done {
                Some(done) => {
                    rs.clock = rs.clock.max(left).max(done);
                    rs.pc += 1;
                }
                None => {
                    self.messages[m].claimed = true;
                    rs.waiting = Some((Wait::Message(m), left));
                }
            },
            None => rs.waiting = Some((Wait::Next(from), left)),
        }
    }

    /// A message's head reaches its incoming link at `now`: it occupies the
    /// link once the link is free, and wakes its receiver if it waits.
    fn arrive(&mut self, m: usize, now: f64) {
        let msg = self.messages[m];
        let link = self.free.entry(msg.route.into).or_insert(0.0);
        let begin = now.max(*link);
        let done = (begin + msg.bytes as f64 * msg.route.beta).max(msg.left + msg.route.alpha);
        *link = done;
        self.messages[m].done = Some(done);
        if msg.claimed {
            self.schedule(done, Event::Run(msg.to));
        }
    }
}
