//! The simulated transport: the real code of P ranks, run as threads of
//! [`SimCluster`], over a transport ([`SimTransport`]) that records what
//! each rank sends, receives and computes as a [`Trace`];
//! `sparse_coll::sim` replays the traces over a network model
//! (`sim::replay`, `SimRun::timeline`), and its module doc explains why the
//! run and the timing are two steps. Public as `sparse_coll::sim::*` and
//! `sparse_coll::{SimCluster, SimTransport}`.

use super::{Endpoint, EndpointState, Traffic, Transport};
use sparse_core::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// A simulated cluster of `size` ranks: see the module doc of
/// `sparse_coll::sim`.
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

/// The most ranks a [`SimCluster`] runs: each is a thread of this process
/// (with a 1 MiB stack reserved), and a mailbox and a flag of shared memory
/// each; past this the operating system's limits on threads (Linux's
/// `threads-max` and `pid_max` are typically tens to hundreds of
/// thousands) refuse them anyway.
pub const MAX_RANKS: usize = 1 << 16;

impl SimCluster {
    /// `size` ranks, computation off, a 600 s receive timeout (a thousand
    /// ranks share this machine's cores). Nothing proportional to `size` is
    /// allocated before [`SimCluster::run`].
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `ranks` for `size == 0` or above
    /// [`MAX_RANKS`].
    pub fn new(size: usize) -> Result<Self> {
        if size == 0 || size > MAX_RANKS {
            return Err(Error::invalid(
                "ranks",
                format!(
                    "a simulated cluster of {size} ranks: it runs 1 to {MAX_RANKS} ranks, \
                     a thread each: ask for fewer"
                ),
            ));
        }
        Ok(Self {
            size,
            compute: Compute::Off,
            timeout: Duration::from_secs(600),
        })
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
    /// that rank's [`Error::Panicked`] (only the run's first is printed);
    /// a rank that returns closes its mailbox, so peers still waiting on it
    /// get [`Error::PeerFailed`].
    ///
    /// # Errors
    /// [`Error::Transport`] if the operating system refuses a thread (the
    /// ranks already started fail with [`Error::PeerFailed`]).
    pub fn run<T: Send, F>(&self, f: F) -> Result<SimRun<T>>
    where
        F: Fn(&mut SimTransport) -> Result<T> + Sync,
    {
        let shared = Arc::new(Shared::new(self.size));
        let panics = super::RunPanics::default();
        let outs: Vec<Result<(Result<T>, Traffic, Trace)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.size)
                .map(|rank| {
                    let mut t = SimTransport::new(rank, self, Arc::clone(&shared));
                    let (f, panics) = (&f, &panics);
                    std::thread::Builder::new()
                        .name(format!("sim-rank-{rank}"))
                        .stack_size(1 << 20)
                        .spawn_scoped(scope, move || t.run_rank(panics, f))
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
    /// Its rank, traffic and buffer pool: messages are copies in pooled
    /// buffers, handed to the receiver.
    state: EndpointState,
    shared: Arc<Shared>,
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
            state: EndpointState::new(rank, c.size),
            shared,
            trace: Vec::new(),
            compute: c.compute,
            cpu_mark: None,
            timeout: c.timeout,
            abandoned: false,
        }
    }

    fn run_rank<T>(
        &mut self,
        panics: &super::RunPanics,
        f: &(impl Fn(&mut SimTransport) -> Result<T> + Sync),
    ) -> (Result<T>, Traffic, Trace) {
        let rank = self.rank();
        self.cpu_mark = thread_cpu_time();
        let result = super::catch_rank(panics, rank, || f(self));
        self.computed();
        self.shared.close(rank);
        (result, self.traffic(), std::mem::take(&mut self.trace))
    }

    /// Marks this point of the rank's code: the replay reports the rank's
    /// simulated time here (`Timeline::marks`), so a caller can time one
    /// call among many.
    pub fn mark(&mut self) {
        self.computed();
        self.trace.push(Op::Mark);
    }

    /// Idles this rank for `secs` simulated seconds (a training step's
    /// computation between calls, a benchmark's pause before a timed call):
    /// recorded as computation, whatever [`Compute`] says, after the
    /// computation measured since the last call. A link's token bucket
    /// refills meanwhile. Nothing for zero; a negative or non-finite time
    /// is an error.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a negative or non-finite `secs`.
    pub fn idle(&mut self, secs: f64) -> Result<()> {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(Error::invalid(
                "secs",
                format!("an idle time of {secs} s is not a finite, non-negative time"),
            ));
        }
        self.computed();
        if secs > 0.0 {
            self.trace.push(Op::Compute(secs));
        }
        Ok(())
    }

    /// Records the computation since the last call or record, where
    /// measured, and starts the next measure here (so that a mark between
    /// two calls does not count the time before it twice).
    fn computed(&mut self) {
        if let Compute::Measured { factor } = self.compute
            && let (Some(then), Some(now)) = (self.cpu_mark, thread_cpu_time())
        {
            let secs = now.saturating_sub(then).as_secs_f64() * factor;
            if secs > 0.0 {
                self.trace.push(Op::Compute(secs));
            }
            self.cpu_mark = Some(now);
        }
    }

    /// Ends a communication call, recording it as `op`: its own CPU time
    /// is the network's, not computation.
    fn end(&mut self, op: Op) {
        self.trace.push(op);
        if self.compute != Compute::Off {
            self.cpu_mark = thread_cpu_time();
        }
    }

    /// Puts a copy of `data` in `to`'s mailbox.
    fn deliver(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.state.peer(to)?;
        let rank = self.rank();
        if self.shared.gone[to].load(Ordering::SeqCst) {
            return Err(Error::PeerFailed { rank, peer: to });
        }
        let mut msg = self.state.pool().take_fitting(data.len());
        msg.clear();
        msg.extend_from_slice(data);
        self.shared.lock(to).entry(rank).or_default().push_back(msg);
        self.shared.boxes[to].arrived.notify_all();
        Ok(())
    }

    /// Takes the next message from `from` out of this rank's mailbox,
    /// waiting at most the timeout.
    fn collect(&mut self, from: usize) -> Result<Vec<u8>> {
        self.state.peer(from)?;
        let rank = self.rank();
        let deadline = Instant::now() + self.timeout;
        let mailbox = &self.shared.boxes[rank];
        let mut queues = self.shared.lock(rank);
        loop {
            if let Some(msg) = queues.get_mut(&from).and_then(VecDeque::pop_front) {
                return Ok(msg);
            }
            if self.shared.gone[from].load(Ordering::SeqCst) {
                return Err(Error::PeerFailed { rank, peer: from });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    rank,
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

impl Endpoint for SimTransport {
    fn state(&self) -> &EndpointState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut EndpointState {
        &mut self.state
    }
    /// Records the computation before the call; refuses a call after
    /// [`Transport::abandon`].
    fn begin(&mut self) -> Result<()> {
        self.computed();
        if self.abandoned {
            return Err(Error::Transport {
                rank: self.rank(),
                detail: "abandoned after a failed collective".into(),
            });
        }
        Ok(())
    }
    fn post(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.deliver(to, data)?;
        self.end(Op::Send {
            to,
            bytes: data.len(),
        });
        Ok(())
    }
    fn fetch(&mut self, from: usize) -> Result<Vec<u8>> {
        let got = self.collect(from)?;
        self.end(Op::Recv { from });
        Ok(got)
    }
    fn swap(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.deliver(to, data)?;
        let got = self.collect(from)?;
        self.end(Op::Exchange {
            to,
            bytes: data.len(),
            from,
        });
        Ok(got)
    }
    /// Closes this rank's mailbox for its peers: their waits on it end with
    /// [`Error::PeerFailed`], and its own later calls fail.
    fn close(&mut self) {
        self.abandoned = true;
        self.shared.close(self.rank());
    }
}
