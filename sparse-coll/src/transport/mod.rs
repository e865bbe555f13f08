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
pub(crate) mod wait;

mod cluster;
mod endpoint;
mod intercept;
mod pool;
mod traffic;

pub(crate) use cluster::{RunPanics, catch_rank, panic_message};
pub use endpoint::{Endpoint, EndpointState};
pub use intercept::{Intercept, Intercepting};
pub use pool::BufferPool;
pub use traffic::{Traffic, TrafficCounter};

use sparse_core::Result;

/// Point-to-point byte messaging between `size` ranks: what collectives
/// call.
///
/// Messages between a pair of ranks arrive in the order they were sent.
/// Buffers of any length, zero included, are allowed. Every transport
/// counts its traffic per rank ([`Transport::traffic`]).
///
/// A transport implements [`Endpoint`] (moving bytes) and gets this trait
/// from it, counted and pooled in one place (`transport/endpoint.rs`): the
/// thread, simulated and MPI transports do. A wrapper of another transport
/// implements it directly and passes each call on ([`Intercepting`], the
/// one such wrapper of this crate).
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
    /// moves the message [`Transport::exchange`] returns into `into`; an
    /// [`Endpoint`]'s keeps `into`'s old buffer in its pool, or receives in
    /// place ([`Endpoint::swap_into`]).
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
    /// empty (no allocation) by default, from its pool for an [`Endpoint`].
    /// Its contents are unspecified: a receive replaces them, a sender
    /// clears it first.
    fn take_buffer(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// Hands a buffer back for a later [`Transport::take_buffer`]; the
    /// default drops it, an [`Endpoint`] keeps it in its pool (only a
    /// few: [`BufferPool`]).
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
