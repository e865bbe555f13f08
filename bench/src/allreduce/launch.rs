//! How the ranks of `sparse-bench allreduce` run and meet: the only part
//! in which the thread and MPI runs differ. [`Launch`] starts the ranks
//! and brings every rank's bytes to rank 0; [`RankHooks`] holds what a
//! transport adds to one rank's run (its barrier, and under MPI the floors
//! timed after each call, MPICH's own allreduce and their rows).

use super::{AllreduceReport, Oracle, RankTimes, Setup};
use crate::Progress;
use sparse_coll::Transport;
use sparse_core::{Result, SparseVec};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

/// What a transport adds to one rank's run of the benchmark.
pub trait RankHooks<T>: Send {
    /// Readies the hooks for the run `s` (before anything is timed).
    /// Nothing by default.
    fn prepare(&mut self, _s: &Setup) {}

    /// Waits until every rank is here (before each timed call).
    ///
    /// # Errors
    /// The transport's errors.
    fn barrier(&mut self, t: &mut T) -> Result<()>;

    /// The floor of a sparse call that received `recv` bytes on this rank,
    /// timed right after it, where the transport has one: the times of an
    /// allgather of as many bytes, and of one of the input's pairs. A
    /// collective call. None by default.
    ///
    /// # Errors
    /// The transport's errors.
    fn floor(&mut self, _t: &mut T, _recv: u64) -> Result<Option<[Duration; 2]>> {
        Ok(None)
    }

    /// The transport's own baselines on this rank's input `v`, after the
    /// sparse rows: lists of `reps` call times each. None by default.
    ///
    /// # Errors
    /// The transport's errors.
    fn baselines(
        &mut self,
        _t: &mut T,
        _v: &SparseVec<f32>,
        _reps: usize,
    ) -> Result<Vec<Vec<Duration>>> {
        Ok(Vec::new())
    }

    /// On rank 0, adds the transport's own rows to `rep` from every rank's
    /// times (the baselines are the last lists of each). Nothing by
    /// default.
    fn rows(&self, _rep: &mut AllreduceReport, _per_rank: &[RankTimes], _oracle: &Oracle) {}
}

/// What [`Launch::gather`] returns on rank 0.
#[derive(Debug)]
pub struct Gathered<R, H> {
    /// Rank 0's own result.
    pub mine: R,
    /// Rank 0's hooks, after the run.
    pub hooks: H,
    /// Every rank's bytes, by rank.
    pub all: Vec<Vec<u8>>,
}

/// How the ranks of a run start and meet.
pub trait Launch {
    /// The transport each rank talks over.
    type T: Transport + Send;
    /// What the transport adds to each rank's run.
    type Hooks: RankHooks<Self::T>;

    /// Ranks in the run.
    fn ranks(&self) -> usize;

    /// The CPUs each rank has to itself, on rank 0's machine: what decides
    /// whether a rank's computation can overlap its allreduce, which needs
    /// a CPU for each at once ([`crate::allreduce::OverlapReport`]).
    fn cpus_per_rank(&self) -> f64;

    /// Runs `job` on every rank with that rank's hooks; on rank 0 returns
    /// its result, its hooks and every rank's bytes, elsewhere `None`.
    ///
    /// # Errors
    /// Any rank's error; the transport's.
    #[allow(clippy::type_complexity)]
    fn gather<R: Send>(
        &self,
        job: &(dyn Fn(&mut Self::T, &mut Self::Hooks) -> Result<(R, Vec<u8>)> + Sync),
    ) -> Result<Option<Gathered<R, Self::Hooks>>>;
}

/// Ranks as threads of this process, on [`sparse_coll::ThreadCluster`]
/// (two minutes' timeout), with a progress bar of ranks done.
#[derive(Debug, Clone, Copy)]
pub struct Threads {
    ranks: usize,
}

impl Threads {
    /// `ranks` threads.
    pub fn new(ranks: usize) -> Self {
        Self { ranks }
    }
}

/// A thread's hooks: a barrier shared by the threads.
#[derive(Debug, Clone)]
pub struct ThreadHooks(Arc<Barrier>);

impl<T> RankHooks<T> for ThreadHooks {
    fn barrier(&mut self, _t: &mut T) -> Result<()> {
        self.0.wait();
        Ok(())
    }
}

impl Launch for Threads {
    type T = sparse_coll::ThreadTransport;
    type Hooks = ThreadHooks;

    fn ranks(&self) -> usize {
        self.ranks
    }

    /// The threads share this process's CPUs.
    fn cpus_per_rank(&self) -> f64 {
        crate::allreduce::allowed_cpus() as f64 / self.ranks as f64
    }

    fn gather<R: Send>(
        &self,
        job: &(dyn Fn(&mut Self::T, &mut Self::Hooks) -> Result<(R, Vec<u8>)> + Sync),
    ) -> Result<Option<Gathered<R, Self::Hooks>>> {
        let barrier = Arc::new(Barrier::new(self.ranks));
        let bar = Mutex::new(Progress::new(self.ranks as u64, "ranks done"));
        let per_rank = sparse_coll::ThreadCluster::new(self.ranks)
            .timeout(Duration::from_secs(120))
            .run(|t| {
                let mut hooks = ThreadHooks(barrier.clone());
                let (mine, bytes) = job(t, &mut hooks)?;
                bar.lock().expect("progress lock").inc();
                Ok((mine, hooks, bytes))
            })
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        bar.into_inner().expect("progress lock").finish();
        let mut all = Vec::with_capacity(per_rank.len());
        let mut first = None;
        for (mine, hooks, bytes) in per_rank {
            all.push(bytes);
            first.get_or_insert((mine, hooks));
        }
        let (mine, hooks) = first.expect("at least one rank");
        Ok(Some(Gathered { mine, hooks, all }))
    }
}

#[cfg(feature = "mpi")]
pub use mpi_launch::{Mpi, MpiHooks};

#[cfg(feature = "mpi")]
mod mpi_launch {
    use super::{Gathered, Launch, RankHooks};
    use crate::allreduce::{
        AllreduceReport, AllreduceRow, Oracle, RankTimes, Setup, max_err, slowest,
    };
    use mpi::collective::SystemOperation;
    use mpi::topology::Communicator;
    use sparse_coll::{MpiTransport, MpiWait, Transport};
    use sparse_core::{Error, Result, SparseVec};
    use std::time::{Duration, Instant};

    /// The ranks of `MPI_COMM_WORLD`, one per process (MPI initialized
    /// with `Threading::Multiple`: the overlap measurement runs MPI calls on
    /// a progress thread).
    pub struct Mpi {
        universe: mpi::environment::Universe,
    }

    impl std::fmt::Debug for Mpi {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Mpi").finish_non_exhaustive()
        }
    }

    impl Mpi {
        /// Initializes MPI and makes a panic abort the job.
        ///
        /// # Errors
        /// MPI already initialized, or without `Threading::Serialized`.
        pub fn init() -> Result<Self> {
            let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
                .ok_or_else(|| Error::Transport {
                    rank: 0,
                    detail: "MPI was already initialized".into(),
                })?;
            if level < mpi::Threading::Serialized {
                return Err(Error::Transport {
                    rank: 0,
                    detail: format!(
                        "MPI provides only {level:?}; non-blocking calls need Serialized"
                    ),
                });
            }
            MpiTransport::abort_on_panic();
            Ok(Self { universe })
        }
    }

    impl Launch for Mpi {
        type T = MpiTransport;
        type Hooks = MpiHooks;

        fn ranks(&self) -> usize {
            self.universe.world().size() as usize
        }

        /// A rank bound to CPUs of its own (an affinity mask narrower than
        /// the machine's online CPUs, as `mpiexec -bind-to` or
        /// `scripts/netns-cluster.sh --bind` set) has them to itself;
        /// unbound ranks share the machine with the node's other ranks
        /// (`MPI_LOCALNRANKS`, which MPICH's launcher sets; 1 without it).
        fn cpus_per_rank(&self) -> f64 {
            let allowed = crate::allreduce::allowed_cpus();
            let bound = crate::allreduce::online_cpus().is_some_and(|online| allowed < online);
            let local = std::env::var("MPI_LOCALNRANKS")
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(1);
            allowed as f64 / if bound { 1.0 } else { local as f64 }
        }

        fn gather<R: Send>(
            &self,
            job: &(dyn Fn(&mut Self::T, &mut Self::Hooks) -> Result<(R, Vec<u8>)> + Sync),
        ) -> Result<Option<Gathered<R, Self::Hooks>>> {
            let mut t = MpiTransport::new(self.universe.world()).with_wait(MpiWait::from_env()?)?;
            let mut hooks = MpiHooks::default();
            let (mine, bytes) = job(&mut t, &mut hooks)?;
            let all = sparse_coll::dense::bruck_allgather(&mut t, &bytes)?;
            Ok((t.rank() == 0).then_some(Gathered { mine, hooks, all }))
        }
    }

    /// One MPI rank's hooks: `MPI_Barrier`; the floors, bare
    /// `MPI_Allgather`s timed after each sparse call, of the call's own
    /// bytes (each rank sending the largest share any rank received from
    /// one peer) and of the sparse input's pairs (a u32 index and an f32
    /// value each, padded to the largest rank's count); MPICH's
    /// `MPI_Allreduce` on the dense gradient.
    #[derive(Debug, Default)]
    pub struct MpiHooks {
        own: Vec<u8>,
        own_gathered: Vec<u8>,
        pairs: Vec<u8>,
        gathered: Vec<u8>,
        /// The last `MPI_Allreduce`'s sum.
        sum: Vec<f32>,
        /// Idle time before each timed call ([`Setup::gap`]).
        gap: Duration,
        /// Idle time before the first call ([`Setup::settle`]).
        settle: Duration,
    }

    impl RankHooks<MpiTransport> for MpiHooks {
        fn prepare(&mut self, s: &Setup) {
            self.pairs = vec![0u8; 8 * s.profile.k_max];
            self.gathered = vec![0u8; self.pairs.len() * s.profile.p];
            self.gap = s.gap;
            self.settle = s.settle;
        }

        fn barrier(&mut self, t: &mut MpiTransport) -> Result<()> {
            t.barrier();
            Ok(())
        }

        fn floor(&mut self, t: &mut MpiTransport, recv: u64) -> Result<Option<[Duration; 2]>> {
            let p = t.size();
            let mut share = [0u64];
            t.all_reduce_into(
                &[recv.div_ceil((p as u64 - 1).max(1))],
                &mut share[..],
                SystemOperation::max(),
            );
            self.own.resize(share[0] as usize, 0u8);
            self.own_gathered.resize(self.own.len() * p, 0u8);
            t.barrier();
            let start = Instant::now();
            t.all_gather_into(&self.own[..], &mut self.own_gathered[..]);
            let own_time = start.elapsed();
            t.barrier();
            let start = Instant::now();
            t.all_gather_into(&self.pairs[..], &mut self.gathered[..]);
            Ok(Some([own_time, start.elapsed()]))
        }

        fn baselines(
            &mut self,
            t: &mut MpiTransport,
            v: &SparseVec<f32>,
            reps: usize,
        ) -> Result<Vec<Vec<Duration>>> {
            let dense_in = v.to_dense();
            self.sum = vec![0.0f32; dense_in.len()];
            let settle = self.settle;
            crate::allreduce::settle(t, settle, self)?;
            t.all_reduce_into(&dense_in[..], &mut self.sum[..], SystemOperation::sum());
            let mut times = Vec::with_capacity(reps);
            for _ in 0..reps {
                crate::allreduce::idle(self.gap);
                t.barrier();
                let start = Instant::now();
                t.all_reduce_into(&dense_in[..], &mut self.sum[..], SystemOperation::sum());
                times.push(start.elapsed());
            }
            Ok(vec![times])
        }

        fn rows(&self, rep: &mut AllreduceReport, per_rank: &[RankTimes], oracle: &Oracle) {
            let (p, n) = (rep.profile.p, rep.profile.n);
            let result_nnz = self.sum.iter().filter(|x| **x != 0.0).count();
            let err = max_err(&self.sum, &oracle.sum);
            let row = |algo: &str, lossless: bool, model_bytes: f64, ms: f64| AllreduceRow {
                algo: algo.into(),
                params: String::new(),
                chose: None,
                lossless,
                result_nnz,
                bytes_recv_max: None,
                bytes_sent_max: None,
                msgs_max: None,
                rounds: None,
                model_bytes,
                paper_bytes: None,
                ms,
                floor_ms: None,
                max_abs_err: err,
            };
            // The project's ring, as its own row (the header's dense time
            // is the faster of the two).
            let ring = sparse_core::cost::ring_allreduce(p, n).bytes();
            rep.rows.push(AllreduceRow {
                bytes_recv_max: Some(rep.dense_bytes_recv_max),
                bytes_sent_max: Some(rep.dense_bytes_recv_max),
                ..row("dense_ring", true, ring, rep.dense_ms)
            });
            // The pairs' allgather of every call of every row, in the same
            // order on every rank.
            let gather: Vec<Vec<Duration>> = per_rank
                .iter()
                .map(|r| {
                    let floors = r.summaries.iter().flat_map(|m| &m.floors);
                    floors.map(|f| f[1]).collect()
                })
                .collect();
            let gathered = (self.pairs.len() * (p - 1)) as u64;
            rep.rows.push(AllreduceRow {
                params: format!("bytes={}", self.pairs.len()),
                result_nnz: 0,
                bytes_recv_max: Some(gathered),
                bytes_sent_max: Some(gathered),
                max_abs_err: f64::NAN,
                ..row("mpi_allgather", false, gathered as f64, lists_ms(&gather))
            });
            let mpi: Vec<Vec<Duration>> = per_rank
                .iter()
                .map(|r| r.lists.last().cloned().unwrap_or_default())
                .collect();
            let mpi_ms = lists_ms(&mpi);
            if mpi_ms < rep.dense_ms {
                rep.dense_ms = mpi_ms;
                rep.dense_algo = "mpi_allreduce".into();
            }
            let model = sparse_core::cost::rabenseifner_allreduce(p, n).bytes();
            rep.rows.push(row("mpi_allreduce", true, model, mpi_ms));
        }
    }

    /// [`slowest`] of owned lists.
    fn lists_ms(per_rank: &[Vec<Duration>]) -> f64 {
        slowest(&per_rank.iter().map(Vec::as_slice).collect::<Vec<_>>())
    }
}
