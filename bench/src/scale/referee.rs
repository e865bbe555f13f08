//! `sparse-bench scale --traces DIR` and `--engine simgrid`: each run's
//! traces in SMPI's time-independent format with a SimGrid platform
//! ([`sparse_coll::sim::smpi`]), and SimGrid's replay of them beside the
//! simulator's time.
//!
//! A row's traces are the call's (between its marks, replayed from a
//! common start: [`smpi::between_marks`]); the simulator's time beside
//! SimGrid's is the makespan of the same cut traces, which equals the
//! table's `sim_ms` for a cold call without computation.

use sparse_coll::sim::smpi::{self, Platform, SmpiModel};
use sparse_coll::sim::{Network, Trace, replay};
use sparse_core::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which engine times the calls.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// `sparse_coll::sim` alone.
    #[default]
    Sim,
    /// `sparse_coll::sim` and SimGrid's SMPI replay of the same traces
    /// (`smpirun`, Debian's `libsimgrid-dev`).
    Simgrid,
}

/// The SimGrid flags of `sparse-bench scale`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SimgridArgs {
    /// Which engine times the calls: `sim` (`sparse_coll::sim`) or
    /// `simgrid` (also SimGrid's replay of the same traces, beside it;
    /// needs `smpirun`: `apt-get install libsimgrid-dev`).
    #[arg(long, value_enum, default_value_t = Engine::Sim)]
    pub engine: Engine,
    /// Write each run's traces in SMPI's time-independent format (one
    /// file per rank, the index), the SimGrid platform equivalent to
    /// `--network` and its hostfile, into `DIR/<algorithm>_P<ranks>/`;
    /// `scripts/simgrid-replay.sh DIR` replays them.
    #[arg(long, value_name = "DIR")]
    pub traces: Option<PathBuf>,
    /// SMPI's point-to-point models, comma-separated: `alpha-beta` (the
    /// simulator's network, sends in rendezvous), `alpha-beta-eager` (the
    /// same network, sends detached and eager) and `default` (SMPI's
    /// defaults); see `sparse_coll::sim::smpi::SmpiModel`. Default:
    /// alpha-beta.
    #[arg(long, value_delimiter = ',')]
    pub smpi_model: Vec<String>,
    /// SimGrid platforms, comma-separated: `same` (the equivalent of
    /// `--network`), `fat-tree-4to1` and `fat-tree-1to1` (racks of 16
    /// ranks, 4:1 or no oversubscription to the spines), `dragonfly`
    /// (balanced, 64 ranks per group); the last three use the links of a
    /// full-bisection `--network`. Default: same.
    #[arg(long, value_delimiter = ',')]
    pub topology: Vec<String>,
    /// Kill a replay still running after this many seconds (it is then
    /// reported as failed).
    #[arg(long, default_value_t = 600)]
    pub simgrid_timeout_s: u64,
}

/// Ranks per rack of the fat trees.
pub const RACK: usize = 16;

/// A SimGrid platform of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// The equivalent of the simulator's network.
    Same,
    /// A fat tree of racks of [`RACK`] ranks.
    FatTree {
        /// 4 for 4:1.
        oversubscription: usize,
    },
    /// A balanced dragonfly.
    Dragonfly,
}

impl Topology {
    /// The topology named `name`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `topology` for another name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "same" => Ok(Topology::Same),
            "fat-tree-4to1" => Ok(Topology::FatTree {
                oversubscription: 4,
            }),
            "fat-tree-1to1" => Ok(Topology::FatTree {
                oversubscription: 1,
            }),
            "dragonfly" => Ok(Topology::Dragonfly),
            _ => Err(Error::invalid(
                "topology",
                format!("{name:?} is not same, fat-tree-4to1, fat-tree-1to1 or dragonfly"),
            )),
        }
    }
    /// Its name.
    pub fn name(self) -> String {
        match self {
            Topology::Same => smpi::SAME.into(),
            Topology::FatTree { oversubscription } => format!("fat-tree-{oversubscription}to1"),
            Topology::Dragonfly => "dragonfly".into(),
        }
    }
    /// Its platform, given the network's equivalent `same`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `topology` for a fat tree or
    /// dragonfly over a network that is not full bisection.
    pub fn platform(self, same: &Platform) -> Result<Platform> {
        let link = match (self, same) {
            (Topology::Same, _) => return Ok(same.clone()),
            (_, Platform::Cluster { link }) => *link,
            _ => {
                return Err(Error::invalid(
                    "topology",
                    format!(
                        "{} takes its links from a full-bisection --network (25gbe, say), not \
                         from {}",
                        self.name(),
                        same.describe()
                    ),
                ));
            }
        };
        Ok(match self {
            Topology::FatTree { oversubscription } => Platform::FatTree {
                link,
                rack: RACK,
                oversubscription,
            },
            _ => Platform::Dragonfly { link },
        })
    }
    /// Its platform file and hostfile in a trace directory.
    fn files(self) -> (String, String) {
        match self {
            Topology::Same => (smpi::PLATFORM_FILE.into(), smpi::HOSTFILE.into()),
            t => (
                format!("platform-{}.xml", t.name()),
                format!("hostfile-{}.txt", t.name()),
            ),
        }
    }
}

/// The checked SimGrid settings of a run.
#[derive(Debug, Clone)]
pub struct Referee {
    /// Whether SimGrid replays (else the traces are only written).
    pub replay: bool,
    /// Where the traces go (else a directory of the system's temporary
    /// one, removed after each replay).
    pub traces: Option<PathBuf>,
    /// The models to replay with.
    pub models: Vec<SmpiModel>,
    /// The platforms.
    pub topologies: Vec<Topology>,
    /// The replay's time limit.
    pub timeout: Duration,
}

impl Referee {
    /// The settings of `a`, or `None` where neither `--traces` nor
    /// `--engine simgrid` is given.
    ///
    /// # Errors
    /// An unknown model or topology; [`Error::Unsupported`] naming
    /// `libsimgrid-dev` for `--engine simgrid` where `smpirun` is not
    /// installed (before anything runs).
    pub fn of(a: &SimgridArgs) -> Result<Option<Self>> {
        let replay = a.engine == Engine::Simgrid;
        if !replay && a.traces.is_none() {
            return Ok(None);
        }
        if replay {
            smpi::smpirun()?;
        }
        let mut models = a
            .smpi_model
            .iter()
            .map(|m| SmpiModel::parse(m))
            .collect::<Result<Vec<_>>>()?;
        if models.is_empty() {
            models.push(SmpiModel::AlphaBeta);
        }
        let mut topologies = a
            .topology
            .iter()
            .map(|t| Topology::parse(t))
            .collect::<Result<Vec<_>>>()?;
        if topologies.is_empty() {
            topologies.push(Topology::Same);
        }
        Ok(Some(Self {
            replay,
            traces: a.traces.clone(),
            models,
            topologies,
            timeout: Duration::from_secs(a.simgrid_timeout_s),
        }))
    }
}

/// SimGrid's time of one call on one platform under one model.
#[derive(Debug, Clone)]
pub struct RefereeRow {
    /// Ranks.
    pub ranks: usize,
    /// The algorithm's registry spec.
    pub algo: String,
    /// The platform's name ([`Topology::name`]).
    pub topology: String,
    /// The platform ([`Platform::describe`]).
    pub platform: String,
    /// The model's name ([`SmpiModel::name`]).
    pub model: String,
    /// The simulator's time of the same traces (the makespan of the cut
    /// call), seconds: on `same` only.
    pub sim_s: Option<f64>,
    /// The simulator's time of the same traces with its sends as this
    /// model sends them, on the platform's network
    /// ([`SmpiModel::simulator`]: in rendezvous for `alpha-beta`,
    /// detached for `alpha-beta-eager`), seconds: on `same` only, and
    /// not for `default`.
    pub matched_s: Option<f64>,
    /// How those sends go ([`SmpiModel::sends`]).
    pub matched_sends: Option<&'static str>,
    /// SimGrid's simulated time, seconds, or why there is none (a
    /// deadlock under rendezvous sends, a timeout).
    pub simgrid_s: std::result::Result<f64, String>,
    /// Wall time of the replay on this machine.
    pub wall: Duration,
}

impl RefereeRow {
    /// The simulator's time over SimGrid's, minus 1 (where both exist).
    pub fn error(&self) -> Option<f64> {
        relative(self.sim_s, &self.simgrid_s)
    }
    /// The simulator's time with the model's sends ([`Self::matched_s`])
    /// over SimGrid's, minus 1 (where both exist).
    pub fn matched_error(&self) -> Option<f64> {
        relative(self.matched_s, &self.simgrid_s)
    }
}

fn relative(sim: Option<f64>, sg: &std::result::Result<f64, String>) -> Option<f64> {
    match (sg, sim) {
        (Ok(sg), Some(sim)) if sim > 0.0 && *sg > 0.0 => Some(sim / sg - 1.0),
        _ => None,
    }
}

/// A directory name for `algo`'s registry spec at `p` ranks: letters,
/// digits, `-` and `_` kept, every other byte `-`.
pub fn dir_name(algo: &str, p: usize) -> String {
    let clean: String = algo
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{clean}_P{p}")
}

/// Writes the call's traces of `algo` at `traces.len()` ranks (with every
/// platform of `r`) and, where `r` replays, replays them under every
/// model on every platform.
///
/// # Errors
/// The traces do not cut at the marks; the network has no SimGrid
/// equivalent; a file cannot be written. A replay that fails is a row
/// with its error, not an error.
pub fn judge(
    r: &Referee,
    algo: &str,
    traces: &[Trace],
    net: &dyn Network,
) -> Result<Vec<RefereeRow>> {
    let p = traces.len();
    let call = smpi::between_marks(traces, 0)?;
    let sim_s = replay(&call, net)?.makespan();
    let same = Platform::of(net, p)?;
    let dir = match &r.traces {
        Some(d) => d.join(dir_name(algo, p)),
        None => std::env::temp_dir().join(format!(
            "sparse-bench-simgrid-{}-{}",
            std::process::id(),
            dir_name(algo, p)
        )),
    };
    let label = net.label();
    smpi::write_dir(&dir, &call, &same, &label)?;
    // The replays of both models on every platform asked, listed in the
    // directory's args file (write_dir has listed those on `same`).
    let mut args_file = std::fs::read_to_string(dir.join(smpi::ARGS_FILE))
        .map_err(|e| Error::invalid("trace directory", format!("{}: {e}", dir.display())))?;
    let mut runs = Vec::new();
    for &t in &r.topologies {
        let platform = t.platform(&same)?;
        let (xml, hosts) = t.files();
        if t != Topology::Same {
            write(&dir, &xml, &platform.xml(p, &label)?)?;
            write(&dir, &hosts, &platform.hostfile(p))?;
            for m in SmpiModel::ALL {
                args_file += &smpi::args_line(p, m, &t.name(), &xml, &hosts);
            }
        }
        for &m in &r.models {
            let args = smpi::replay_args_on(p, m, &xml, &hosts);
            runs.push((t, platform.describe(), m, args));
        }
    }
    write(&dir, smpi::ARGS_FILE, &args_file)?;
    write(
        &dir,
        "meta.txt",
        &format!("algo = {algo}\nranks = {p}\nnetwork = {label}\nsim_s = {sim_s:e}\n"),
    )?;
    let mut rows = Vec::new();
    if r.replay {
        for (t, platform, m, args) in runs {
            // The simulator with SMPI's sends, on SimGrid's platform.
            let matched_s = match (t, m.simulator(same.network("platform")?)) {
                (Topology::Same, Some(like)) => Some(replay(&call, &*like)?.makespan()),
                _ => None,
            };
            let start = Instant::now();
            let simgrid_s =
                smpi::replay_dir_with(&dir, &args, r.timeout).map_err(|e| e.to_string());
            rows.push(RefereeRow {
                ranks: p,
                algo: algo.to_string(),
                topology: t.name(),
                platform,
                model: m.name().into(),
                sim_s: (t == Topology::Same).then_some(sim_s),
                matched_s,
                matched_sends: matched_s.and(m.sends()),
                simgrid_s,
                wall: start.elapsed(),
            });
        }
    }
    if r.traces.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(rows)
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text)
        .map_err(|e| Error::invalid("trace directory", format!("{}: {e}", path.display())))
}

/// The referee's table: a row per algorithm and rank count, the
/// simulator's time and then SimGrid's per model and platform (with the
/// simulator's error against it on `same`, and that of the simulator
/// with the model's sends, `sim_rendezvous_vs_alpha-beta` and
/// `sim_detached_vs_alpha-beta-eager`).
pub fn table(rows: &[RefereeRow]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut variants: Vec<(String, String, Option<&'static str>)> = Vec::new();
    for row in rows {
        let v = (row.model.clone(), row.topology.clone(), row.matched_sends);
        if !variants.iter().any(|w| w.0 == v.0 && w.1 == v.1) {
            variants.push(v);
        }
    }
    let mut header = vec!["algorithm".to_string(), "P".into(), "sim_ms".into()];
    for (m, t, sends) in &variants {
        header.push(format!("simgrid_{m}_{t}_ms"));
        if t == "same" {
            header.push(format!("sim_vs_{m}"));
            if let Some(s) = sends {
                header.push(format!("sim_{s}_vs_{m}"));
            }
        }
    }
    let mut keys: Vec<(usize, String)> = Vec::new();
    for row in rows {
        let k = (row.ranks, row.algo.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let body = keys
        .iter()
        .map(|(p, algo)| {
            let mine: Vec<&RefereeRow> = rows
                .iter()
                .filter(|r| r.ranks == *p && &r.algo == algo)
                .collect();
            let sim = mine.iter().find_map(|r| r.sim_s);
            let mut line = vec![
                algo.clone(),
                p.to_string(),
                sim.map_or_else(|| "-".into(), |s| format!("{:.3}", s * 1e3)),
            ];
            let percent =
                |e: Option<f64>| e.map_or_else(|| "-".into(), |e| format!("{:+.1}%", 100.0 * e));
            for (m, t, sends) in &variants {
                let cell = mine.iter().find(|r| &r.model == m && &r.topology == t);
                line.push(match cell.map(|c| &c.simgrid_s) {
                    Some(Ok(s)) => format!("{:.3}", s * 1e3),
                    Some(Err(_)) => "failed".into(),
                    None => "-".into(),
                });
                if t == "same" {
                    line.push(percent(cell.and_then(|c| c.error())));
                    if sends.is_some() {
                        line.push(percent(cell.and_then(|c| c.matched_error())));
                    }
                }
            }
            line
        })
        .collect();
    (header, body)
}

/// One JSON object per referee row.
pub fn json(network: &str, rows: &[RefereeRow]) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|r| {
            serde_json::json!({
                "kind": "simgrid",
                "network": network,
                "algo": r.algo,
                "ranks": r.ranks,
                "topology": r.topology,
                "platform": r.platform,
                "smpi_model": r.model,
                "sim_ms": r.sim_s.map(|s| s * 1e3),
                "simgrid_ms": r.simgrid_s.as_ref().ok().map(|s| s * 1e3),
                "simgrid_error": r.simgrid_s.as_ref().err(),
                "sim_vs_simgrid": r.error(),
                "sim_matched_sends": r.matched_sends,
                "sim_matched_ms": r.matched_s.map(|s| s * 1e3),
                "sim_matched_vs_simgrid": r.matched_error(),
                "wall_s": r.wall.as_secs_f64(),
            })
        })
        .collect()
}

/// The notes under the referee's table: what its columns compare, and
/// where the simulator's own sends differ from SMPI's (the limit of
/// `sim_vs_<model>`).
pub fn notes(rows: &[RefereeRow]) -> Vec<String> {
    let has = |m: SmpiModel| rows.iter().any(|r| r.model == m.name());
    let mut out = Vec::new();
    if rows.iter().any(|r| r.matched_s.is_some()) {
        out.push(
            "sim_vs_<model>: the simulator with --network's sends; sim_rendezvous_vs_alpha-beta and \
             sim_detached_vs_alpha-beta-eager: the simulator on SimGrid's platform with the \
             model's sends (--network NET:rendezvous, NET:detached), like for like."
                .into(),
        );
    }
    if has(SmpiModel::AlphaBetaEager) {
        out.push(
            "alpha-beta-eager's sends are detached: a rank whose receive is done runs ahead \
             with its send still moving, its next sends sharing its link with it. Without \
             :detached the simulator's eager send returns when its last byte has left, one \
             message of a rank moving at a time, and that is the limit of its times: where \
             ranks would run ahead over a shared link, detached sends take up to 3x longer \
             (omnireduce_blocks on nvlink8-25gbe at overlap 0.9, P = 512: 32.7 ms, 92.2 ms \
             detached, SMPI 88.1 ms), and detached \
             times there move by up to 20% with a few bytes per message in either engine \
             (docs/sparse-bench.md, \"Detached sends\")."
                .into(),
        );
    }
    if has(SmpiModel::AlphaBeta) {
        out.push(
            "alpha-beta's sends are in rendezvous: a send across a slower link than its \
             receive waits for that link's latency, which the simulator's eager send does not."
                .into(),
        );
    }
    out
}
