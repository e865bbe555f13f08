//! `sparse-bench allreduce`: every sparse allreduce on the same synthetic
//! gradients, with the dense ring allreduce measured in the same run, the
//! traffic each rank counted, the cost model's bytes for the same input and
//! the error against the dense oracle.

use crate::Progress;
use sparse_coll::{
    Defaults, Profile, Reduced, Registry, SparseAllreduce, Traffic, Transport, dense,
};
use sparse_core::testing::generate::{GradientSpec, ValueDist};
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
    Registry::builtin().build(spec, Defaults { k })
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
    /// (see [`Floor`]).
    pub floors: Vec<[Duration; 2]>,
}

/// A transport's floor of a sparse call, timed after each one (under MPI,
/// bare `MPI_Allgather`s): given the bytes this rank received in the call,
/// returns the time of an allgather of that many bytes spread over the
/// other ranks (every rank contributing the largest share of any rank),
/// and of one of the sparse input's pairs (8 bytes per entry of the
/// largest input), the same for every algorithm. A collective call: every
/// rank calls it together.
pub type Floor<'a, T> = &'a mut dyn FnMut(&mut T, u64) -> Result<[Duration; 2]>;

/// One rank's part of the benchmark, on any transport: for each algorithm
/// (registry specs, built with budget `k`), one warm-up call, then `reps`
/// timed calls, each started after `barrier` and followed by the `floor`
/// where there is one (interleaved, so that a row and its floor see the
/// machine in the same state); the last call's result and traffic are
/// kept.
/// Returns the measures and the dense ring's (times, traffic).
///
/// # Errors
/// The algorithms' and the transport's errors.
#[allow(clippy::too_many_arguments)]
pub fn run_rank<T: Transport + Send>(
    t: &mut T,
    v: &SparseVec<f32>,
    profile: &Profile,
    algos: &[String],
    k: usize,
    reps: usize,
    barrier: &dyn Fn(&mut T) -> Result<()>,
    mut floor: Option<Floor<'_, T>>,
) -> Result<(Vec<RankMeasure>, Vec<Duration>, Traffic)> {
    let mut out = Vec::new();
    for spec in algos {
        let mut runner = build(spec, k)?;
        // One outcome kept across the calls (`allreduce_into`), as a
        // training loop keeps it: the timed calls reuse its allocations.
        let mut reduced = Reduced::default();
        runner.allreduce_into(t, v, &mut reduced)?;
        let mut times = Vec::with_capacity(reps);
        let mut floors = Vec::new();
        let (mut model, mut paper) = (runner.cost(profile), runner.paper_cost(profile));
        for _ in 0..reps {
            (model, paper) = (runner.cost(profile), runner.paper_cost(profile));
            barrier(t)?;
            let start = Instant::now();
            runner.allreduce_into(t, v, &mut reduced)?;
            times.push(start.elapsed());
            if let Some(floor) = floor.as_mut() {
                floors.push(floor(t, reduced.traffic.bytes_recv)?);
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
    let dense_in = v.to_dense();
    barrier(t)?;
    let before = t.traffic();
    let mut sum = Vec::new();
    dense::ring_allreduce_into(t, &dense_in, &mut sum)?;
    let dense_traffic = t.traffic().since(&before);
    let mut dense_times = Vec::with_capacity(reps);
    for _ in 0..reps {
        barrier(t)?;
        let start = Instant::now();
        dense::ring_allreduce_into(t, &dense_in, &mut sum)?;
        dense_times.push(start.elapsed());
    }
    Ok((out, dense_times, dense_traffic))
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
/// calls each (after a barrier), the local computation alone (as many
/// [`local_step`]s as take about one allreduce), the allreduce alone,
/// one after the other, and the allreduce started on its progress thread
/// while the step runs ([`sparse_coll::nonblocking::overlap`]). Returns the
/// four lists of times in that order.
///
/// # Errors
/// The algorithm's and the transport's errors.
pub fn run_overlap<T: Transport + Send>(
    t: &mut T,
    v: &SparseVec<f32>,
    spec: &str,
    k: usize,
    reps: usize,
    barrier: &dyn Fn(&mut T) -> Result<()>,
) -> Result<[Vec<Duration>; 4]> {
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
        barrier(t)?;
        let start = Instant::now();
        compute(&mut x);
        out[0].push(start.elapsed());
        barrier(t)?;
        let start = Instant::now();
        runner.allreduce(t, v)?;
        out[1].push(start.elapsed());
        barrier(t)?;
        let start = Instant::now();
        compute(&mut x);
        runner.allreduce(t, v)?;
        out[2].push(start.elapsed());
        barrier(t)?;
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
#[derive(Debug, Clone)]
pub struct OverlapReport {
    /// The allreduce overlapped.
    pub algo: String,
    /// The local step alone.
    pub compute_ms: f64,
    /// The allreduce alone.
    pub allreduce_ms: f64,
    /// Step, then allreduce.
    pub sequential_ms: f64,
    /// Allreduce started, step, wait.
    pub overlapped_ms: f64,
}

/// Combines every rank's overlap times.
pub fn overlap_report(spec: &str, per_rank: &[[Vec<Duration>; 4]]) -> OverlapReport {
    let col = |i: usize| slowest(&per_rank.iter().map(|x| x[i].as_slice()).collect::<Vec<_>>());
    OverlapReport {
        algo: spec.into(),
        compute_ms: col(0),
        allreduce_ms: col(1),
        sequential_ms: col(2),
        overlapped_ms: col(3),
    }
}

/// The algorithm the overlap measurement uses: SparDL when selected, else
/// the first selected one.
pub fn overlap_algorithm(algos: &[String]) -> Option<String> {
    algos
        .iter()
        .find(|a| a.split(':').next() == Some("spardl"))
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

/// The dense oracle of a run: the inputs summed in `f64`, and which
/// coordinates any rank touched.
#[derive(Debug, Clone)]
pub struct Oracle {
    /// The sum of the inputs.
    pub sum: Vec<f64>,
    /// Whether some rank holds an entry at each coordinate.
    pub touched: Vec<bool>,
}

impl Oracle {
    /// The exact profile of `ins` (the union from the touched coordinates).
    pub fn profile(&self, ins: &[SparseVec<f32>]) -> Profile {
        Profile {
            p: ins.len(),
            n: ins[0].dim(),
            value_bytes: 4,
            k_max: ins.iter().map(SparseVec::nnz).max().unwrap_or(0),
            k_sum: ins.iter().map(SparseVec::nnz).sum(),
            union: self.touched.iter().filter(|&&x| x).count(),
        }
    }
    /// The oracle of `ins`.
    pub fn of(ins: &[SparseVec<f32>]) -> Self {
        let n = ins[0].dim();
        let (mut sum, mut touched) = (vec![0.0f64; n], vec![false; n]);
        for v in ins {
            for (i, x) in v.iter() {
                sum[i as usize] += x as f64;
                touched[i as usize] = true;
            }
        }
        Self { sum, touched }
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

/// Combines every rank's summaries into rows: traffic maxima over ranks,
/// the median over calls of the slowest rank's time, the error of rank 0's
/// last result (`results`, with `auto`'s choice) against the dense oracle.
/// Every rank's result digest must equal rank 0's.
///
/// # Errors
/// [`Error::Disagreement`] if two ranks hold different results.
pub fn report(
    ins: &[SparseVec<f32>],
    oracle: &Oracle,
    algos: &[String],
    k: usize,
    results: &[RankMeasure],
    per_rank: &[(Vec<Summary>, Vec<Duration>, Traffic)],
) -> Result<AllreduceReport> {
    let p = ins.len();
    let profile = oracle.profile(ins);
    let oracle = &oracle.sum;
    let mut rows = Vec::new();
    for (i, spec) in algos.iter().enumerate() {
        let algo = build(spec, k)?;
        let measure = &results[i];
        let m = |r: usize| &per_rank[r].0[i];
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
        dense_ms: slowest(&per_rank.iter().map(|x| x.1.as_slice()).collect::<Vec<_>>()),
        dense_algo: "dense_ring".into(),
        dense_bytes_recv_max: per_rank.iter().map(|x| x.2.bytes_recv).max().unwrap_or(0),
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

/// The benchmark on the thread transport: `ranks` threads in this process.
///
/// # Errors
/// Invalid parameters; the algorithms' errors.
pub fn run_threads(a: &AllreduceArgs) -> Result<AllreduceReport> {
    let ins = inputs(a)?;
    let k = ins[0].nnz().max(1);
    let algos = selection(a, k)?;
    let oracle = Oracle::of(&ins);
    let profile = oracle.profile(&ins);
    let barrier = std::sync::Barrier::new(a.ranks);
    let bar = std::sync::Mutex::new(Progress::new(a.ranks as u64, "ranks done"));
    let per_rank = sparse_coll::ThreadCluster::new(a.ranks)
        .timeout(Duration::from_secs(120))
        .run(|t| {
            let wait = |_: &mut sparse_coll::ThreadTransport| {
                barrier.wait();
                Ok(())
            };
            let v = &ins[t.rank()];
            let res = run_rank(t, v, &profile, &algos, k, a.reps, &wait, None)?;
            let over = match overlap_algorithm(&algos) {
                Some(spec) => Some(run_overlap(t, v, &spec, k, a.reps, &wait)?),
                None => None,
            };
            bar.lock().expect("progress lock").inc();
            Ok((res, over))
        })
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    bar.into_inner().expect("progress lock").finish();
    let summaries: Vec<(Vec<Summary>, Vec<Duration>, Traffic)> = per_rank
        .iter()
        .map(|((m, d, t), _)| (m.iter().map(Summary::of).collect(), d.clone(), *t))
        .collect();
    let mut rep = report(&ins, &oracle, &algos, k, &per_rank[0].0.0, &summaries)?;
    if let Some(spec) = overlap_algorithm(&algos) {
        let over: Vec<[Vec<Duration>; 4]> = per_rank
            .into_iter()
            .map(|(_, o)| o.expect("measured on every rank"))
            .collect();
        rep.overlap = Some(overlap_report(&spec, &over));
    }
    Ok(rep)
}

/// The benchmark on MPI (feature `mpi`): every rank of `MPI_COMM_WORLD`
/// runs [`run_rank`] with `MPI_Barrier` between calls, then MPICH's own
/// dense `MPI_Allreduce` on the same data as a baseline row
/// (`mpi_allreduce`, whose traffic MPI does not expose). Summaries are
/// gathered to rank 0, which returns the report; other ranks return `None`.
/// `a.ranks` is ignored: the world size is the rank count.
///
/// # Errors
/// MPI already initialized; invalid parameters; the algorithms' errors.
#[cfg(feature = "mpi")]
pub fn run_mpi(a: &AllreduceArgs) -> Result<Option<AllreduceReport>> {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    use sparse_coll::MpiTransport;
    use sparse_coll::dense::bruck_allgather;

    // The overlap measurement runs MPI calls on a progress thread.
    let (universe, level) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or_else(|| {
            Error::Transport {
                rank: 0,
                detail: "MPI was already initialized".into(),
            }
        })?;
    if level < mpi::Threading::Serialized {
        return Err(Error::Transport {
            rank: 0,
            detail: format!("MPI provides only {level:?}; non-blocking calls need Serialized"),
        });
    }
    MpiTransport::abort_on_panic();
    let mut t = MpiTransport::new(universe.world());
    let a = AllreduceArgs {
        ranks: t.size(),
        ..a.clone()
    };
    let (p, r) = (t.size(), t.rank());
    let ins = inputs(&a)?;
    let k = ins[0].nnz().max(1);
    let algos = selection(&a, k)?;
    let oracle = Oracle::of(&ins);
    let profile = oracle.profile(&ins);
    // The floors of a sparse call, bare MPI_Allgathers timed after each
    // one: of the call's own bytes (each rank sending the largest share any
    // rank received from one peer), and of the sparse input's pairs (a u32
    // index and an f32 value each, padded to the largest rank's count).
    let mut most = [0u64];
    t.comm().all_reduce_into(
        &[ins[r].nnz() as u64],
        &mut most[..],
        SystemOperation::max(),
    );
    let pairs = vec![0u8; 8 * most[0] as usize];
    let (mut own, mut own_gathered) = (Vec::new(), Vec::new());
    let mut gathered = vec![0u8; pairs.len() * p];
    let mut floor = |t: &mut MpiTransport, recv: u64| -> Result<[Duration; 2]> {
        let mut share = [0u64];
        t.comm().all_reduce_into(
            &[recv.div_ceil((p as u64 - 1).max(1))],
            &mut share[..],
            SystemOperation::max(),
        );
        own.resize(share[0] as usize, 0u8);
        own_gathered.resize(own.len() * p, 0u8);
        t.comm().barrier();
        let start = Instant::now();
        t.comm().all_gather_into(&own[..], &mut own_gathered[..]);
        let own_time = start.elapsed();
        t.comm().barrier();
        let start = Instant::now();
        t.comm().all_gather_into(&pairs[..], &mut gathered[..]);
        Ok([own_time, start.elapsed()])
    };
    let (measures, dense_times, dense_traffic) = run_rank(
        &mut t,
        &ins[r],
        &profile,
        &algos,
        k,
        a.reps,
        &|t: &mut MpiTransport| {
            t.comm().barrier();
            Ok(())
        },
        Some(&mut floor),
    )?;
    let barrier = |t: &mut MpiTransport| {
        t.comm().barrier();
        Ok(())
    };
    let over_algo = overlap_algorithm(&algos);
    let over = match &over_algo {
        Some(spec) => Some(run_overlap(&mut t, &ins[r], spec, k, a.reps, &barrier)?),
        None => None,
    };
    // MPICH's MPI_Allreduce on the dense gradient.
    let dense_in = ins[r].to_dense();
    let mut sum = vec![0.0f32; a.n];
    t.comm()
        .all_reduce_into(&dense_in[..], &mut sum[..], SystemOperation::sum());
    let mut mpi_times = Vec::with_capacity(a.reps);
    for _ in 0..a.reps {
        t.comm().barrier();
        let start = Instant::now();
        t.comm()
            .all_reduce_into(&dense_in[..], &mut sum[..], SystemOperation::sum());
        mpi_times.push(start.elapsed());
    }
    let mut mine = encode_summaries(
        &measures.iter().map(Summary::of).collect::<Vec<_>>(),
        &dense_times,
        dense_traffic,
    );
    let nanos = |d: &Duration| (d.as_nanos() as u64).to_le_bytes();
    for list in over.iter().flatten() {
        mine.extend(list.iter().flat_map(nanos));
    }
    mine.extend(mpi_times.iter().flat_map(nanos));
    let all = bruck_allgather(&mut t, &mine)?;
    if r != 0 {
        return Ok(None);
    }
    let lists = 1 + if over.is_some() { 4 } else { 0 };
    let tail = 8 * a.reps * lists;
    let mut per_rank = Vec::with_capacity(p);
    let mut times_per_rank: Vec<Vec<Vec<Duration>>> = Vec::with_capacity(p);
    for b in &all {
        let split = b
            .len()
            .checked_sub(tail)
            .ok_or_else(|| Error::corrupt("summaries", "truncated"))?;
        per_rank.push(decode_summaries(&b[..split])?);
        let times: Vec<Duration> = b[split..]
            .chunks_exact(8)
            .map(|c| Duration::from_nanos(u64::from_le_bytes(c.try_into().expect("8"))))
            .collect();
        times_per_rank.push(times.chunks(a.reps).map(<[Duration]>::to_vec).collect());
    }
    let mut rep = report(&ins, &oracle, &algos, k, &measures, &per_rank)?;
    if let Some(spec) = over_algo {
        let over: Vec<[Vec<Duration>; 4]> = times_per_rank
            .iter()
            .map(|l| [l[0].clone(), l[1].clone(), l[2].clone(), l[3].clone()])
            .collect();
        rep.overlap = Some(overlap_report(&spec, &over));
    }
    let list = |from_end: usize| -> Vec<Vec<Duration>> {
        times_per_rank
            .iter()
            .map(|l| l[l.len() - 1 - from_end].clone())
            .collect()
    };
    let mpi_per_rank = list(0);
    let mpi_ms = slowest(&mpi_per_rank.iter().map(Vec::as_slice).collect::<Vec<_>>());
    // The pairs' allgather of every call of every row, in the same order on
    // every rank.
    let gather_per_rank: Vec<Vec<Duration>> = per_rank
        .iter()
        .map(|(sums, _, _)| {
            sums.iter()
                .flat_map(|m| m.floors.iter().map(|f| f[1]))
                .collect()
        })
        .collect();
    let gather_ms = slowest(
        &gather_per_rank
            .iter()
            .map(Vec::as_slice)
            .collect::<Vec<_>>(),
    );
    // The project's ring, as its own row (the header's dense time is the
    // faster of the two).
    rep.rows.push(AllreduceRow {
        algo: "dense_ring".into(),
        params: String::new(),
        chose: None,
        lossless: true,
        result_nnz: sum.iter().filter(|x| **x != 0.0).count(),
        bytes_recv_max: Some(rep.dense_bytes_recv_max),
        bytes_sent_max: Some(rep.dense_bytes_recv_max),
        msgs_max: None,
        rounds: None,
        model_bytes: sparse_core::cost::ring_allreduce(p, a.n).bytes(),
        paper_bytes: None,
        ms: rep.dense_ms,
        floor_ms: None,
        max_abs_err: max_err(&sum, &oracle.sum),
    });
    rep.rows.push(AllreduceRow {
        algo: "mpi_allgather".into(),
        params: format!("bytes={}", pairs.len()),
        chose: None,
        lossless: false,
        result_nnz: 0,
        bytes_recv_max: Some((pairs.len() * (p - 1)) as u64),
        bytes_sent_max: Some((pairs.len() * (p - 1)) as u64),
        msgs_max: None,
        rounds: None,
        model_bytes: (pairs.len() * (p - 1)) as f64,
        paper_bytes: None,
        ms: gather_ms,
        floor_ms: None,
        max_abs_err: f64::NAN,
    });
    if mpi_ms < rep.dense_ms {
        rep.dense_ms = mpi_ms;
        rep.dense_algo = "mpi_allreduce".into();
    }
    rep.rows.push(AllreduceRow {
        algo: "mpi_allreduce".into(),
        params: String::new(),
        chose: None,
        lossless: true,
        result_nnz: sum.iter().filter(|x| **x != 0.0).count(),
        bytes_recv_max: None,
        bytes_sent_max: None,
        msgs_max: None,
        rounds: None,
        model_bytes: sparse_core::cost::rabenseifner_allreduce(p, a.n).bytes(),
        paper_bytes: None,
        ms: mpi_ms,
        floor_ms: None,
        max_abs_err: max_err(&sum, &oracle.sum),
    });
    Ok(Some(rep))
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
