//! The network models of the simulator: links, routes, the presets and
//! network files.

use sparse_core::{Error, Result};
use std::fmt;
use std::path::Path;

/// A link; the messages that cross it at the same time share its
/// bandwidth max-min fairly (see the [module](super) doc).
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
    /// The token bucket that shapes `link`, if one does (a Linux `tbf`
    /// shaper): none by default.
    fn bucket(&self, _link: Link) -> Option<Bucket> {
        None
    }
    /// The size from which a send is in rendezvous ([`Rendezvous`]): its
    /// message moves once its receive is posted and the send completes
    /// when the message has arrived. Smaller sends, and every send where
    /// this is `None` (the default), are eager: the message moves at once
    /// and the send completes when its last byte has left.
    fn rendezvous_bytes(&self) -> Option<usize> {
        None
    }
    /// Whether its eager sends are detached ([`Detached`]): such a send
    /// completes at once, its message still moving, so that its rank goes
    /// on and may have several messages of its own on its link. Where
    /// this is `false` (the default) an eager send completes when its
    /// message's last byte has left. Sends in rendezvous are never
    /// detached.
    fn detached(&self) -> bool {
        false
    }
}

/// A network whose sends of at least `from_bytes` follow MPI's rendezvous
/// protocol (SMPI's, with `smpi/send-is-detached-thresh` at `from_bytes`):
/// the message starts to move only once the receiver has posted its
/// receive, and the send completes when the message has arrived, not
/// when its last byte has left. Routes and buckets are the inner
/// network's. At `from_bytes = 0` every send is in rendezvous, as SMPI's
/// alpha-beta model sends them (`bench/RESULTS.md`, the SimGrid table).
///
/// Blocking sends that eager buffering lets pass can deadlock in
/// rendezvous (two ranks that send to each other before receiving), as
/// in MPI: the replay then names the ranks that wait.
#[derive(Debug)]
pub struct Rendezvous {
    inner: Box<dyn Network>,
    from_bytes: usize,
}

impl Rendezvous {
    /// `inner` with its sends of at least `from_bytes` in rendezvous.
    pub fn new(inner: Box<dyn Network>, from_bytes: usize) -> Self {
        Self { inner, from_bytes }
    }
}

impl Network for Rendezvous {
    fn label(&self) -> String {
        format!(
            "{}; sends of {} B and more in rendezvous",
            self.inner.label(),
            self.from_bytes
        )
    }
    fn route(&self, from: usize, to: usize) -> Route {
        self.inner.route(from, to)
    }
    fn bucket(&self, link: Link) -> Option<Bucket> {
        self.inner.bucket(link)
    }
    fn rendezvous_bytes(&self) -> Option<usize> {
        Some(self.from_bytes)
    }
    fn detached(&self) -> bool {
        self.inner.detached()
    }
}

/// A network whose eager sends are detached, as SMPI sends a message below
/// `smpi/send-is-detached-thresh` (and as an MPI whose eager messages a
/// buffer takes at once, a TCP socket's say, completes them): the send
/// completes at once and its message moves on, so that a rank whose
/// receive is done runs ahead with its send still on its link, sharing the
/// link with its next ones. A blocking send returns at once; an exchange
/// returns when its receive has arrived. Routes, buckets and the
/// rendezvous size are the inner network's (sends in rendezvous still wait
/// for their receive and their arrival).
///
/// SMPI's `alpha-beta-eager` replay ([`super::smpi::SmpiModel::AlphaBetaEager`])
/// sends so. Without it a rank has one message of its own moving at a
/// time: where ranks would run ahead over a shared link (OmniReduce's
/// block messages across a node's NIC, `docs/sparse-bench.md`) the two
/// differ by up to 3x.
#[derive(Debug)]
pub struct Detached {
    inner: Box<dyn Network>,
}

impl Detached {
    /// `inner` with its eager sends detached.
    pub fn new(inner: Box<dyn Network>) -> Self {
        Self { inner }
    }
}

impl Network for Detached {
    fn label(&self) -> String {
        format!("{}; eager sends detached", self.inner.label())
    }
    fn route(&self, from: usize, to: usize) -> Route {
        self.inner.route(from, to)
    }
    fn bucket(&self, link: Link) -> Option<Bucket> {
        self.inner.bucket(link)
    }
    fn rendezvous_bytes(&self) -> Option<usize> {
        self.inner.rendezvous_bytes()
    }
    fn detached(&self) -> bool {
        true
    }
}

/// A token bucket in front of a link, as Linux's `tbf` shapes one: the
/// link's bandwidth (its [`AlphaBeta`]) is the rate tokens arrive at, up
/// to `bytes` of them; while the bucket holds tokens the link carries up
/// to `peak_bytes_per_s` (the wire under the shaper), and the bytes above
/// the rate drain the bucket; empty, the link carries the rate. A message
/// that finds the bucket full passes its first part at the peak: what a
/// shaped link does to messages of kilobytes after a pause.
///
/// A simulation starts with the bucket full, or at the level
/// [`Bucket::with_level`] gives: in a training loop a step's calls find what
/// the link's idle time since the last step's calls refilled (at the rate,
/// up to the size), not a full bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    bytes: f64,
    peak: f64,
    level: f64,
}

impl Bucket {
    /// A bucket of `bytes` in front of a wire of `peak_bytes_per_s`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `bucket_bytes` for a size that is
    /// not finite and positive, `peak_bytes_per_s` for a peak that is not.
    pub fn new(bytes: f64, peak_bytes_per_s: f64) -> Result<Self> {
        if !(bytes.is_finite() && bytes > 0.0) {
            return Err(Error::invalid(
                "bucket_bytes",
                format!("{} is not a finite size above 0", shown(bytes)),
            ));
        }
        if !(peak_bytes_per_s.is_finite() && peak_bytes_per_s > 0.0) {
            return Err(Error::invalid(
                "peak_bytes_per_s",
                format!(
                    "{} is not a finite bandwidth above 0",
                    shown(peak_bytes_per_s)
                ),
            ));
        }
        Ok(Self {
            bytes,
            peak: peak_bytes_per_s,
            level: bytes,
        })
    }
    /// The same bucket holding `level_bytes` of tokens when a simulation
    /// starts (full by default; 0 is empty).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `bucket_level_bytes` for a level
    /// that is not finite, is negative or is above the bucket's size.
    pub fn with_level(mut self, level_bytes: f64) -> Result<Self> {
        if !(level_bytes.is_finite() && (0.0..=self.bytes).contains(&level_bytes)) {
            return Err(Error::invalid(
                "bucket_level_bytes",
                format!(
                    "{} is not a level from 0 to the bucket's {} bytes",
                    shown(level_bytes),
                    shown(self.bytes)
                ),
            ));
        }
        self.level = level_bytes;
        Ok(self)
    }
    /// Its size, bytes.
    pub fn bytes(&self) -> f64 {
        self.bytes
    }
    /// The tokens it holds when a simulation starts, bytes.
    pub fn level_bytes(&self) -> f64 {
        self.level
    }
    /// The wire's bandwidth under it, bytes a second.
    pub fn peak_bytes_per_s(&self) -> f64 {
        self.peak
    }
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
    /// [`Error::InvalidParameter`] named `alpha_s` for a negative or
    /// non-finite latency, `bytes_per_s` for a bandwidth that is not finite
    /// and positive or so small that a byte takes longer than any finite
    /// time (below about `5.6e-309`, `1 / f64::MAX`).
    pub fn new(alpha_s: f64, bytes_per_s: f64) -> Result<Self> {
        if !(alpha_s.is_finite() && alpha_s >= 0.0) {
            return Err(Error::invalid(
                "alpha_s",
                format!(
                    "latency {} s: give a finite latency of at least 0 s",
                    shown(alpha_s)
                ),
            ));
        }
        let beta = 1.0 / bytes_per_s;
        if !(bytes_per_s.is_finite() && bytes_per_s > 0.0 && beta.is_finite()) {
            return Err(Error::invalid(
                "bytes_per_s",
                format!(
                    "bandwidth {} B/s: give a finite bandwidth above 0 whose byte takes a \
                     finite time (above about 5.6e-309 B/s)",
                    shown(bytes_per_s)
                ),
            ));
        }
        Ok(Self {
            alpha: alpha_s,
            beta,
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

/// `x` as a person reads it: plainly where that is short, else in
/// scientific notation (`1e-310`, not 310 digits).
pub(super) fn shown(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() <= 12 {
        plain
    } else {
        format!("{x:e}")
    }
}

/// Full bisection: every rank has its own port in each direction, and a
/// message costs `alpha + m beta` (the alpha-beta model of RedSync eq. 1
/// and SparDL's Table 1).
#[derive(Debug, Clone, PartialEq)]
pub struct FullBisection {
    name: String,
    link: AlphaBeta,
    bucket: Option<Bucket>,
}

impl FullBisection {
    /// A full-bisection network named `name` (printed in its label).
    pub fn new(name: impl Into<String>, link: AlphaBeta) -> Self {
        Self {
            name: name.into(),
            link,
            bucket: None,
        }
    }

    /// The same network with `bucket` shaping every rank's port in both
    /// directions (as `scripts/netns-cluster.sh` shapes each veth pair).
    /// A bucket whose peak is not above the link's bandwidth changes
    /// nothing.
    pub fn with_bucket(mut self, bucket: Bucket) -> Self {
        self.bucket = Some(bucket);
        self
    }
}

impl Network for FullBisection {
    fn label(&self) -> String {
        let bucket = self.bucket.map_or(String::new(), |b| {
            let level = if b.level < b.bytes {
                format!(" holding {} B at the start", shown(b.level))
            } else {
                String::new()
            };
            format!(
                ", token bucket {} B at {:.3} GB/s{level}",
                shown(b.bytes),
                b.peak * 1e-9
            )
        });
        format!(
            "{}: full bisection, {}{bucket}",
            self.name,
            self.link.describe()
        )
    }
    fn bucket(&self, _link: Link) -> Option<Bucket> {
        self.bucket
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
/// nodes the node's NIC carries every message of its ranks, sharing its
/// bandwidth among the ones that cross it at the same time.
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
            return Err(Error::invalid(
                "ranks_per_node",
                "0: a node holds at least one rank",
            ));
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
            return Err(Error::invalid(
                "network",
                format!("{name:?} is not one of {}", preset_names()),
            ));
        }
    })
}

/// The largest network file [`read_network`] reads.
pub const MAX_NETWORK_FILE: u64 = 64 * 1024;

/// The keys of a full-bisection network file.
const FULL_BISECTION_KEYS: &[&str] = &[
    "name",
    "model",
    "alpha_s",
    "bytes_per_s",
    "bucket_bytes",
    "peak_bytes_per_s",
    "bucket_level_bytes",
];

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
/// A full-bisection file may add a token bucket in front of every port
/// ([`Bucket`], a `tbf` shaper): `bucket_bytes` and `peak_bytes_per_s`
/// (the wire under the shaper), both or neither, and with them
/// `bucket_level_bytes`, the tokens it holds when a simulation starts
/// ([`Bucket::with_level`]; full without it).
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
    // A constant the model refuses, named as the file names it: the key
    // (the model's parameter, behind the file's prefix) and its line.
    let refused = |prefix: &str, e: Error| match e {
        Error::InvalidParameter { name, reason } => {
            let key = format!("{prefix}{name}");
            match get(&key) {
                Some((_, _, line)) => bad(*line, format!("{key}: {reason}")),
                None => Error::invalid("network file", format!("{key}: {reason}")),
            }
        }
        e => e,
    };
    let link = |prefix: &str| -> Result<AlphaBeta> {
        AlphaBeta::new(
            num(&format!("{prefix}alpha_s"))?,
            num(&format!("{prefix}bytes_per_s"))?,
        )
        .map_err(|e| refused(prefix, e))
    };
    let name = get("name").map_or("file", |(_, v, _)| *v).to_string();
    let (net, keys): (Box<dyn Network>, &[&str]) = match text_of("model")? {
        "full_bisection" => {
            let net = FullBisection::new(name, link("")?);
            let net = match (get("bucket_bytes"), get("peak_bytes_per_s")) {
                (None, None) => net,
                (Some(_), Some(_)) => {
                    let mut b = Bucket::new(num("bucket_bytes")?, num("peak_bytes_per_s")?)
                        .map_err(|e| refused("", e))?;
                    if get("bucket_level_bytes").is_some() {
                        b = b
                            .with_level(num("bucket_level_bytes")?)
                            .map_err(|e| refused("", e))?;
                    }
                    net.with_bucket(b)
                }
                (Some((k, _, line)), None) | (None, Some((k, _, line))) => {
                    let why = "needs its pair: a bucket is bucket_bytes and peak_bytes_per_s";
                    return Err(bad(*line, format!("{k} {why}")));
                }
            };
            if let (Some((k, _, line)), None) = (get("bucket_level_bytes"), get("bucket_bytes")) {
                let why = "needs a bucket: bucket_bytes and peak_bytes_per_s";
                return Err(bad(*line, format!("{k} {why}")));
            }
            (Box::new(net), FULL_BISECTION_KEYS)
        }
        "two_level" => {
            let (_, v, line) = get("ranks_per_node")
                .ok_or_else(|| Error::invalid("network file", "no ranks_per_node"))?;
            let g: usize = v
                .parse()
                .map_err(|_| bad(*line, format!("ranks_per_node = {v:?} is not a count")))?;
            (
                Box::new(
                    TwoLevel::new(name, g, link("intra_")?, link("inter_")?)
                        .map_err(|e| refused("", e))?,
                ),
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

/// Reads the network file at `path` ([`parse_network`]): a regular file
/// (a FIFO, a device or a directory is refused before it is read, so that
/// nothing waits on it).
///
/// # Errors
/// [`Error::InvalidParameter`] named `network file`, its reason naming the
/// path: it is not found, is not a regular file, cannot be read, is longer
/// than [`MAX_NETWORK_FILE`], or does not parse (the line and the key).
pub fn read_network(path: &Path) -> Result<Box<dyn Network>> {
    let text = read_regular(path, MAX_NETWORK_FILE)
        .map_err(|why| Error::invalid("network file", format!("{}: {why}", path.display())))?;
    parse_network(&text).map_err(|e| match e {
        Error::InvalidParameter { name, reason } => Error::InvalidParameter {
            name,
            reason: format!("{}: {reason}", path.display()),
        },
        e => e,
    })
}

/// `O_NONBLOCK`, where this file knows its value: opening a FIFO with it
/// returns at once instead of waiting for a writer (a regular file reads
/// as without it). Elsewhere 0: the check of the path's metadata before
/// the open is then the only guard.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "arm",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
const O_NONBLOCK: i32 = 0x4;
#[cfg(not(any(
    all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "x86",
            target_arch = "x86_64",
            target_arch = "arm",
            target_arch = "aarch64",
            target_arch = "riscv64"
        )
    ),
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd"
)))]
const O_NONBLOCK: i32 = 0;

/// The text of the regular file at `path`, at most `max` bytes: refuses
/// anything else by its metadata before opening it, opens it without
/// blocking, and checks the opened handle again (the path may have
/// changed between).
fn read_regular(path: &Path, max: u64) -> std::result::Result<String, String> {
    use std::io::Read;
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => "file not found".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    };
    let regular = |m: &std::fs::Metadata| {
        if m.is_file() {
            Ok(())
        } else {
            let what = if m.is_dir() {
                "a directory"
            } else {
                "a FIFO, socket or device"
            };
            Err(format!(
                "not a regular file ({what}): give the path of a network file"
            ))
        }
    };
    regular(&std::fs::metadata(path).map_err(io)?)?;
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut open, O_NONBLOCK);
    let file = open.open(path).map_err(io)?;
    regular(&file.metadata().map_err(io)?)?;
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot be read: {}", io(e)))?;
    if text.len() as u64 > max {
        return Err(format!("longer than {max} bytes: is this a network file?"));
    }
    Ok(text)
}

/// The network `spec` names: a preset ([`PRESETS`]) or, where it names
/// none, the path of a network file ([`read_network`]); either followed
/// by `:rendezvous` (every send in rendezvous) or `:rendezvous=BYTES`
/// (sends of at least `BYTES`), which wraps it in [`Rendezvous`], and by
/// `:detached` (eager sends detached), which wraps it in [`Detached`];
/// both may follow, in either order (`nvlink8-25gbe:detached:rendezvous=65536`).
///
/// # Errors
/// [`Error::InvalidParameter`] named `network`: neither a preset nor an
/// existing path (the error lists the presets and says no file was
/// found), or a rendezvous size that is not a count;
/// [`read_network`]'s errors for a path that exists.
pub fn network(spec: &str) -> Result<Box<dyn Network>> {
    if let Some((base, option)) = spec.rsplit_once(':')
        && let Some(rest) = option.strip_prefix("rendezvous")
    {
        let from_bytes = match rest.strip_prefix('=') {
            None if rest.is_empty() => 0,
            Some(n) => n.parse::<usize>().map_err(|_| {
                Error::invalid(
                    "network",
                    format!("{spec:?}: rendezvous={n} is not a size in bytes"),
                )
            })?,
            None => {
                return Err(Error::invalid(
                    "network",
                    format!("{spec:?}: write :rendezvous or :rendezvous=BYTES"),
                ));
            }
        };
        return Ok(Box::new(Rendezvous::new(network(base)?, from_bytes)));
    }
    if let Some(base) = spec.strip_suffix(":detached") {
        return Ok(Box::new(Detached::new(network(base)?)));
    }
    if PRESETS.iter().any(|(n, _)| *n == spec) {
        return preset(spec);
    }
    let path = Path::new(spec);
    if std::fs::symlink_metadata(path).is_ok() {
        return read_network(path);
    }
    Err(Error::invalid(
        "network",
        format!(
            "{spec:?} is not a preset ({}), nor a network file: file not found",
            preset_names()
        ),
    ))
}

/// The presets' names, comma-separated.
fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}
