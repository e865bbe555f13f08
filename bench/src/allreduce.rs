//! `sparse-bench allreduce`: every sparse allreduce on the same synthetic
//! gradients, with the dense ring allreduce measured in the same run, the
//! traffic each rank counted, the cost model's bytes for the same input and
//! the error against the dense oracle.

mod launch;

pub use launch::{Gathered, Launch, RankHooks, ThreadHooks, Threads};
#[cfg(feature = "mpi")]
pub use launch::{Mpi, MpiHooks};
use sparse_coll::{
    Defaults, Params, Profile, Reduced, Registered, Registry, Spardl, SparseAllreduce, Traffic,
    Transport, dense,
};
use sparse_core::generate::{GradientSpec, ValueDist};
use sparse_core::{Error, Result, SparseVec};
use std::time::{Duration, Instant};

/// Parameters of the allreduce benchmark (`sparse-bench allreduce`'s
/// flags).
#[derive(Debug, Clone, clap::Args)]
pub struct AllreduceArgs {
    /// Ranks (threads of this process; under MPI the world size, and this
    /// is ignored).
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Dimension of the gradient.
    #[arg(long, default_value_t = 1 << 20)]
    pub n: usize,
    /// Fraction of non-zeros per rank, in (0, 1]; also `k / n` for the
    /// lossy algorithms.
    #[arg(long, default_value_t = 0.001)]
    pub density: f64,
    /// Fraction of each rank's indices shared by all ranks, in [0, 1].
    #[arg(long, default_value_t = 0.5)]
    pub overlap: f64,
    /// Only these algorithms, registry names with parameters
    /// (`spardl_bsag:k=40,d=2`; one per flag, repeat the flag for more);
    /// `auto` is the planner. All, with their defaults, when absent.
    #[arg(long = "algo", value_name = "NAME[:PARAMS]", long_help = algo_help())]
    pub algos: Vec<String>,
    /// Seed of the gradients.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Timed calls per algorithm, after one untimed warm-up call.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Idle milliseconds before each timed call (before its barrier), as a
    /// training step's computation leaves the network idle between calls:
    /// on a link shaped by a token bucket (`tc`'s `tbf`), time for the
    /// bucket to refill, so that every call starts from the same state
    /// rather than from what the previous call and its floor left. 0 (none)
    /// by default.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub gap_ms: f64,
    /// Idle milliseconds before each algorithm's (and each baseline's)
    /// untimed first call, then a barrier: on a shaped link the bucket
    /// refills, so that an algorithm's calls do not start from what the
    /// algorithms before it left (the simulator replays each from a full
    /// bucket). 0 (none) by default.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub settle_ms: f64,
}

/// `--algo`'s long help: every registered algorithm with its parameters.
pub fn algo_help() -> String {
    format!(
        "Only these algorithms, as registry names with parameters \
         (`spardl_bsag:k=40,d=2`), one per flag: repeat the flag for more \
         (a list flag never splits its value, as parameters hold commas). \
         All when absent. `k` defaults to the density times n.\n\nAlgorithms:\n{}",
        Registry::<f32>::builtin().help()
    )
}

/// One row: an algorithm's traffic, time and error.
#[derive(Debug, Clone)]
pub struct AllreduceRow {
    /// Algorithm name.
    pub algo: String,
    /// Its parameters (`k=40,d=2`).
    pub params: String,
    /// For `auto`, the algorithm it ran.
    pub chose: Option<String>,
    /// Whether the algorithm is lossless.
    pub lossless: bool,
    /// Entries of the result.
    pub result_nnz: usize,
    /// The most bytes any rank received (`None` where the library cannot
    /// count them: MPI's own allreduce).
    pub bytes_recv_max: Option<u64>,
    /// The most bytes any rank sent.
    pub bytes_sent_max: Option<u64>,
    /// The most messages (sent plus received) of any rank.
    pub msgs_max: Option<u64>,
    /// The most rounds of any rank.
    pub rounds: Option<u64>,
    /// The cost model's bytes received by the busiest rank for this input
    /// ([`SparseAllreduce::cost`]).
    pub model_bytes: f64,
    /// The paper's own formula where it counts something else
    /// ([`SparseAllreduce::paper_cost`]).
    pub paper_bytes: Option<f64>,
    /// Median over the timed calls of the slowest rank's milliseconds.
    pub ms: f64,
    /// The row's floor, where the transport has one (MPI): a bare
    /// `MPI_Allgather` of as many bytes as the row's calls received, timed
    /// right after each call; median of the slowest rank, milliseconds.
    pub floor_ms: Option<f64>,
    /// Largest difference from the dense oracle, over all coordinates.
    pub max_abs_err: f64,
}

/// Rows plus the input's profile and the dense baseline.
#[derive(Debug, Clone)]
pub struct AllreduceReport {
    /// The input: ranks, dimension, entries.
    pub profile: Profile,
    /// Median ms of the fastest dense allreduce in this run (the ring on
    /// threads; under MPI the faster of the ring and `MPI_Allreduce`): the
    /// baseline of `x_dense`.
    pub dense_ms: f64,
    /// Which dense allreduce that was.
    pub dense_algo: String,
    /// Bytes the busiest rank received in the dense ring allreduce.
    pub dense_bytes_recv_max: u64,
    /// One row per algorithm.
    pub rows: Vec<AllreduceRow>,
    /// Compute overlapped with an allreduce, when measured.
    pub overlap: Option<OverlapReport>,
}

/// Builds the algorithm of `spec` from the built-in registry with budget
/// `k` for the lossy ones.
///
/// # Errors
/// An unknown name or a bad parameter.
pub fn build(spec: &str, k: usize) -> Result<Box<dyn SparseAllreduce<f32>>> {
    Registry::builtin().build(spec, Defaults::k(k)?)
}

/// What one rank measured for one algorithm.
#[derive(Debug, Clone)]
pub struct RankMeasure {
    /// The last call's result (stateful algorithms and `auto` settle over
    /// calls; the warm-up call profiles and refreshes).
    pub reduced: Reduced<f32>,
    /// For `auto`, the algorithm it ran.
    pub chose: Option<String>,
    /// Wall time of each timed call.
    pub times: Vec<Duration>,
    /// The algorithm's own prediction of the last call, asked just before
    /// making it ([`SparseAllreduce::cost`]).
    pub model: sparse_core::cost::Cost,
    /// The paper's formula for the same call, where it differs.
    pub paper: Option<sparse_core::cost::Cost>,
    /// The floor timed after each call, where there is one: a bare
    /// allgather of the call's own bytes, then one of the pairs payload
    /// (see [`RankHooks::floor`]).
    pub floors: Vec<[Duration; 2]>,
}

/// What every rank of a run shares: the inputs, the oracle, the
/// selected algorithms and the budget.
#[derive(Debug, Clone)]
pub struct Setup {
    /// One synthetic gradient per rank ([`inputs`]).
    pub ins: Vec<SparseVec<f32>>,
    /// The budget of the lossy algorithms: the first input's entries.
    pub k: usize,
    /// The selected algorithms as registry specs ([`selection`]).
    pub algos: Vec<String>,
    /// The dense oracle of the inputs.
    pub oracle: Oracle,
    /// The inputs' exact profile.
    pub profile: Profile,
    /// Timed calls per algorithm.
    pub reps: usize,
    /// Idle time before each timed call (`--gap-ms`).
    pub gap: Duration,
    /// Idle time before each algorithm's first call (`--settle-ms`).
    pub settle: Duration,
}

impl Setup {
    /// The inputs, budget, algorithms and oracle of `a`.
    ///
    /// # Errors
    /// Invalid parameters, an unknown algorithm.
    pub fn new(a: &AllreduceArgs) -> Result<Self> {
        let gap = pause("gap_ms", a.gap_ms)?;
        let settle = pause("settle_ms", a.settle_ms)?;
        let ins = inputs(a)?;
        let k = ins[0].nnz().max(1);
        let algos = selection(a, k)?;
        let oracle = Oracle::of(&ins);
        let profile = Profile::of(&ins);
        Ok(Self {
            ins,
            k,
            algos,
            oracle,
            profile,
            reps: a.reps,
            gap,
            settle,
        })
    }
}

/// One rank's part of the benchmark, on any transport: for each algorithm
/// (registry specs, built with budget `k`), one warm-up call, then `reps`
/// timed calls, each started after the hooks' barrier and followed by the
/// hooks' floor where there is one (interleaved, so that a row and its
/// floor see the machine in the same state); the last call's result and
/// traffic are kept.
/// Returns the measures and the dense ring's (times, traffic).
///
/// # Errors
/// The algorithms' and the transport's errors.
pub fn run_rank<T: Transport + Send>(
    t: &mut T,
    s: &Setup,
    hooks: &mut dyn RankHooks<T>,
) -> Result<(Vec<RankMeasure>, Vec<Duration>, Traffic)> {
    let (v, profile) = (&s.ins[t.rank()], &s.profile);
    let mut out = Vec::new();
    for spec in &s.algos {
        let mut runner = build(spec, s.k)?;
        // One outcome kept across the calls (`allreduce_into`), as a
        // training loop keeps it: the timed calls reuse its allocations.
        let mut reduced = Reduced::default();
        settle(t, s.settle, hooks)?;
        runner.allreduce_into(t, v, &mut reduced)?;
        let mut times = Vec::with_capacity(s.reps);
        let mut floors = Vec::new();
        let (mut model, mut paper) = (runner.cost(profile), runner.paper_cost(profile));
        for _ in 0..s.reps {
            (model, paper) = (runner.cost(profile), runner.paper_cost(profile));
            idle(s.gap);
            hooks.barrier(t)?;
            let start = Instant::now();
            runner.allreduce_into(t, v, &mut reduced)?;
            times.push(start.elapsed());
            if let Some(floor) = hooks.floor(t, reduced.traffic.bytes_recv)? {
                floors.push(floor);
            }
        }
        out.push(RankMeasure {
            reduced,
            chose: runner.ran(),
            times,
            model,
            paper,
            floors,
        });
    }
    let (dense_times, dense_traffic) = run_dense_ring(t, v, s, hooks)?;
    Ok((out, dense_times, dense_traffic))
}

/// A pause flag's milliseconds (`--gap-ms`, `--settle-ms`, also
/// `sparse-bench scale`'s) as a duration, checked once.
///
/// # Errors
/// [`Error::InvalidParameter`] named `name` for a time that is not finite
/// or outside 0 to 60,000 ms.
pub fn pause(name: &'static str, ms: f64) -> Result<Duration> {
    if !(ms.is_finite() && (0.0..=60_000.0).contains(&ms)) {
        return Err(Error::invalid(
            name,
            format!(
                "--{} {ms} is not a time from 0 to 60000 ms",
                name.replace('_', "-")
            ),
        ));
    }
    Ok(Duration::from_secs_f64(ms / 1e3))
}

/// Sleeps `gap` (nothing where it is zero): the idle time before a timed
/// call ([`Setup::gap`]).
pub fn idle(gap: Duration) {
    if !gap.is_zero() {
        std::thread::sleep(gap);
    }
}

/// Where `settle` is not zero: sleeps it, then the hooks' barrier (before
/// an algorithm's first call, [`Setup::settle`]).
///
/// # Errors
/// The barrier's.
pub fn settle<T>(t: &mut T, settle: Duration, hooks: &mut dyn RankHooks<T>) -> Result<()> {
    if !settle.is_zero() {
        idle(settle);
        hooks.barrier(t)?;
    }
    Ok(())
}

/// The dense ring allreduce on `v`'s dense form: one untimed call (whose
/// traffic is returned, after `s.settle`), then `s.reps` timed calls, each
/// after `s.gap` idle.
fn run_dense_ring<T: Transport + Send>(
    t: &mut T,
    v: &SparseVec<f32>,
    s: &Setup,
    hooks: &mut dyn RankHooks<T>,
) -> Result<(Vec<Duration>, Traffic)> {
    let (reps, gap) = (s.reps, s.gap);
    let dense_in = v.to_dense();
    idle(s.settle);
    hooks.barrier(t)?;
    let before = t.traffic();
    let mut sum = Vec::new();
    dense::ring_allreduce_into(t, &dense_in, &mut sum)?;
    let dense_traffic = t.traffic().since(&before);
    let mut dense_times = Vec::with_capacity(reps);
    for _ in 0..reps {
        idle(gap);
        hooks.barrier(t)?;
        let start = Instant::now();
        dense::ring_allreduce_into(t, &dense_in, &mut sum)?;
        dense_times.push(start.elapsed());
    }
    Ok((dense_times, dense_traffic))
}

/// Stand-in for the computation a training step overlaps with
/// communication: a momentum-style update `x = 0.9 x + g` over the dense
/// gradient, memory-bound like an optimizer step.
pub fn local_step(x: &mut [f32], g: &[f32]) {
    for (a, &b) in x.iter_mut().zip(g) {
        *a = 0.9 * *a + b;
    }
}

/// SparCML's non-blocking collectives, measured on one rank: for `reps`
/// calls each (after the hooks' barrier), the local computation alone (as many
/// [`local_step`]s as take about one allreduce), the allreduce alone,
/// one after the other, and the allreduce started on its progress thread
/// while the step runs ([`sparse_coll::nonblocking::overlap`]). Returns the
/// four lists of times in that order.
///
/// # Errors
/// The algorithm's and the transport's errors.
pub fn run_overlap<T: Transport + Send>(
    t: &mut T,
    s: &Setup,
    spec: &str,
    hooks: &mut dyn RankHooks<T>,
) -> Result<[Vec<Duration>; 4]> {
    let (v, k, reps) = (&s.ins[t.rank()], s.k, s.reps);
    let g = v.to_dense();
    let mut x = vec![0.0f32; g.len()];
    let mut runner = build(spec, k)?;
    // Size the computation to about the allreduce's time, where overlap
    // can save the most (half of the sequential time).
    let start = Instant::now();
    runner.allreduce(t, v)?;
    let comm = start.elapsed();
    let start = Instant::now();
    local_step(&mut x, &g);
    let step = start.elapsed().max(Duration::from_nanos(1));
    let steps = (comm.as_secs_f64() / step.as_secs_f64()).round().max(1.0) as usize;
    let compute = |x: &mut Vec<f32>| {
        for _ in 0..steps {
            local_step(x, &g);
        }
    };
    let mut out: [Vec<Duration>; 4] = Default::default();
    for _ in 0..reps {
        hooks.barrier(t)?;
        let start = Instant::now();
        compute(&mut x);
        out[0].push(start.elapsed());
        hooks.barrier(t)?;
        let start = Instant::now();
        runner.allreduce(t, v)?;
        out[1].push(start.elapsed());
        hooks.barrier(t)?;
        let start = Instant::now();
        compute(&mut x);
        runner.allreduce(t, v)?;
        out[2].push(start.elapsed());
        hooks.barrier(t)?;
        let start = Instant::now();
        let (red, ()) =
            sparse_coll::nonblocking::overlap(t, |t| runner.allreduce(t, v), || compute(&mut x));
        red?;
        out[3].push(start.elapsed());
    }
    std::hint::black_box(&x);
    Ok(out)
}

/// The overlap measurement of a run: medians over calls of the slowest
/// rank, in milliseconds.
///
/// Overlap needs two CPUs per rank at once, one for the local step and one
/// for the allreduce's progress thread: with fewer ([`Self::can_overlap`]
/// false, as with 4 thread ranks on 2 cores) the two take turns on the
/// same CPUs and the overlapped time only measures the scheduler, so no
/// saving is reported.
#[derive(Debug, Clone)]
pub struct OverlapReport {
    /// The allreduce overlapped.
    pub algo: String,
    /// The CPUs each rank had to itself ([`crate::allreduce::launch::Launch::cpus_per_rank`]).
    pub cpus_per_rank: f64,
    /// The local step alone.
    pub compute_ms: f64,
    /// The allreduce alone.
    pub allreduce_ms: f64,
    /// Step, then allreduce.
    pub sequential_ms: f64,
    /// Allreduce started, step, wait.
    pub overlapped_ms: f64,
}

impl OverlapReport {
    /// Whether each rank had a CPU for its step and one for its allreduce.
    pub fn can_overlap(&self) -> bool {
        self.cpus_per_rank >= 2.0
    }

    /// The share of the sequential time that overlapping saved, where it
    /// could overlap and saved anything (a run that cannot overlap, or a
    /// measured saving of zero or less, is `None`).
    pub fn saved(&self) -> Option<f64> {
        let saved = 1.0 - self.overlapped_ms / self.sequential_ms;
        (self.can_overlap() && saved > 0.0).then_some(saved)
    }
}

/// The CPUs this thread may run on (its affinity mask, bounded by a CPU
/// quota; 1 where that cannot be read).
pub fn allowed_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The machine's online CPUs (`/sys/devices/system/cpu/online`, a list such
/// as `0-3,8`), where Linux says.
pub fn online_cpus() -> Option<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    let mut n = 0;
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
        n += b.checked_sub(a)? + 1;
    }
    Some(n)
}

/// Combines every rank's overlap times; `cpus_per_rank` is the launch's.
pub fn overlap_report(
    spec: &str,
    per_rank: &[[Vec<Duration>; 4]],
    cpus_per_rank: f64,
) -> OverlapReport {
    let col = |i: usize| slowest(&per_rank.iter().map(|x| x[i].as_slice()).collect::<Vec<_>>());
    OverlapReport {
        algo: spec.into(),
        cpus_per_rank,
        compute_ms: col(0),
        allreduce_ms: col(1),
        sequential_ms: col(2),
        overlapped_ms: col(3),
    }
}

/// The algorithm the overlap measurement uses: SparDL ([`Spardl`], the
/// paper whose training overlaps it) when selected, else the first
/// selected one.
pub fn overlap_algorithm(algos: &[String]) -> Option<String> {
    let spardl = <Spardl<f32> as Registered<f32>>::NAME;
    algos
        .iter()
        .find(|a| Params::parse(a).is_ok_and(|p| p.name() == spardl))
        .or(algos.first())
        .cloned()
}

/// The synthetic gradients of a run, one per rank (normal values).
///
/// # Errors
/// [`Error::InvalidParameter`] for an infeasible density and overlap.
pub fn inputs(a: &AllreduceArgs) -> Result<Vec<SparseVec<f32>>> {
    if !(a.density > 0.0 && a.density <= 1.0) {
        return Err(Error::invalid(
            "density",
            format!("{} not in (0, 1]", a.density),
        ));
    }
    if a.ranks == 0 || a.reps == 0 {
        return Err(Error::invalid("ranks, reps", "must be at least 1"));
    }
    GradientSpec {
        overlap: a.overlap,
        values: ValueDist::Normal { std: 1.0 },
        ..GradientSpec::new(a.n, a.density, a.seed)
    }
    .generate::<f32>(a.ranks)
}

/// The selected algorithms as registry specs: `a.algos`, or every
/// registered name (the planner `auto` last), each checked by building it.
///
/// # Errors
/// [`Error::InvalidParameter`] for an unknown name or a bad parameter.
pub fn selection(a: &AllreduceArgs, k: usize) -> Result<Vec<String>> {
    let specs: Vec<String> = if a.algos.is_empty() {
        Registry::<f32>::builtin()
            .names()
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        a.algos.clone()
    };
    for spec in &specs {
        build(spec, k)?;
    }
    Ok(specs)
}

/// The dense oracle of a run: the inputs summed in `f64`.
#[derive(Debug, Clone)]
pub struct Oracle {
    /// The sum of the inputs.
    pub sum: Vec<f64>,
}

impl Oracle {
    /// The oracle of `ins`.
    pub fn of(ins: &[SparseVec<f32>]) -> Self {
        let mut sum = vec![0.0f64; ins[0].dim()];
        for v in ins {
            for (i, x) in v.iter() {
                sum[i as usize] += x as f64;
            }
        }
        Self { sum }
    }
}

/// What rank 0 needs of another rank's measure: small enough to gather
/// from every rank of an MPI job.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Traffic of the last call.
    pub traffic: Traffic,
    /// Wall time of each timed call.
    pub times: Vec<Duration>,
    /// A digest of the last result (indices and value bits).
    pub digest: u64,
    /// The floors timed after the calls (empty without one).
    pub floors: Vec<[Duration; 2]>,
}

impl Summary {
    /// The summary of a measure.
    pub fn of(m: &RankMeasure) -> Self {
        Self {
            traffic: m.reduced.traffic,
            times: m.times.clone(),
            digest: digest(&m.reduced.result),
            floors: m.floors.clone(),
        }
    }
}

/// FNV-1a over a result's dimension, indices and value bits.
pub fn digest(v: &SparseVec<f32>) -> u64 {
    let words = std::iter::once(v.dim() as u64)
        .chain(v.indices().iter().map(|&i| u64::from(i)))
        .chain(v.values().iter().map(|x| u64::from(x.to_bits())));
    sparse_core::hash::fnv1a(words.flat_map(u64::to_le_bytes))
}

/// One rank's summaries, the dense ring's times and traffic, as bytes.
pub fn encode_summaries(s: &[Summary], dense_times: &[Duration], dense: Traffic) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |x: u64| out.extend_from_slice(&x.to_le_bytes());
    let traffic = |put: &mut dyn FnMut(u64), t: &Traffic| {
        for x in [
            t.bytes_sent,
            t.bytes_recv,
            t.msgs_sent,
            t.msgs_recv,
            t.rounds,
        ] {
            put(x);
        }
    };
    put(s.len() as u64);
    for m in s {
        traffic(&mut put, &m.traffic);
        put(m.digest);
        put(m.times.len() as u64);
        for t in &m.times {
            put(t.as_nanos() as u64);
        }
        put(m.floors.len() as u64);
        for t in m.floors.iter().flatten() {
            put(t.as_nanos() as u64);
        }
    }
    traffic(&mut put, &dense);
    put(dense_times.len() as u64);
    for t in dense_times {
        put(t.as_nanos() as u64);
    }
    out
}

/// The inverse of [`encode_summaries`].
///
/// # Errors
/// [`Error::Corrupt`] for bytes it did not write.
pub fn decode_summaries(b: &[u8]) -> Result<(Vec<Summary>, Vec<Duration>, Traffic)> {
    let mut words = b
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8")));
    let mut next = || {
        words
            .next()
            .ok_or_else(|| Error::corrupt("summaries", "truncated"))
    };
    let traffic = |next: &mut dyn FnMut() -> Result<u64>| -> Result<Traffic> {
        Ok(Traffic {
            bytes_sent: next()?,
            bytes_recv: next()?,
            msgs_sent: next()?,
            msgs_recv: next()?,
            rounds: next()?,
        })
    };
    let count = next()? as usize;
    let mut out = Vec::new();
    for _ in 0..count {
        let t = traffic(&mut next)?;
        let digest = next()?;
        let reps = next()? as usize;
        let times = (0..reps)
            .map(|_| next().map(Duration::from_nanos))
            .collect::<Result<_>>()?;
        let floors = (0..next()?)
            .map(|_| Ok([Duration::from_nanos(next()?), Duration::from_nanos(next()?)]))
            .collect::<Result<_>>()?;
        out.push(Summary {
            traffic: t,
            times,
            digest,
            floors,
        });
    }
    let dense = traffic(&mut next)?;
    let reps = next()? as usize;
    let dense_times = (0..reps)
        .map(|_| next().map(Duration::from_nanos))
        .collect::<Result<_>>()?;
    Ok((out, dense_times, dense))
}

/// What rank 0 needs of one rank: its summaries, the dense ring's times
/// and traffic, and further lists of `reps` call times each (the overlap
/// measurement's four when measured, then the transport's baselines).
#[derive(Debug, Clone, PartialEq)]
pub struct RankTimes {
    /// One summary per algorithm.
    pub summaries: Vec<Summary>,
    /// The dense ring's timed calls.
    pub dense_times: Vec<Duration>,
    /// The dense ring's traffic.
    pub dense_traffic: Traffic,
    /// Further lists of call times, as many per list as timed calls.
    pub lists: Vec<Vec<Duration>>,
}

impl RankTimes {
    /// As bytes: [`encode_summaries`], then the lists' times, then their
    /// count.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = encode_summaries(&self.summaries, &self.dense_times, self.dense_traffic);
        for t in self.lists.iter().flatten() {
            out.extend((t.as_nanos() as u64).to_le_bytes());
        }
        out.extend((self.lists.len() as u64).to_le_bytes());
        out
    }

    /// The inverse of [`RankTimes::encode`], for lists of `reps` times.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for bytes it did not write.
    pub fn decode(b: &[u8], reps: usize) -> Result<Self> {
        let truncated = || Error::corrupt("summaries", "truncated");
        let (rest, count) = b
            .split_at_checked(b.len().wrapping_sub(8))
            .ok_or_else(truncated)?;
        let count = u64::from_le_bytes(count.try_into().expect("8")) as usize;
        let split = count
            .checked_mul(8 * reps)
            .and_then(|tail| rest.len().checked_sub(tail))
            .ok_or_else(truncated)?;
        let (summaries, dense_times, dense_traffic) = decode_summaries(&rest[..split])?;
        let times: Vec<Duration> = rest[split..]
            .chunks_exact(8)
            .map(|c| Duration::from_nanos(u64::from_le_bytes(c.try_into().expect("8"))))
            .collect();
        Ok(Self {
            summaries,
            dense_times,
            dense_traffic,
            lists: times
                .chunks(reps.max(1))
                .map(<[Duration]>::to_vec)
                .collect(),
        })
    }
}

/// Combines every rank's summaries into rows: traffic maxima over ranks,
/// the median over calls of the slowest rank's time, the error of rank 0's
/// last result (`results`, with `auto`'s choice) against the dense oracle.
/// Every rank's result digest must equal rank 0's.
///
/// # Errors
/// [`Error::Disagreement`] if two ranks hold different results.
pub fn report(
    s: &Setup,
    results: &[RankMeasure],
    per_rank: &[RankTimes],
) -> Result<AllreduceReport> {
    let (algos, k, p) = (&s.algos, s.k, s.ins.len());
    let profile = s.profile;
    let oracle = &s.oracle.sum;
    let mut rows = Vec::new();
    for (i, spec) in algos.iter().enumerate() {
        let algo = build(spec, k)?;
        let measure = &results[i];
        let m = |r: usize| &per_rank[r].summaries[i];
        let first = &results[i].reduced.result;
        let want = digest(first);
        for r in 0..p {
            if m(r).digest != want {
                return Err(Error::Disagreement {
                    what: "result",
                    detail: format!("rank {r} differs from rank 0"),
                });
            }
        }
        let traffic: Vec<Traffic> = (0..p).map(|r| m(r).traffic).collect();
        let max_abs_err = max_err(&first.to_dense(), oracle);
        rows.push(AllreduceRow {
            algo: algo.name(),
            params: algo.params(),
            chose: results[i].chose.clone(),
            lossless: algo.lossless(),
            result_nnz: first.nnz(),
            bytes_recv_max: traffic.iter().map(|t| t.bytes_recv).max(),
            bytes_sent_max: traffic.iter().map(|t| t.bytes_sent).max(),
            msgs_max: traffic.iter().map(|t| t.msgs_sent + t.msgs_recv).max(),
            rounds: traffic.iter().map(|t| t.rounds).max(),
            model_bytes: measure.model.bytes(),
            paper_bytes: measure.paper.map(|c| c.bytes()),
            ms: slowest(&(0..p).map(|r| m(r).times.as_slice()).collect::<Vec<_>>()),
            floor_ms: (!m(0).floors.is_empty()).then(|| {
                let own: Vec<Vec<Duration>> = (0..p)
                    .map(|r| m(r).floors.iter().map(|f| f[0]).collect())
                    .collect();
                slowest(&own.iter().map(Vec::as_slice).collect::<Vec<_>>())
            }),
            max_abs_err,
        });
    }
    Ok(AllreduceReport {
        profile,
        dense_ms: slowest(
            &per_rank
                .iter()
                .map(|x| x.dense_times.as_slice())
                .collect::<Vec<_>>(),
        ),
        dense_algo: "dense_ring".into(),
        dense_bytes_recv_max: per_rank
            .iter()
            .map(|x| x.dense_traffic.bytes_recv)
            .max()
            .unwrap_or(0),
        rows,
        overlap: None,
    })
}

/// The largest difference between `got` and the oracle.
pub fn max_err(got: &[f32], oracle: &[f64]) -> f64 {
    got.iter()
        .zip(oracle)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0.0, f64::max)
}

/// The median over calls of the slowest rank's time, in milliseconds.
fn slowest(per_rank: &[&[Duration]]) -> f64 {
    let reps = per_rank[0].len();
    let mut per_call: Vec<Duration> = (0..reps)
        .map(|c| per_rank.iter().map(|t| t[c]).max().unwrap_or_default())
        .collect();
    per_call.sort_unstable();
    per_call[per_call.len() / 2].as_secs_f64() * 1e3
}

/// One rank's whole part: [`run_rank`], the overlap measurement where
/// there is an algorithm for it, the transport's baselines; returns the
/// measures and the bytes for rank 0 ([`RankTimes`]).
/// The hooks are readied first ([`RankHooks::prepare`]).
fn rank_job<T: Transport + Send>(
    t: &mut T,
    s: &Setup,
    hooks: &mut dyn RankHooks<T>,
) -> Result<(Vec<RankMeasure>, Vec<u8>)> {
    hooks.prepare(s);
    let (measures, dense_times, dense_traffic) = run_rank(t, s, hooks)?;
    let mut lists = Vec::new();
    if let Some(spec) = overlap_algorithm(&s.algos) {
        lists.extend(run_overlap(t, s, &spec, hooks)?);
    }
    lists.extend(hooks.baselines(t, &s.ins[t.rank()], s.reps)?);
    let times = RankTimes {
        summaries: measures.iter().map(Summary::of).collect(),
        dense_times,
        dense_traffic,
        lists,
    };
    Ok((measures, times.encode()))
}

/// The benchmark on any transport: every rank of `launch` runs
/// [`run_rank`] and the overlap measurement, and rank 0 combines every
/// rank's [`RankTimes`] into the report, with the transport's own rows
/// ([`RankHooks::rows`]); other ranks return `None`. The rank count is
/// `launch`'s, not `a.ranks`.
///
/// # Errors
/// Invalid parameters; the algorithms' and the transport's errors.
pub fn run<L: Launch>(a: &AllreduceArgs, launch: &L) -> Result<Option<AllreduceReport>> {
    let a = AllreduceArgs {
        ranks: launch.ranks(),
        ..a.clone()
    };
    let setup = Setup::new(&a)?;
    let job = |t: &mut L::T, hooks: &mut L::Hooks| rank_job(t, &setup, hooks);
    let Some(Gathered { mine, hooks, all }) = launch.gather(&job)? else {
        return Ok(None);
    };
    let per_rank = all
        .iter()
        .map(|b| RankTimes::decode(b, a.reps))
        .collect::<Result<Vec<_>>>()?;
    let mut rep = report(&setup, &mine, &per_rank)?;
    if let Some(spec) = overlap_algorithm(&setup.algos) {
        let over: Vec<[Vec<Duration>; 4]> = per_rank
            .iter()
            .map(|r| std::array::from_fn(|i| r.lists[i].clone()))
            .collect();
        rep.overlap = Some(overlap_report(&spec, &over, launch.cpus_per_rank()));
    }
    hooks.rows(&mut rep, &per_rank, &setup.oracle);
    Ok(Some(rep))
}

/// The benchmark on the thread transport: `a.ranks` threads in this
/// process.
///
/// # Errors
/// Invalid parameters; the algorithms' errors.
pub fn run_threads(a: &AllreduceArgs) -> Result<AllreduceReport> {
    Ok(run(a, &Threads::new(a.ranks))?.expect("rank 0 of the threads reports"))
}

/// The benchmark on MPI (feature `mpi`): every rank of `MPI_COMM_WORLD`
/// runs it with `MPI_Barrier` between calls, then MPICH's own dense
/// `MPI_Allreduce` on the same data as a baseline row (`mpi_allreduce`,
/// whose traffic MPI does not expose), with the floors of [`Mpi`]. Rank 0
/// hands the report to `emit` before MPI is finalized, so that a hang in
/// `MPI_Finalize` (UCX 1.13's TCP transport can stop progressing its
/// endpoints before their final flush, openucx/ucx#8738; `MPIEXEC_TIMEOUT`
/// then ends the job) loses no result. `a.ranks` is ignored: the world
/// size is the rank count.
///
/// # Errors
/// MPI already initialized; invalid parameters; the algorithms' errors.
#[cfg(feature = "mpi")]
pub fn run_mpi(a: &AllreduceArgs, emit: impl FnOnce(&AllreduceReport)) -> Result<()> {
    let mpi = Mpi::init()?;
    if let Some(rep) = run(a, &mpi)? {
        emit(&rep);
    }
    drop(mpi);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_round_trip_and_reject_truncation() {
        let ns = |x: u64| Duration::from_nanos(x);
        let traffic = |x: u64| Traffic {
            bytes_sent: x,
            bytes_recv: x + 1,
            msgs_sent: x + 2,
            msgs_recv: x + 3,
            rounds: x + 4,
        };
        let s = vec![
            Summary {
                traffic: traffic(10),
                times: vec![ns(5), ns(7)],
                digest: 99,
                floors: vec![[ns(1), ns(2)], [ns(3), ns(4)]],
            },
            Summary {
                traffic: traffic(20),
                times: vec![ns(6)],
                digest: 98,
                floors: Vec::new(),
            },
        ];
        let dense = vec![ns(11), ns(12)];
        let bytes = encode_summaries(&s, &dense, traffic(30));
        assert_eq!(decode_summaries(&bytes).unwrap(), (s, dense, traffic(30)));
        for cut in [8, bytes.len() / 2, bytes.len() - 8] {
            assert!(matches!(
                decode_summaries(&bytes[..cut]),
                Err(Error::Corrupt { .. })
            ));
        }
    }
}
