//! The MPI transport (feature `mpi`): the same collectives over MPICH.

use super::wait::{MPI_WAIT_ENV, MpiWait};
use super::{Endpoint, EndpointState, Transport};
use mpi::Tag;
use mpi::collective::CommunicatorCollectives;
use mpi::point_to_point::{Destination, Source, Status};
use mpi::request::{Request, Scope};
use mpi::topology::{Communicator, SimpleCommunicator};
use sparse_core::{Error, Result};

/// The tag of every message this transport sends: collectives on one
/// communicator run one at a time, in the same order on every rank, and
/// messages between two ranks arrive in the order they were sent (MPI's
/// non-overtaking rule), which is all the [`Transport`] contract asks.
const TAG: Tag = 0x5ca1;

/// The tag of the empty message a rank sends every other rank when it
/// abandons the transport ([`Transport::abandon`]).
const POISON: Tag = 0x5ca2;

/// A [`Transport`] over an MPI communicator (usually `MPI_COMM_WORLD`).
///
/// Messages of any length, zero included, travel as `MPI_BYTE`s (those
/// of `MAX_MESSAGE` bytes (1 GiB) or more in pieces, as MPI counts are `int`s); a
/// receive probes first (`MPI_Improbe`), so sizes need not be known in
/// advance. [`Transport::exchange`] posts a non-blocking send, then
/// receives, then waits on the send, so rings and shifts never deadlock.
/// Traffic is counted as on the thread transport.
///
/// # Failures
/// The transport talks on a duplicate of the communicator it was given
/// ([`MpiTransport::new`] is collective), so its messages never match
/// anyone else's.
///
/// A rank whose collective fails after the entry agreement (a corrupt
/// message, a refused allocation) abandons the transport
/// ([`Transport::abandon`]): it sends every other rank an empty message on
/// a tag of its own and fails every later call. Every wait of this
/// transport (for a message, for a send to complete) also watches for
/// those messages, so a peer waiting on a failed rank, directly or
/// through others, fails with [`Error::PeerFailed`] and abandons in turn,
/// instead of waiting forever. Sends go from a copy the transport owns:
/// one still pending when its destination has abandoned is left to MPI
/// unfinished, its copy never freed. A peer that had already finished the failed call keeps its result,
/// which is complete and exact (it received everything it needed), and
/// fails at its next call. `MPI_Finalize` may then warn of the
/// unmatched messages.
///
/// A rank that dies (killed, or exits without abandoning) still leaves its
/// peers waiting: MPI receives have no timeout. Programs therefore install
/// [`MpiTransport::abort_on_panic`], which turns a panic on any rank into
/// `MPI_Abort` of the whole job, and run under `mpiexec` with
/// `MPIEXEC_TIMEOUT` as a backstop.
pub struct MpiTransport {
    /// Always `Some` but in `drop`, which leaks it after a failure.
    comm: Option<SimpleCommunicator>,
    /// Its rank and size (the communicator's), traffic and buffer pool.
    state: EndpointState,
    /// The ranks that have abandoned the transport, this one included
    /// once it has.
    abandoned: Vec<bool>,
    /// The first rank known to have failed, once one has.
    failed: Option<usize>,
    /// The copy a send is made from (one send is in flight at a time),
    /// kept across calls.
    outgoing: Vec<u8>,
    /// The longest single MPI message (`MAX_MESSAGE`, 1 GiB).
    max_message: usize,
    /// How the waits poll ([`MpiTransport::with_wait`]).
    wait: MpiWait,
}

/// The longest message sent as one MPI message (1 GiB). MPI counts are
/// `int`s, so a message of 2 GiB or more cannot be one: a longer message
/// travels as pieces of this length, then one shorter piece (empty where
/// the length is a multiple of it), and the receiver reads pieces until a
/// short one. Messages below it, every message of the built-in algorithms
/// at ordinary sizes, are one MPI message as before.
pub const MAX_MESSAGE: usize = 1 << 30;

impl std::fmt::Debug for MpiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiTransport")
            .field("rank", &self.comm().rank())
            .field("size", &self.comm().size())
            .field("traffic", &self.traffic())
            .finish()
    }
}

impl MpiTransport {
    /// A transport over a duplicate of `comm` (`MPI_Comm_dup`: every rank
    /// of `comm` calls this together).
    pub fn new(comm: SimpleCommunicator) -> Self {
        let comm = comm.duplicate();
        let (rank, ranks) = (comm.rank() as usize, comm.size() as usize);
        Self {
            comm: Some(comm),
            state: EndpointState::new(rank, ranks),
            abandoned: vec![false; ranks],
            failed: None,
            outgoing: Vec::new(),
            max_message: MAX_MESSAGE,
            wait: MpiWait::Spin,
        }
    }

    /// The same transport waiting as `wait` says ([`MpiWait`]: polling
    /// without pause, the default, or pausing between polls: sleeping
    /// where ranks outnumber cores, yielding where a rank's own threads
    /// share its cores; or [`MpiWait::Auto`], spinning or yielding as the
    /// nodes' CPUs say). It changes only when a rank notices a message,
    /// never what it receives. Every rank of the communicator calls it
    /// together (an `MPI_Allgather` of a byte; where some rank asks for
    /// [`MpiWait::Auto`], a look at the nodes' CPUs too), and either
    /// every rank spins or every rank pauses
    /// (the pauses may differ): a spinning rank runs MPICH's blocking
    /// collectives, a pausing one the non-blocking ones, and the two
    /// never match (MPI-3.1, sec. 5.12): the job would hang in its first
    /// dense call or barrier.
    ///
    /// [`MpiWait::Auto`] yields on every rank where on some node the
    /// ranks outnumber the CPUs in the union of their affinity masks (or a
    /// CPU quota, cgroups' `cpu.max`, below it that `available_parallelism`
    /// shows a rank), and spins on every rank otherwise; it agrees with
    /// ranks that ask for the wait it chooses and disagrees with others.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] (`wait`) on every rank where some
    /// rank's wait is not valid ([`MpiWait::is_valid`]: a pause of whole
    /// microseconds, 1 us to 1 s); [`Error::Disagreement`] (`wait`, the
    /// ranks' waits) on every rank where some spin and others pause. The
    /// transport is dropped either way.
    pub fn with_wait(mut self, wait: MpiWait) -> Result<Self> {
        const SPIN: u8 = 0;
        const PAUSE: u8 = 1;
        const INVALID: u8 = 2;
        const AUTO: u8 = 3;
        let kind = match wait {
            MpiWait::Spin => SPIN,
            w if !w.is_valid() => INVALID,
            MpiWait::Auto => AUTO,
            _ => PAUSE,
        };
        let mut all = vec![0u8; self.abandoned.len()];
        self.comm().all_gather_into(&kind, &mut all[..]);
        // Every rank sees the same `all`, so all look at the nodes or none.
        let auto = if all.contains(&AUTO) && self.some_node_is_crowded() {
            (PAUSE, MpiWait::Yield)
        } else {
            (SPIN, MpiWait::Spin)
        };
        let chosen = |k: u8| if k == AUTO { auto.0 } else { k };
        let by_rank = || {
            let names = ["spin", "pause", "invalid"];
            let all: Vec<String> = all
                .iter()
                .map(|&k| match k {
                    AUTO => format!("auto ({})", auto.1),
                    k => names[usize::from(k.min(INVALID))].to_string(),
                })
                .collect();
            all.join(", ")
        };
        if all.contains(&INVALID) {
            return Err(Error::invalid(
                "wait",
                format!(
                    "by rank: {} (this rank's: {wait:?}; a pause is whole microseconds, 1 us to 1 s)",
                    by_rank()
                ),
            ));
        }
        if all.iter().any(|&k| chosen(k) != chosen(kind)) {
            return Err(Error::Disagreement {
                what: "wait",
                detail: format!(
                    "by rank: {} (every rank spins, or every rank sleeps or yields: {MPI_WAIT_ENV})",
                    by_rank()
                ),
            });
        }
        self.wait = if wait == MpiWait::Auto { auto.1 } else { wait };
        Ok(self)
    }

    /// Whether on some node the ranks of the communicator outnumber the
    /// CPUs they may run on together (the union of their affinity masks,
    /// at most a CPU quota that one of them sees): `MPI_Comm_split_type`
    /// into nodes, an `MPI_Allgather` of the CPU records within each, and
    /// one of the answers. Every rank of the communicator calls it
    /// together, and every rank gets the same answer.
    fn some_node_is_crowded(&self) -> bool {
        use super::wait::{CPU_RECORD_BYTES, cpu_record, crowded};
        let node = self.comm().split_shared(self.comm().rank());
        let mut records = vec![0u8; CPU_RECORD_BYTES * node.size() as usize];
        node.all_gather_into(&cpu_record()[..], &mut records[..]);
        let mine = u8::from(crowded(&records));
        let mut all = vec![0u8; self.abandoned.len()];
        self.comm().all_gather_into(&mine, &mut all[..]);
        all.contains(&1)
    }

    /// How this transport waits.
    pub fn wait(&self) -> MpiWait {
        self.wait
    }

    /// Completes `req` (an MPI request of the caller's, on this
    /// transport's communicator or another), polling as
    /// [`MpiTransport::wait`] says: `MPI_Wait` under [`MpiWait::Spin`],
    /// `MPI_Test` and a pause (or a yield of the core) under
    /// [`MpiWait::Sleep`] ([`MpiWait::Yield`]). It does not watch
    /// for abandoning peers: MPI's own collectives cannot be left part
    /// way, so only requests that complete are the caller's to wait on.
    pub fn complete<'a, D: ?Sized, S: Scope<'a>>(&self, req: Request<'a, D, S>) -> Status {
        if self.wait == MpiWait::Spin {
            return req.wait();
        }
        let mut req = req;
        let mut polls = 0;
        loop {
            match req.test() {
                Ok(status) => return status,
                Err(r) => req = r,
            }
            self.wait.idle(&mut polls);
        }
    }

    /// `MPI_Allreduce` on this transport's communicator, waiting as
    /// [`MpiTransport::wait`] says: the blocking call under
    /// [`MpiWait::Spin`], `MPI_Iallreduce` and [`MpiTransport::complete`]
    /// under [`MpiWait::Sleep`] and [`MpiWait::Yield`] (MPICH may then choose another algorithm
    /// than for the blocking call; it reduces in one fixed order either
    /// way).
    pub fn all_reduce_into<S, R, O>(&self, x: &S, out: &mut R, op: O)
    where
        S: ?Sized + mpi::datatype::Buffer,
        R: ?Sized + mpi::datatype::BufferMut,
        O: mpi::collective::Operation,
    {
        match self.wait {
            MpiWait::Spin => self.comm().all_reduce_into(x, out, op),
            MpiWait::Sleep(_) | MpiWait::Yield | MpiWait::Auto => mpi::request::scope(|sc| {
                self.complete(self.comm().immediate_all_reduce_into(sc, x, out, op));
            }),
        }
    }

    /// `MPI_Allgather` on this transport's communicator, waiting as
    /// [`MpiTransport::all_reduce_into`] does.
    pub fn all_gather_into<S, R>(&self, x: &S, out: &mut R)
    where
        S: ?Sized + mpi::datatype::Buffer,
        R: ?Sized + mpi::datatype::BufferMut,
    {
        match self.wait {
            MpiWait::Spin => self.comm().all_gather_into(x, out),
            MpiWait::Sleep(_) | MpiWait::Yield | MpiWait::Auto => mpi::request::scope(|sc| {
                self.complete(self.comm().immediate_all_gather_into(sc, x, out));
            }),
        }
    }

    /// `MPI_Barrier` on this transport's communicator, waiting as
    /// [`MpiTransport::wait`] says (`MPI_Ibarrier` and
    /// [`MpiTransport::complete`] under [`MpiWait::Sleep`] and
    /// [`MpiWait::Yield`]).
    pub fn barrier(&self) {
        match self.wait {
            MpiWait::Spin => self.comm().barrier(),
            MpiWait::Sleep(_) | MpiWait::Yield | MpiWait::Auto => {
                self.complete(self.comm().immediate_barrier());
            }
        }
    }

    /// The same transport with messages split into pieces of `bytes`
    /// instead of `MAX_MESSAGE` (1 GiB), so that tests can send split messages
    /// without allocating gigabytes. Every rank must set the same length:
    /// a receiver reads pieces until one is shorter than its own.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for 0 or more than `MAX_MESSAGE` (1 GiB).
    #[cfg(feature = "testing")]
    pub fn with_max_message(mut self, bytes: usize) -> Result<Self> {
        if bytes == 0 || bytes > MAX_MESSAGE {
            return Err(Error::invalid(
                "max_message",
                format!("{bytes} not in 1..={MAX_MESSAGE}"),
            ));
        }
        self.max_message = bytes;
        Ok(self)
    }

    /// The transport's communicator, for MPI calls of the program's own
    /// (barriers, `MPI_Allreduce` baselines, ...); receives on it with
    /// tags `0x5ca1` and `0x5ca2` would take this transport's messages.
    pub fn comm(&self) -> &SimpleCommunicator {
        self.comm
            .as_ref()
            .expect("the communicator lives until drop")
    }

    /// Installs a panic hook that prints the panic (as the default hook
    /// does) and then calls `MPI_Abort` on `MPI_COMM_WORLD`, so that a rank
    /// that fails ends the whole job with a non-zero status instead of
    /// leaving the other ranks blocked in a receive. Each process prints
    /// its own panic, so a line before it names the rank (of
    /// `MPI_COMM_WORLD`): where several ranks panic, each message is
    /// told apart. The hook waits [`MpiTransport::ABORT_GRACE`] between
    /// the message and `MPI_Abort`: the launcher ends every process as
    /// soon as one aborts, and a message still on its way to the
    /// launcher's standard error could be lost so (seen here with the
    /// machine busy: the panic's message arrived, the line after it did
    /// not).
    pub fn abort_on_panic() {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let world = SimpleCommunicator::world();
            eprintln!(
                "sparse-coll: rank {} of {} panicked (the message below); calling MPI_Abort",
                world.rank(),
                world.size()
            );
            default(info);
            std::thread::sleep(Self::ABORT_GRACE);
            world.abort(101);
        }));
    }

    /// How long [`MpiTransport::abort_on_panic`]'s hook waits after
    /// printing a panic before it calls `MPI_Abort` (100 ms), so that the
    /// launcher forwards the message before it ends the job.
    pub const ABORT_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

    /// `peer` as an MPI rank of the communicator.
    fn check_peer(&self, peer: usize) -> Result<i32> {
        Ok(self.state.peer(peer)? as i32)
    }

    /// This rank's error once the transport has failed.
    fn alive(&self) -> Result<()> {
        match self.failed {
            None => Ok(()),
            Some(peer) => Err(Error::PeerFailed {
                rank: self.comm().rank() as usize,
                peer,
            }),
        }
    }

    /// Takes every abandon message that has arrived; a rank that learns of
    /// a failure abandons in turn. Returns [`MpiTransport::alive`].
    fn watch(&mut self) -> Result<()> {
        while let Some((msg, status)) = self
            .comm()
            .any_process()
            .immediate_matched_probe_with_tag(POISON)
        {
            msg.matched_receive_into(&mut [0u8; 0][..]);
            let from = status.source_rank() as usize;
            self.abandoned[from] = true;
            self.failed.get_or_insert(from);
        }
        if self.failed.is_some() {
            self.close();
        }
        self.alive()
    }

    /// Receives the next message from `from` into `into`: probes for its
    /// size, grows `into` only where it is too short (a buffer reused
    /// across calls is written over, not zeroed again) and receives in
    /// place. Fails instead when a rank abandons first.
    ///
    /// A message of `MAX_MESSAGE` bytes (1 GiB) or more arrives in pieces: they
    /// are read one after the other until a shorter one.
    fn recv_raw(&mut self, from: i32, into: &mut Vec<u8>) -> Result<()> {
        use mpi::datatype::Equivalence;
        self.alive()?;
        let mut total = 0;
        loop {
            // Each piece's wait starts over: its first polls spin.
            let mut polls = 0;
            let (msg, status) = loop {
                if let Some(got) = self
                    .comm()
                    .process_at_rank(from)
                    .immediate_matched_probe_with_tag(TAG)
                {
                    break got;
                }
                self.watch()?;
                self.wait.idle(&mut polls);
            };
            // A piece is at most `max_message` bytes, so its count fits.
            let len = usize::try_from(status.count(u8::equivalent_datatype()))
                .expect("MPI_Get_count of a received piece is not negative");
            let end = total + len;
            into.resize(end, 0);
            msg.matched_receive_into(&mut into[total..end]);
            total = end;
            if len < self.max_message {
                break;
            }
        }
        Ok(())
    }

    /// Sends a copy of `data` to `to` (without blocking), runs `then`
    /// (the receive of an exchange), and waits for the send to complete
    /// or for `to` to abandon the transport. Then the send is left
    /// unfinished and its copy is never freed, so MPI may still read it,
    /// and this rank fails. The copy is what makes that sound: `data` is
    /// the caller's and must not stay lent to MPI after this returns.
    fn send_then(
        &mut self,
        to: i32,
        data: &[u8],
        then: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        self.alive()?;
        let mut copy = std::mem::take(&mut self.outgoing);
        copy.clear();
        copy.try_reserve(data.len())
            .map_err(|_| Error::OutOfMemory {
                what: "outgoing message",
                bytes: data.len() as u64,
            })?;
        copy.extend_from_slice(data);
        // Pieces of `max_message` bytes, then a shorter one (empty where
        // the length is a multiple): one piece below `max_message`.
        let max = self.max_message;
        let short = copy.len().is_multiple_of(max).then_some(&copy[..0]);
        let (sent, then) = mpi::request::scope(|scope| {
            // Every piece is posted before `then` runs, so that two ranks
            // exchanging split messages never wait on each other.
            let mut reqs: Vec<_> = copy
                .chunks(max)
                .chain(short)
                .map(|piece| {
                    Some(
                        self.comm()
                            .process_at_rank(to)
                            .immediate_send_with_tag(scope, piece, TAG),
                    )
                })
                .collect();
            let then = then(self);
            let mut polls = 0;
            loop {
                for slot in &mut reqs {
                    if let Some(Err(req)) = slot.take().map(|req| req.test()) {
                        *slot = Some(req);
                    }
                }
                if reqs.iter().all(Option::is_none) {
                    return (true, then);
                }
                // A failure elsewhere does not end this wait: `to` may
                // still receive; it abandons (and says so) if it never
                // will.
                let _ = self.watch();
                if self.abandoned[to as usize] {
                    for req in reqs.into_iter().flatten() {
                        // SAFETY: this only unregisters the request from
                        // the scope and gives up its handle unfinished.
                        // MPI may read `copy` later; `copy` is leaked
                        // below, so it outlives every use. (`to` has
                        // abandoned, so it never receives on this
                        // transport's private communicator again: the
                        // send will not complete.)
                        #[allow(unsafe_code)]
                        let _ = unsafe { req.into_raw() };
                    }
                    return (false, then);
                }
                self.wait.idle(&mut polls);
            }
        });
        if sent {
            self.outgoing = copy;
            then
        } else {
            std::mem::forget(copy);
            then.and(self.alive())
        }
    }
}

impl Endpoint for MpiTransport {
    fn state(&self) -> &EndpointState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut EndpointState {
        &mut self.state
    }
    fn post(&mut self, to: usize, data: &[u8]) -> Result<()> {
        let to = self.check_peer(to)?;
        self.send_then(to, data, |_| Ok(()))
    }
    fn fetch(&mut self, from: usize) -> Result<Vec<u8>> {
        let mut got = Vec::new();
        self.fetch_into(from, &mut got)?;
        Ok(got)
    }
    fn swap(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        let mut got = Vec::new();
        self.swap_into(to, data, from, &mut got)?;
        Ok(got)
    }
    /// Receives in place (`MpiTransport::recv_raw`).
    fn fetch_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        let from = self.check_peer(from)?;
        self.recv_raw(from, into)
    }
    /// Posts the send, receives in place, then waits on the send.
    fn swap_into(&mut self, to: usize, data: &[u8], from: usize, into: &mut Vec<u8>) -> Result<()> {
        let (to, from) = (self.check_peer(to)?, self.check_peer(from)?);
        self.send_then(to, data, |t| t.recv_raw(from, into))
    }
    /// `MPI_Allreduce` with `MPI_SUM`, after an entry agreement on the
    /// lengths and on `out`'s allocation ([`crate::agree_or_fail`], over
    /// this transport's messages, so it watches for failed peers: MPI's
    /// own collectives cannot). Every rank that passes it enters
    /// `MPI_Allreduce`, and nothing between can fail.
    ///
    /// MPICH reduces each element in one fixed order for all ranks at these
    /// sizes (recursive doubling for short vectors, reduce-scatter then
    /// allgather for long ones), so every rank gets the same bits; the
    /// optimizers' tests check that under `mpiexec`. The traffic counters
    /// cannot see inside MPICH: the call counts one round and the bytes a
    /// ring moves (`2 (P - 1) / P` of the vector each way); the agreement
    /// is not counted.
    fn sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        use mpi::collective::SystemOperation;
        // The agreement is an entry round (its errors reach every rank
        // alike); nothing after it fails, so nothing needs abandoning.
        let t = &mut *self;
        let p = t.comm().size() as usize;
        let local = out
            .try_reserve(x.len().saturating_sub(out.len()))
            .map_err(|_| Error::OutOfMemory {
                what: "dense allreduce result",
                bytes: 4 * x.len() as u64,
            });
        let counted = t.state.counter().clone();
        let agreed =
            super::agree::agree_or_fail(t, &[("dense allreduce length", x.len() as u64)], local);
        *t.state.counter_mut() = counted;
        agreed?;
        out.resize(x.len(), 0.0);
        if p > 1 && !x.is_empty() {
            // MPI counts are `int`s: vectors of 2^31 elements or more
            // are reduced in slices (the same on every rank, which
            // agreed on the length).
            let slice = (t.max_message / 4).max(1);
            for (x, out) in x.chunks(slice).zip(out.chunks_mut(slice)) {
                t.all_reduce_into(x, out, SystemOperation::sum());
            }
            let bytes = (2 * (p - 1) * 4 * x.len()).div_ceil(p);
            let counter = t.state.counter_mut();
            counter.round();
            counter.sent(bytes);
            counter.received(bytes);
        } else {
            out.copy_from_slice(x);
        }
        Ok(())
    }
    /// Sends every other rank an empty message on the abandon tag (once),
    /// and fails every later call.
    fn close(&mut self) {
        let me = self.comm().rank() as usize;
        self.failed.get_or_insert(me);
        if std::mem::replace(&mut self.abandoned[me], true) {
            return;
        }
        for peer in (0..self.abandoned.len()).filter(|&r| r != me) {
            // Empty messages travel eagerly: this returns at once.
            self.comm()
                .process_at_rank(peer as i32)
                .send_with_tag(&[0u8; 0][..], POISON);
        }
    }
}

impl Drop for MpiTransport {
    /// Frees the communicator, except after a failure: messages may still
    /// be on their way on it, and MPI could hand its context to a later
    /// communicator (a new transport), where they would match. A rank
    /// that keeps it keeps MPI from reusing it on any rank.
    fn drop(&mut self) {
        if self.failed.is_some() {
            std::mem::forget(self.comm.take());
        }
    }
}

// The non-blocking collectives move the transport to a progress thread.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<MpiTransport>();
};
