//! `sparse-bench scale`: every sparse allreduce at up to a thousand ranks
//! on a simulated network ([`sparse_coll::sim`]). Each rank is a thread
//! that runs the real code; the replay of their traces over the network
//! model gives the simulated time of a call. Every time this module prints
//! is simulated and says so, with the network's label.

use sparse_coll::sim::{self, Compute, Network, SimCluster, Trace};
use sparse_coll::{
    Auto, Defaults, Profile, Promises, Registered, Registry, SimTransport, SparseAllreduce,
    Traffic, Transport,
};
use sparse_core::generate::{GradientPool, GradientSpec, ValueDist};
use sparse_core::{Error, Result, SparseVec};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub mod figure;
pub mod referee;

/// The flags of `sparse-bench scale`.
#[derive(clap::Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Rank counts, comma-separated (default 2, 4, ..., 1024).
    #[arg(long, value_delimiter = ',', default_values_t = default_ranks())]
    pub ranks: Vec<usize>,
    /// Network model: a preset (`1gbe`, `10gbe`, `25gbe`, `ib100`,
    /// `nvlink8-25gbe`, `nvlink8-ib100`) or the path of a network file
    /// (`sparse-bench calibrate` writes one).
    #[arg(long, default_value = "25gbe")]
    pub network: String,
    /// Dimension of the gradient.
    #[arg(long, default_value_t = 1 << 20)]
    pub n: usize,
    /// Non-zeros per rank as a fraction of `n`; also the lossy
    /// algorithms' budget.
    #[arg(long, default_value_t = 0.001)]
    pub density: f64,
    /// Overlap ratio of the ranks' index sets (Zen Def. 3): the fraction of
    /// each rank's indices that every rank holds.
    #[arg(long, default_value_t = 0.5)]
    pub overlap: f64,
    /// Only these algorithms (registry specs; one per flag, repeat for
    /// more). Every registered one but the planner when absent.
    #[arg(long = "algo")]
    pub algos: Vec<String>,
    /// Seed of the synthetic gradients.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Refuse, before running anything, a run whose estimated memory
    /// exceeds this many GiB (the estimate is printed). Default: 3/4 of
    /// the memory available now (`MemAvailable` in `/proc/meminfo`; 8 GiB
    /// where that cannot be read, said in the header), so that a sweep
    /// cannot drive the machine into the OOM killer.
    #[arg(long)]
    pub mem_cap_gib: Option<f64>,
    /// Write the plot of simulated time against ranks (log-log) here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Count local computation too: each rank's thread CPU time between
    /// its communication calls, times this factor (1: this machine's
    /// speed). Off when absent: communication only, and the times are then
    /// a deterministic function of the inputs.
    #[arg(long)]
    pub compute_factor: Option<f64>,
    /// Time the second call of each algorithm, as `sparse-bench allreduce`
    /// times warm calls (stateful algorithms such as Ok-Topk reuse their
    /// thresholds; buffers are allocated): the first call is made and not
    /// timed.
    #[arg(long)]
    pub warm: bool,
    /// Simulated idle milliseconds on every rank before the timed call, as
    /// `sparse-bench allreduce --gap-ms` pauses before each of its timed
    /// calls: a link's token bucket refills meanwhile. 0 (none) by default.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub gap_ms: f64,
    /// Timed calls per algorithm, one after the other on the same links
    /// (a token bucket keeps what the previous call left); the row is the
    /// median over them of the slowest rank's time, as `sparse-bench
    /// allreduce` reports its `--reps`. SimGrid's referee (`--traces`,
    /// `--engine simgrid`) replays the first of them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub reps: u64,
    /// Replay `sparse-bench allreduce --transport mpi`'s loop around each
    /// timed call too: a barrier before it (dissemination, zero-byte
    /// messages) and its two floors after it (an allgather of the bytes
    /// the call received, and one of the input's pairs; recursive doubling
    /// for a power of two of ranks, Bruck's otherwise, as MPICH chooses for
    /// short messages). On a shaped link they drain the bucket that the
    /// next call starts from.
    #[arg(long)]
    pub floors: bool,
    /// SimGrid as the referee: `--traces`, `--engine simgrid` and their
    /// settings ([`referee`]).
    #[command(flatten)]
    pub simgrid: referee::SimgridArgs,
}

fn default_ranks() -> Vec<usize> {
    (1..=10).map(|i| 1usize << i).collect()
}

/// One algorithm at one rank count.
#[derive(Debug, Clone)]
pub struct ScaleRow {
    /// Ranks.
    pub ranks: usize,
    /// The algorithm's registry spec.
    pub algo: String,
    /// Simulated time of the call: the slowest rank's, seconds.
    pub sim_s: f64,
    /// Traffic of the busiest rank (most bytes received), entry round
    /// included.
    pub busiest: Traffic,
    /// The most bytes any rank received in the call itself, the entry
    /// agreement left out: what the cost model predicts.
    pub call_bytes_max: u64,
    /// Most rounds of any rank.
    pub rounds_max: u64,
    /// Messages and bytes summed over ranks.
    pub total: Traffic,
    /// Whether the algorithm's result is the exact sum.
    pub lossless: bool,
    /// The cost model's prediction of the busiest rank's bytes received.
    pub model_bytes: f64,
    /// The cost model's rounds.
    pub model_rounds: f64,
    /// Entries of rank 0's result.
    pub result_nnz: usize,
    /// The memory estimate of the run, bytes.
    pub mem_estimate: u64,
    /// Peak resident memory of the process during the run, bytes, where
    /// the platform reports it.
    pub peak_rss: Option<u64>,
    /// Wall time of the run on this machine.
    pub wall: Duration,
}

/// The planner's choice at one rank count.
#[derive(Debug, Clone)]
pub struct PlannerRow {
    /// Ranks.
    pub ranks: usize,
    /// The algorithm the planner picks for this input's exact profile,
    /// with the network's latency and time per byte.
    pub choice: String,
    /// The fastest of the planner's candidates in the simulation.
    pub best: String,
    /// The choice's simulated time over the best candidate's (1: no
    /// regret); `None` where the choice was not run.
    pub regret: Option<f64>,
}

/// A whole `scale` run.
#[derive(Debug, Clone)]
pub struct ScaleReport {
    /// The network's label.
    pub network: String,
    /// The memory cap the run was checked against.
    pub mem_cap: MemCap,
    /// One row per rank count and algorithm.
    pub rows: Vec<ScaleRow>,
    /// One per rank count.
    pub planner: Vec<PlannerRow>,
    /// SimGrid's times (`--engine simgrid`): one per algorithm, rank
    /// count, model and platform.
    pub referee: Vec<referee::RefereeRow>,
}

/// The synthetic gradients of a run: normal values, the overlap asked.
fn spec(a: &ScaleArgs) -> GradientSpec {
    GradientSpec {
        overlap: a.overlap,
        values: ValueDist::Normal { std: 1.0 },
        ..GradientSpec::new(a.n, a.density, a.seed)
    }
}

/// The exact profile of the pool's inputs (every rank holds the same
/// number of entries).
pub fn profile_of(pool: &GradientPool, n: usize) -> Profile {
    profile_for(pool.ranks(), n, pool.shared(), pool.private())
}

/// The profile of `p` ranks each holding `shared` common and `private`
/// own entries of dimension `n` ([`GradientSpec::split`]).
fn profile_for(p: usize, n: usize, shared: usize, private: usize) -> Profile {
    let k = shared + private;
    Profile {
        p,
        n,
        value_bytes: 4,
        k_max: k,
        k_sum: k * p,
        union: shared + p * private,
    }
}

/// The algorithms of a run: `a.algos`, or every registered one but the
/// planner.
fn selection(a: &ScaleArgs) -> Vec<String> {
    if a.algos.is_empty() {
        Registry::<f32>::builtin()
            .names()
            .into_iter()
            .filter(|n| *n != <Auto<f32> as Registered<f32>>::NAME)
            .map(String::from)
            .collect()
    } else {
        a.algos.clone()
    }
}

/// Per-thread memory the estimate adds to each rank: its stack's touched
/// pages, its transport, the allocator's per-thread caches (measured: 1
/// GiB for the O(k) algorithms at P = 1,024).
pub const PER_RANK: f64 = 1024.0 * 1024.0;

/// The margin over the working set: the most any algorithm's measured peak
/// exceeded it at P = 1,024, n = 2^20 (measured 2026-11-24) was 23%.
pub const MARGIN: f64 = 1.25;

/// The memory a run of `algo` on `prof` is estimated to need, bytes: every
/// rank holds its input, the bytes the cost model says it receives and
/// its result (the union of the index sets, or the bound it promises on
/// its result, [`Promises::max_result_entries`]), plus the index pool, with a margin of
/// [`MARGIN`], and [`PER_RANK`] per thread. The table prints the measured
/// peak beside it.
pub fn memory_estimate(
    algo: &dyn SparseAllreduce<f32>,
    promises: Option<&dyn Promises<f32>>,
    prof: &Profile,
) -> u64 {
    let p = prof.p as f64;
    let recv = algo.cost(prof).bytes();
    // A lossy algorithm's result is bounded by its budget.
    let entries = prof.union.min(prof.n);
    let entries = promises
        .and_then(|pr| pr.max_result_entries(prof.n))
        .map_or(entries, |m| m.min(entries));
    let result = 8.0 * entries as f64;
    let input = 8.0 * prof.k_max as f64;
    let pool = 4.0 * prof.union as f64;
    (MARGIN * (pool + p * (input + recv + result)) + p * PER_RANK) as u64
}

/// The process's peak resident memory since the last
/// [`reset_peak_rss`], where Linux reports it.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Resets the peak resident memory Linux reports (`clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

const GIB: f64 = (1u64 << 30) as f64;

/// The share of the available memory the default cap allows.
pub const MEM_CAP_SHARE: f64 = 0.75;

/// The cap where the available memory cannot be read, GiB: half of a
/// 16 GB laptop's memory.
pub const MEM_CAP_FALLBACK_GIB: f64 = 8.0;

/// The memory cap of a run and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct MemCap {
    /// The cap, GiB.
    pub gib: f64,
    /// Where it comes from (`--mem-cap-gib`, or the share of
    /// `MemAvailable`, or the fallback and why).
    pub from: String,
}

/// `MemAvailable` of the text of `/proc/meminfo`, bytes (`None` where the
/// line is absent or not `<number> kB`).
pub fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let mut words = line.split_whitespace();
    let kb: u64 = words.next()?.parse().ok()?;
    match (words.next(), words.next()) {
        (Some("kB"), None) => kb.checked_mul(1024),
        _ => None,
    }
}

/// The cap of a run: `flag` (`--mem-cap-gib`) where given, else
/// [`MEM_CAP_SHARE`] of `MemAvailable` in `meminfo` (the text of
/// `/proc/meminfo`, or the error reading it), else
/// [`MEM_CAP_FALLBACK_GIB`], saying why.
///
/// # Errors
/// [`Error::InvalidParameter`] for a flag that is not a positive finite
/// number.
pub fn mem_cap(flag: Option<f64>, meminfo: std::io::Result<String>) -> Result<MemCap> {
    if let Some(gib) = flag {
        if !(gib.is_finite() && gib > 0.0) {
            return Err(Error::invalid(
                "--mem-cap-gib",
                format!("{gib} is not a positive number of GiB"),
            ));
        }
        return Ok(MemCap {
            gib,
            from: "--mem-cap-gib".into(),
        });
    }
    let why = match meminfo.as_ref().map(|t| mem_available(t)) {
        Ok(Some(bytes)) => {
            let avail = bytes as f64 / GIB;
            return Ok(MemCap {
                gib: MEM_CAP_SHARE * avail,
                from: format!(
                    "3/4 of the {avail:.1} GiB available (MemAvailable in /proc/meminfo); --mem-cap-gib sets another"
                ),
            });
        }
        Ok(None) => "/proc/meminfo has no MemAvailable line in kB".to_string(),
        Err(e) => format!("/proc/meminfo cannot be read ({e})"),
    };
    Ok(MemCap {
        gib: MEM_CAP_FALLBACK_GIB,
        from: format!(
            "{why}: a fallback of {MEM_CAP_FALLBACK_GIB} GiB; set --mem-cap-gib to what this machine can spare"
        ),
    })
}

/// Refuses the run up front when any of its calls is estimated above the
/// cap, listing each with its estimate.
fn check_memory(
    a: &ScaleArgs,
    cap: &MemCap,
    registry: &Registry<f32>,
    algos: &[String],
) -> Result<()> {
    let spec = spec(a);
    let mut over = Vec::new();
    for &p in &a.ranks {
        // The profile follows from the spec; the pool is not drawn here.
        let (shared, private) = spec.split(p)?;
        let prof = profile_for(p, a.n, shared, private);
        let nnz = prof.k_max;
        for spec in algos {
            let defaults = Defaults::k(nnz.max(1))?;
            let algo = registry.build(spec, defaults)?;
            let promises = registry.promises(spec, defaults)?;
            let est = memory_estimate(&*algo, promises.as_deref(), &prof);
            if est as f64 > cap.gib * GIB {
                over.push(format!("{spec} at P = {p}: {:.1} GiB", est as f64 / GIB));
            }
        }
    }
    if over.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(
            "mem-cap-gib",
            format!(
                "the run is estimated above the cap of {:.1} GiB ({}), so nothing was run: {}; raise --mem-cap-gib, lower --n or drop those --algo/--ranks",
                cap.gib,
                cap.from,
                over.join("; ")
            ),
        ))
    }
}

/// What one rank returns of a call.
#[derive(Debug, Clone, Copy)]
struct RankOut {
    traffic: Traffic,
    call: Traffic,
    nnz: usize,
}

/// Runs `spec` on `pool`'s inputs over a simulated cluster and replays it
/// over `net`. Each rank draws its own input inside its thread and keeps
/// only its traffic and result size once the call is done.
///
/// # Errors
/// The first rank's error; a replay error.
pub fn run_one(
    spec: &str,
    pool: &GradientPool,
    n: usize,
    net: &dyn Network,
) -> Result<(ScaleRow, Vec<Traffic>)> {
    run_one_with(spec, pool, n, net, Compute::Off, false)
}

/// How [`run_one_traced`] times a call: what runs before and around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// A first call, not timed.
    pub warm: bool,
    /// Simulated idle seconds on every rank before each timed call.
    pub gap: f64,
    /// Timed calls (at least one); the row's time is the median of their
    /// slowest rank's times.
    pub reps: usize,
    /// `sparse-bench allreduce --transport mpi`'s barrier before each timed
    /// call and its floors after it (`--floors`).
    pub floors: bool,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            warm: false,
            gap: 0.0,
            reps: 1,
            floors: false,
        }
    }
}

/// A dissemination barrier of zero-byte exchanges (`ceil(lg P)` rounds),
/// as MPICH's `MPI_Barrier`.
fn barrier(t: &mut SimTransport) -> Result<()> {
    let (p, r) = (t.size(), t.rank());
    let mut d = 1;
    while d < p {
        t.exchange((r + d) % p, &[], (r + p - d) % p)?;
        d *= 2;
    }
    Ok(())
}

/// `sparse-bench allreduce`'s floors after a call that received `recv`
/// bytes on this rank: an allgather of `recv / (P - 1)` bytes per rank,
/// then one of `pairs` bytes per rank, each after a barrier (as
/// `MpiHooks::floor` times them); recursive doubling for a power of two,
/// Bruck's otherwise (MPICH's choices for short messages).
fn floors(t: &mut SimTransport, recv: u64, pairs: usize) -> Result<()> {
    let p = t.size();
    if p < 2 {
        return Ok(());
    }
    let share = usize::try_from(recv.div_ceil(p as u64 - 1)).unwrap_or(usize::MAX);
    for bytes in [share, pairs] {
        let block = vec![0u8; bytes];
        barrier(t)?;
        if p.is_power_of_two() {
            sparse_coll::dense::recursive_doubling_allgather(t, &block)?;
        } else {
            sparse_coll::dense::bruck_allgather(t, &block)?;
        }
    }
    Ok(())
}

/// [`run_one`] with local computation counted as `compute` says and, where
/// `warm`, a first call made before the timed one.
///
/// # Errors
/// As [`run_one`].
pub fn run_one_with(
    spec: &str,
    pool: &GradientPool,
    n: usize,
    net: &dyn Network,
    compute: Compute,
    warm: bool,
) -> Result<(ScaleRow, Vec<Traffic>)> {
    let timing = Timing {
        warm,
        ..Timing::default()
    };
    run_one_traced(spec, pool, n, net, compute, timing, false)
        .map(|(row, traffic, _)| (row, traffic))
}

/// [`run_one`] timed as `timing` says (idle time before each timed call by
/// [`SimTransport::idle`], the row's time the median over the timed calls),
/// also returning the ranks' traces where `keep`.
///
/// # Errors
/// As [`run_one`]; a negative or non-finite `timing.gap`.
pub fn run_one_traced(
    spec: &str,
    pool: &GradientPool,
    n: usize,
    net: &dyn Network,
    compute: Compute,
    timing: Timing,
    keep: bool,
) -> Result<(ScaleRow, Vec<Traffic>, Option<Vec<Trace>>)> {
    let p = pool.ranks();
    let registry = Registry::<f32>::builtin();
    let k = (pool.shared() + pool.private()).max(1);
    let defaults = Defaults::k(k)?;
    let prof = profile_of(pool, n);
    let model = registry.build(spec, defaults)?;
    let cost = model.cost(&prof);
    let lossless = model.lossless();
    let promises = registry.promises(spec, defaults)?;
    let mem_estimate = memory_estimate(&*model, promises.as_deref(), &prof);
    drop(model);
    // The pairs' floor: 8 bytes (index and value) per entry of the
    // largest input, as `MpiHooks` pads it.
    let pair_bytes = 8 * prof.k_max;
    reset_peak_rss();
    let start = Instant::now();
    let run = SimCluster::new(p)?.compute(compute).run(|t| {
        let v: SparseVec<f32> = pool.rank(t.rank())?;
        let mut algo = registry.build(spec, defaults)?;
        if timing.warm {
            algo.allreduce(t, &v)?;
        }
        // One timed call, between its marks, with what surrounds it.
        let mut timed = |t: &mut SimTransport| -> Result<RankOut> {
            t.idle(timing.gap)?;
            if timing.floors {
                barrier(t)?;
            }
            t.mark();
            let red = algo.allreduce(t, &v)?;
            t.mark();
            if timing.floors {
                floors(t, red.traffic.bytes_recv, pair_bytes)?;
            }
            Ok(RankOut {
                traffic: red.total(),
                call: red.traffic,
                nnz: red.result.nnz(),
            })
        };
        let mut out = timed(t)?;
        for _ in 1..timing.reps {
            out = timed(t)?;
        }
        Ok(out)
    })?;
    let wall = start.elapsed();
    let peak_rss = peak_rss();
    let mut outs = Vec::with_capacity(p);
    for r in run.results.iter() {
        match r {
            Ok(o) => outs.push(*o),
            Err(e) => return Err(e.clone()),
        }
    }
    let timeline = run.timeline(net)?;
    let mut spans: Vec<f64> = (0..timing.reps.max(1))
        .filter_map(|i| timeline.span(2 * i))
        .collect();
    spans.sort_by(f64::total_cmp);
    let sim_s = spans.get(spans.len() / 2).copied().unwrap_or(0.0);
    let traces = keep.then_some(run.traces);
    let traffic: Vec<Traffic> = outs.iter().map(|o| o.traffic).collect();
    let busiest = *traffic
        .iter()
        .max_by_key(|t| (t.bytes_recv, t.rounds))
        .unwrap_or(&Traffic::default());
    let total = traffic.iter().fold(Traffic::default(), |a, t| a.plus(t));
    let call_bytes_max = outs.iter().map(|o| o.call.bytes_recv).max().unwrap_or(0);
    Ok((
        ScaleRow {
            ranks: p,
            algo: spec.to_string(),
            sim_s,
            busiest,
            call_bytes_max,
            rounds_max: traffic.iter().map(|t| t.rounds).max().unwrap_or(0),
            total,
            lossless,
            model_bytes: cost.bytes(),
            model_rounds: cost.rounds,
            result_nnz: outs.first().map_or(0, |o| o.nnz),
            mem_estimate,
            peak_rss,
            wall,
        },
        traffic,
        traces,
    ))
}

/// The network's latency and time per 32-bit word between the first and
/// the last rank (across nodes on a two-level network), what the planner
/// is told.
fn planner_constants(net: &dyn Network, p: usize) -> (f64, f64) {
    let route = net.route(0, p.saturating_sub(1));
    (route.alpha, 4.0 * route.beta)
}

/// The planner's pick for `prof` on `net`.
fn planner_choice(registry: &Registry<f32>, net: &dyn Network, prof: &Profile) -> Result<String> {
    let (alpha, beta) = planner_constants(net, prof.p);
    let names = registry.auto_candidates();
    let candidates = names
        .iter()
        .map(|name| registry.build(name, Defaults::lossless()))
        .collect::<Result<Vec<_>>>()?;
    let auto = Auto::new(alpha, beta, candidates)?;
    Ok(names[auto.choose(prof)].to_string())
}

/// Runs the whole sweep, reporting progress on stderr.
///
/// # Errors
/// Bad flags, a run over the memory cap (refused before anything runs),
/// an algorithm's error.
pub fn run(a: &ScaleArgs) -> Result<ScaleReport> {
    run_with(a, |_| {})
}

/// [`run`], calling `done` with each row as it completes (a long sweep
/// prints as it goes).
///
/// # Errors
/// As [`run`].
pub fn run_with(a: &ScaleArgs, mut done: impl FnMut(&ScaleRow)) -> Result<ScaleReport> {
    if a.ranks.is_empty() || a.ranks.contains(&0) {
        return Err(Error::invalid("ranks", "give rank counts of at least 1"));
    }
    if !(a.density > 0.0 && a.density <= 1.0) {
        return Err(Error::invalid(
            "density",
            format!("{} not in (0, 1]", a.density),
        ));
    }
    let cap = mem_cap(a.mem_cap_gib, std::fs::read_to_string("/proc/meminfo"))?;
    let compute = match a.compute_factor {
        None => Compute::Off,
        Some(f) if f.is_finite() && f >= 0.0 => Compute::Measured { factor: f },
        Some(f) => return Err(Error::invalid("compute-factor", format!("{f}"))),
    };
    let timing = Timing {
        warm: a.warm,
        gap: crate::allreduce::pause("gap_ms", a.gap_ms)?.as_secs_f64(),
        reps: usize::try_from(a.reps).unwrap_or(1).max(1),
        floors: a.floors,
    };
    let net = sim::network(&a.network)?;
    let registry = Registry::<f32>::builtin();
    let algos = selection(a);
    check_memory(a, &cap, &registry, &algos)?;
    let judge = referee::Referee::of(&a.simgrid)?;
    let mut progress = crate::Progress::new((a.ranks.len() * algos.len()) as u64, "scale");
    let mut report = ScaleReport {
        network: net.label(),
        mem_cap: cap,
        rows: Vec::new(),
        planner: Vec::new(),
        referee: Vec::new(),
    };
    for &p in &a.ranks {
        let pool = spec(a).pool(p)?;
        let prof = profile_of(&pool, a.n);
        let first = report.rows.len();
        for algo in &algos {
            let keep = judge.is_some();
            let (row, _, traces) = run_one_traced(algo, &pool, a.n, &*net, compute, timing, keep)?;
            done(&row);
            report.rows.push(row);
            if let (Some(r), Some(traces)) = (&judge, traces) {
                report
                    .referee
                    .extend(referee::judge(r, algo, &traces, &*net)?);
            }
            progress.inc();
        }
        let choice = planner_choice(&registry, &*net, &prof)?;
        let planned = registry.auto_candidates();
        let here = &report.rows[first..];
        let best = here
            .iter()
            .filter(|r| planned.contains(&r.algo.as_str()))
            .min_by(|x, y| x.sim_s.total_cmp(&y.sim_s));
        let chosen = here.iter().find(|r| r.algo == choice);
        report.planner.push(PlannerRow {
            ranks: p,
            choice: choice.clone(),
            best: best.map_or_else(String::new, |b| b.algo.clone()),
            regret: match (chosen, best) {
                (Some(c), Some(b)) if b.sim_s > 0.0 => Some(c.sim_s / b.sim_s),
                _ => None,
            },
        });
    }
    progress.finish();
    Ok(report)
}

/// The report as table rows.
pub fn table(r: &ScaleReport) -> Vec<Vec<String>> {
    r.rows
        .iter()
        .map(|row| {
            let plan = r.planner.iter().find(|p| p.ranks == row.ranks);
            let mark = match plan {
                Some(p) if p.choice == row.algo => "planner",
                _ => "",
            };
            vec![
                row.algo.clone(),
                row.ranks.to_string(),
                format!("{:.3}", row.sim_s * 1e3),
                row.busiest.bytes_recv.to_string(),
                format!(
                    "{:.3}",
                    row.call_bytes_max as f64 / row.model_bytes.max(1.0)
                ),
                row.rounds_max.to_string(),
                format!("{:.0}", row.model_rounds),
                row.result_nnz.to_string(),
                format!("{:.2}", row.wall.as_secs_f64()),
                row.peak_rss
                    .map_or_else(|| "-".into(), |b| format!("{:.2}", b as f64 / GIB)),
                format!("{:.2}", row.mem_estimate as f64 / GIB),
                mark.into(),
            ]
        })
        .collect()
}

/// The table's header.
pub const HEADER: &[&str] = &[
    "algorithm",
    "P",
    "sim_ms",
    "bytes_recv_max",
    "x_model",
    "rounds",
    "model_rounds",
    "result_nnz",
    "wall_s",
    "peak_gib",
    "est_gib",
    "",
];

/// One JSON object per row, and one per planner choice.
pub fn json(r: &ScaleReport) -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = r
        .rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "kind": "scale",
                "simulated": true,
                "network": r.network,
                "algo": row.algo,
                "lossless": row.lossless,
                "ranks": row.ranks,
                "sim_ms": row.sim_s * 1e3,
                "bytes_recv_max": row.busiest.bytes_recv,
                "call_bytes_recv_max": row.call_bytes_max,
                "bytes_sent_total": row.total.bytes_sent,
                "msgs_total": row.total.msgs_sent,
                "rounds_max": row.rounds_max,
                "model_bytes": row.model_bytes,
                "model_rounds": row.model_rounds,
                "result_nnz": row.result_nnz,
                "wall_s": row.wall.as_secs_f64(),
                "peak_rss_bytes": row.peak_rss,
                "mem_estimate_bytes": row.mem_estimate,
                "mem_cap_gib": r.mem_cap.gib,
                "mem_cap_from": r.mem_cap.from,
            })
        })
        .collect();
    out.extend(referee::json(&r.network, &r.referee));
    out.extend(r.planner.iter().map(|p| {
        serde_json::json!({
            "kind": "planner",
            "simulated": true,
            "network": r.network,
            "ranks": p.ranks,
            "choice": p.choice,
            "best": p.best,
            "regret": p.regret,
        })
    }));
    out
}

/// Writes the log-log plot of simulated time against ranks, one line per
/// algorithm, as the papers draw their scaling figures ([`figure`]:
/// a colour and a marker of its own per line, lossy dashed and lossless
/// solid, a tick at every P of the sweep, the legend beside the chart).
///
/// # Errors
/// The file cannot be written.
pub fn plot(r: &ScaleReport, path: &std::path::Path) -> Result<()> {
    figure::write(r, path).map_err(|e| Error::invalid("svg", format!("{}: {e}", path.display())))
}
