//! The network models of the simulator: links, routes, the presets and
//! network files.

use sparse_core::{Error, Result};
use std::fmt;

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
