//! The `Transport` trait and its traffic counters, the one intercepting
//! wrapper ([`Intercepting`]), and the transports: threads
//! ([`thread`]), MPI ([`mpi`], feature `mpi`), simulated ([`sim`]: the
//! network models and the replay are `crate::sim`'s), a group of ranks
//! ([`group`]); [`ring`] is the default dense allreduce; [`allgather`] (the
//! Bruck allgather) and [`agree`] (the agreement round on it) are what the
//! MPI transport's dense allreduce agrees with, so they live here, below
//! every collective.

pub(crate) mod agree;
pub(crate) mod allgather;
pub(crate) mod group;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
pub(crate) mod ring;
pub(crate) mod sim;
pub(crate) mod thread;

use sparse_core::Result;
use std::borrow::Cow;

/// Bytes and messages one rank sent and received, and the rounds
/// (send, receive or exchange calls) it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_recv: u64,
    /// Messages sent.
    pub msgs_sent: u64,
    /// Messages received.
    pub msgs_recv: u64,
    /// Communication rounds: each send, receive or exchange is one.
    pub rounds: u64,
}

impl Traffic {
    /// This traffic and `other` together.
    pub fn plus(&self, other: &Traffic) -> Traffic {
        Traffic {
            bytes_sent: self.bytes_sent + other.bytes_sent,
            bytes_recv: self.bytes_recv + other.bytes_recv,
            msgs_sent: self.msgs_sent + other.msgs_sent,
            msgs_recv: self.msgs_recv + other.msgs_recv,
            rounds: self.rounds + other.rounds,
        }
    }
    /// The traffic between an earlier snapshot and this one.
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            bytes_recv: self.bytes_recv - earlier.bytes_recv,
            msgs_sent: self.msgs_sent - earlier.msgs_sent,
            msgs_recv: self.msgs_recv - earlier.msgs_recv,
            rounds: self.rounds - earlier.rounds,
        }
    }
}

/// The counting every transport does, kept in one place.
#[derive(Debug, Clone, Default)]
pub struct TrafficCounter {
    traffic: Traffic,
}

impl TrafficCounter {
    /// A message of `len` bytes was sent.
    pub fn sent(&mut self, len: usize) {
        self.traffic.bytes_sent += len as u64;
        self.traffic.msgs_sent += 1;
    }
    /// A message of `len` bytes was received.
    pub fn received(&mut self, len: usize) {
        self.traffic.bytes_recv += len as u64;
        self.traffic.msgs_recv += 1;
    }
    /// One round began.
    pub fn round(&mut self) {
        self.traffic.rounds += 1;
    }
    /// The totals so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }
}

/// A few buffers kept for reuse, ordered by capacity: what
/// [`Transport::take_buffer`] and [`Transport::give_buffer`] need. A buffer
/// keeps its length and contents while it waits, so that a receive into it
/// (which resizes it to the message) writes zeros only where it grows.
#[derive(Debug)]
pub struct BufferPool {
    /// Ascending by capacity.
    spare: Vec<Vec<u8>>,
    /// How many buffers it keeps.
    keep: usize,
}

impl Default for BufferPool {
    /// A pool that keeps four buffers.
    fn default() -> Self {
        Self {
            spare: Vec::new(),
            keep: 4,
        }
    }
}

impl BufferPool {
    /// A pool for a transport of `ranks` ranks: it keeps `2 ceil(lg P) + 2`
    /// buffers (at least four), what a Bruck or recursive-doubling
    /// allgather holds at once (a send buffer and one received frame per
    /// round) with the one the thread transport lends to each send, so that
    /// warm calls find every buffer they need here.
    pub fn for_ranks(ranks: usize) -> Self {
        Self {
            spare: Vec::new(),
            keep: (2 * sparse_core::cost::ceil_log2(ranks.max(1)) as usize + 2).max(4),
        }
    }
    /// The largest spare buffer (a receive may need the most room), or an
    /// empty one; its contents are unspecified.
    pub fn take(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }
    /// A buffer for a message of `len` bytes: the smallest spare one that
    /// holds it with a sixteenth to spare without being far larger (at most
    /// `2 len` plus 4 KiB); else the largest spare one, if it is smaller,
    /// grown; else a new one. A grown or new buffer gets an eighth to spare.
    /// So a small message does not carry off a large buffer (the thread
    /// transport ships this buffer to the receiver: a large one lent for a
    /// small message would leave this rank short of it at its next large
    /// send), and the buffers passed back and forth between ranks keep room
    /// for the messages of later calls, which differ a little from rank to
    /// rank and call to call. Its contents are unspecified.
    pub fn take_fitting(&mut self, len: usize) -> Vec<u8> {
        let roomy = len.saturating_add(len / 16);
        let close = |b: &Vec<u8>| {
            b.capacity() >= roomy && b.capacity() <= len.saturating_mul(2).saturating_add(4096)
        };
        if let Some(i) = self.spare.iter().position(close) {
            return self.spare.remove(i);
        }
        let mut buf = match self.spare.last() {
            Some(b) if b.capacity() < roomy => self.spare.pop().unwrap_or_default(),
            _ => Vec::new(),
        };
        buf.clear();
        buf.reserve_exact(len.saturating_add(len / 8));
        buf
    }
    /// Keeps `buf` if it is among the largest the pool keeps.
    pub fn give(&mut self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let at = self
            .spare
            .partition_point(|b| b.capacity() <= buf.capacity());
        self.spare.insert(at, buf);
        if self.spare.len() > self.keep {
            self.spare.remove(0);
        }
    }
}

/// `peer` as a rank of `size` ranks: the check every in-process transport
/// makes before it touches a link.
///
/// # Errors
/// [`sparse_core::Error::NoSuchRank`].
pub(crate) fn check_peer(peer: usize, size: usize) -> Result<()> {
    if peer < size {
        Ok(())
    } else {
        Err(sparse_core::Error::NoSuchRank { rank: peer, size })
    }
}

/// The panics of one in-process cluster run: the first one a rank's code
/// raises is printed (by the panic hook in place, backtrace included), the
/// later ones of the same run are not, so that a check that fails on every
/// rank prints once, not once per rank; each rank still gets its own
/// message in its [`sparse_core::Error::Panicked`].
#[derive(Debug, Default)]
pub(crate) struct RunPanics(std::sync::Arc<std::sync::atomic::AtomicBool>);

thread_local! {
    /// The run whose rank this thread runs, while it runs it.
    static RUN: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicBool>>> =
        const { std::cell::RefCell::new(None) };
}

/// Wraps the process's panic hook (once): a panic on a rank thread of a
/// run that has printed one already is not printed again. Panics of other
/// threads go to the hook as before.
fn quiet_later_rank_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let seen = RUN
                .try_with(|r| {
                    r.borrow()
                        .as_ref()
                        .map(|printed| printed.swap(true, std::sync::atomic::Ordering::SeqCst))
                })
                .ok()
                .flatten();
            match seen {
                Some(true) => {}
                Some(false) => {
                    prev(info);
                    eprintln!(
                        "note: the panics of this cluster's other ranks are not printed; \
                         each is in its rank's Error::Panicked"
                    );
                }
                None => prev(info),
            }
        }));
    });
}

/// Runs rank `rank`'s code of the run `run`, a panic inside it becoming
/// that rank's [`sparse_core::Error::Panicked`] with the panic's message:
/// how the in-process clusters report a failed check on a rank (as what it
/// is, not as a transport fault). Only the run's first panic is printed
/// ([`RunPanics`]).
pub(crate) fn catch_rank<T>(
    run: &RunPanics,
    rank: usize,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    quiet_later_rank_panics();
    let outer = RUN.with(|r| r.replace(Some(std::sync::Arc::clone(&run.0))));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    RUN.with(|r| *r.borrow_mut() = outer);
    out.unwrap_or_else(|p| {
        Err(sparse_core::Error::Panicked {
            rank,
            message: panic_message(p.as_ref()),
        })
    })
}

/// A panic's message: its payload when that is a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic whose payload is not a string".into())
}

/// Point-to-point byte messaging between `size` ranks.
///
/// Messages between a pair of ranks arrive in the order they were sent.
/// Buffers of any length, zero included, are allowed. Every implementation
/// counts its traffic per rank ([`Transport::traffic`]).
pub trait Transport {
    /// This rank, in `0..size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Sends `data` to rank `to` (one round).
    ///
    /// It may block until `to` receives the message, as `MPI_Send` does
    /// past MPI's eager limit: the MPI transport does, the thread transport
    /// only with [`crate::ThreadCluster::synchronous`]. So a scheme must not
    /// have ranks send to each other (or to themselves) before they
    /// receive: use [`Transport::exchange`] for shifts and swaps, as every
    /// collective of this crate does. Test a scheme of your own with
    /// synchronous sends: with buffered ones it can pass and still
    /// deadlock under MPI.
    ///
    /// # Errors
    /// [`sparse_core::Error::NoSuchRank`], or the transport's failure
    /// ([`sparse_core::Error::PeerFailed`], ...).
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()>;
    /// Receives the next message from rank `from` (one round).
    ///
    /// # Errors
    /// [`sparse_core::Error::Timeout`], [`sparse_core::Error::PeerFailed`],
    /// [`sparse_core::Error::NoSuchRank`], ...
    fn recv(&mut self, from: usize) -> Result<Vec<u8>>;
    /// Sends `data` to `to` and receives the next message from `from`, in
    /// one round; `to` and `from` may differ (Bruck, SparDL).
    ///
    /// # Errors
    /// As [`Transport::send`] and [`Transport::recv`].
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>>;
    /// [`Transport::exchange`], with the received message written into
    /// `into` (its old contents replaced, its allocation reused where the
    /// transport can), so that a collective called again and again
    /// receives into the same memory instead of fresh pages. The default
    /// moves the message [`Transport::exchange`] returns into `into`.
    ///
    /// # Errors
    /// As [`Transport::exchange`].
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        *into = self.exchange(to, data, from)?;
        Ok(())
    }
    /// [`Transport::recv`] into `into`, as [`Transport::exchange_into`].
    ///
    /// # Errors
    /// As [`Transport::recv`].
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        *into = self.recv(from)?;
        Ok(())
    }
    /// A buffer to receive into with [`Transport::exchange_into`] or
    /// [`Transport::recv_into`]: one that an earlier
    /// [`Transport::give_buffer`] returned, so that a collective called
    /// again receives into memory already mapped instead of fresh pages;
    /// empty (no allocation) by default. Its contents are unspecified: a
    /// receive replaces them, a sender clears it first.
    fn take_buffer(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// Hands a buffer back for a later [`Transport::take_buffer`]; the
    /// default drops it. Transports keep only a few.
    fn give_buffer(&mut self, buf: Vec<u8>) {
        drop(buf);
    }
    /// The traffic of this rank so far.
    fn traffic(&self) -> Traffic;
    /// The element-wise sum over ranks of `x` on every rank, with the same
    /// bits on every rank: the dense allreduce the transport offers. The
    /// default is the project's ring ([`crate::dense::ring_allreduce`]);
    /// `MpiTransport` calls MPICH's `MPI_Allreduce`, so dense layers run at
    /// the engine's speed.
    ///
    /// # Errors
    /// Lengths that differ between ranks are an error on every rank:
    /// [`sparse_core::Error::Disagreement`] where the transport agrees on
    /// the length first (`MpiTransport`, feature `mpi`), and
    /// [`sparse_core::Error::Corrupt`] or [`sparse_core::Error::PeerFailed`]
    /// on the default ring, which then abandons the transport (callers that
    /// must keep it, such as the trainer, agree on the lengths beforehand);
    /// the transport's errors.
    fn allreduce_sum_f32(&mut self, x: &[f32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.allreduce_sum_f32_into(x, &mut out)?;
        Ok(out)
    }
    /// [`Transport::allreduce_sum_f32`] into `out` (its old contents
    /// replaced, its allocation reused).
    ///
    /// # Errors
    /// As [`Transport::allreduce_sum_f32`].
    fn allreduce_sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        ring::ring_allreduce_into(self, x, out)
    }
    /// Gives up this transport after a collective failed on this rank part
    /// way (a corrupt message, a refused allocation, a failed peer), so
    /// that the peers still waiting on this rank fail too instead of
    /// waiting: every later call on this rank fails, and the peers' calls
    /// fail ([`sparse_core::Error::PeerFailed`]) as soon as they wait on
    /// this rank or on a rank that failed in turn. Idempotent. Every
    /// collective of this crate calls it through [`guard`]; a collective
    /// of your own does the same.
    ///
    /// The default does nothing, for transports whose waits end anyway
    /// (a timeout, a link that closes when its rank returns).
    /// [`crate::ThreadTransport`] closes its links; `MpiTransport` (feature `mpi`)
    /// sends every peer a message that its waits watch for.
    fn abandon(&mut self) {}
}

/// Runs `f` on `t`, and [`Transport::abandon`]s `t` when it fails: a
/// rank that fails part way through a collective may leave peers waiting
/// on it, which abandoning ends. The body of every collective of this
/// crate runs inside it ([`crate::SparseAllreduce::allreduce_into`]); an
/// entry round ([`crate::agree_or_fail`], [`crate::wire::enter`]) runs
/// before it, outside: its errors reach every rank at the same point and
/// leave the transport usable.
///
/// # Errors
/// `f`'s error.
pub fn guard<T: Transport + ?Sized, R>(
    t: &mut T,
    f: impl FnOnce(&mut T) -> Result<R>,
) -> Result<R> {
    let out = f(t);
    if out.is_err() {
        t.abandon();
    }
    out
}

/// The hooks of an [`Intercepting`] transport: each default passes the
/// call on unchanged, so a hook writes only what it changes (a
/// fault-injection wrapper its corruption, a view of some ranks its
/// renumbering, a test its panic).
pub trait Intercept {
    /// This view's rank, given the inner transport's (default: the same).
    fn rank(&self, inner: usize) -> usize {
        inner
    }
    /// This view's size, given the inner transport's (default: the same).
    fn size(&self, inner: usize) -> usize {
        inner
    }
    /// The inner transport's rank for this view's rank `r`, the peer of a
    /// send or receive (default: `r`).
    ///
    /// # Errors
    /// [`sparse_core::Error::NoSuchRank`] for a rank outside the view.
    fn peer(&self, r: usize) -> Result<usize> {
        Ok(r)
    }
    /// Called before each send, receive and exchange (either form), before
    /// anything is passed on: a hook may count calls here, fail or panic.
    ///
    /// # Errors
    /// The hook's: the call then fails without reaching the inner
    /// transport.
    fn call(&mut self) -> Result<()> {
        Ok(())
    }
    /// The bytes an outgoing message (a send or an exchange) carries:
    /// `data` by default, or a replacement.
    fn outgoing<'d>(&mut self, data: &'d [u8]) -> Cow<'d, [u8]> {
        Cow::Borrowed(data)
    }
    /// Whether the inner transport's dense allreduce
    /// ([`Transport::allreduce_sum_f32_into`]) serves this view (the
    /// default); a view of some of its ranks says `false`, and the ring
    /// over the view runs instead.
    fn inner_allreduce(&self) -> bool {
        true
    }
}

/// A transport that passes every call to an inner one through the hooks
/// of `H` ([`Intercept`]): the one wrapper of this crate that forwards
/// [`Transport`] methods, so that no wrapper forgets one (the receive
/// buffers, [`Transport::abandon`]). [`crate::Group`] (a view of some
/// ranks), the fault injection of the test suite (`testing::Corrupting`)
/// and the MPI suite's panic injection are its hooks.
pub struct Intercepting<'a, T: Transport + ?Sized, H> {
    inner: &'a mut T,
    hook: H,
}

impl<T: Transport + ?Sized, H: std::fmt::Debug> std::fmt::Debug for Intercepting<'_, T, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intercepting")
            .field("hook", &self.hook)
            .finish_non_exhaustive()
    }
}

impl<'a, T: Transport + ?Sized, H: Intercept> Intercepting<'a, T, H> {
    /// `inner` seen through `hook`.
    pub fn wrap(inner: &'a mut T, hook: H) -> Self {
        Self { inner, hook }
    }
    /// The hook, with whatever it recorded.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

impl<T: Transport + ?Sized, H: Intercept> Transport for Intercepting<'_, T, H> {
    fn rank(&self) -> usize {
        self.hook.rank(self.inner.rank())
    }
    fn size(&self) -> usize {
        self.hook.size(self.inner.size())
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.hook.call()?;
        let to = self.hook.peer(to)?;
        let data = self.hook.outgoing(data);
        self.inner.send(to, &data)
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        self.hook.call()?;
        let from = self.hook.peer(from)?;
        self.inner.recv(from)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.hook.call()?;
        let (to, from) = (self.hook.peer(to)?, self.hook.peer(from)?);
        let data = self.hook.outgoing(data);
        self.inner.exchange(to, &data, from)
    }
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        self.hook.call()?;
        let (to, from) = (self.hook.peer(to)?, self.hook.peer(from)?);
        let data = self.hook.outgoing(data);
        self.inner.exchange_into(to, &data, from, into)
    }
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        self.hook.call()?;
        let from = self.hook.peer(from)?;
        self.inner.recv_into(from, into)
    }
    fn take_buffer(&mut self) -> Vec<u8> {
        self.inner.take_buffer()
    }
    fn give_buffer(&mut self, buf: Vec<u8>) {
        self.inner.give_buffer(buf);
    }
    /// The inner transport's: it counts every message this view passes.
    fn traffic(&self) -> Traffic {
        self.inner.traffic()
    }
    fn allreduce_sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        if self.hook.inner_allreduce() {
            self.inner.allreduce_sum_f32_into(x, out)
        } else {
            ring::ring_allreduce_into(self, x, out)
        }
    }
    /// Abandons the inner transport: the peers waiting on this rank wait
    /// on it there.
    fn abandon(&mut self) {
        self.inner.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::BufferPool;

    /// The pool keeps the four largest buffers; `take` hands out the
    /// largest, `take_fitting` the smallest that fits with room to spare
    /// and is not far larger, else the largest smaller one grown, else a new
    /// one; a buffer keeps its length while it waits.
    #[test]
    fn buffer_pool_keeps_the_largest_and_fits_requests() {
        let mut pool = BufferPool::default();
        pool.give(Vec::new()); // no allocation: not kept
        for cap in [10usize, 50, 20, 40, 30] {
            let mut b = Vec::with_capacity(cap);
            b.resize(cap / 2, 7u8);
            pool.give(b);
        }
        let caps = |p: &BufferPool| p.spare.iter().map(Vec::capacity).collect::<Vec<_>>();
        assert_eq!(caps(&pool), [20, 30, 40, 50]);
        // 25 bytes with a sixteenth to spare: 26, so 30.
        let fit = pool.take_fitting(25);
        assert_eq!((fit.capacity(), fit.len()), (30, 15));
        // 40 holds 39 but not 39 + 2: the next one, 50, is taken instead.
        assert_eq!(pool.take_fitting(39).capacity(), 50);
        // Nothing holds 60: the largest smaller one, 40, grown to 60 + 7.
        let grown = pool.take_fitting(60);
        assert_eq!((grown.capacity(), grown.len()), (67, 0));
        assert_eq!(caps(&pool), [20]);
        // A small message does not take a buffer far larger than it.
        pool.give(Vec::with_capacity(100_000));
        assert_eq!(pool.take_fitting(10).capacity(), 20);
        assert_eq!(pool.take_fitting(10).capacity(), 11);
        assert_eq!(pool.take().capacity(), 100_000);
        // Enough for a send and one frame per round of lg P, plus a lent one.
        let keeps = [1, 2, 4, 5, 8, 64].map(|p| BufferPool::for_ranks(p).keep);
        assert_eq!(keeps, [4, 4, 6, 8, 8, 14]);
    }
}
