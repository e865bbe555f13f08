//! What a transport implements ([`Endpoint`]: moving bytes between ranks)
//! and what every endpoint gets for it, in one place: the [`Transport`]
//! calls, which count the traffic and lend pooled buffers (a blanket
//! implementation, as `rand` builds its `RngExt` on every `Rng`). The
//! thread, simulated and MPI transports implement only [`Endpoint`].

use super::{BufferPool, Traffic, TrafficCounter, Transport, ring};
use sparse_core::{Error, Result};

/// What the provided [`Transport`] of an [`Endpoint`] keeps for it: its
/// place among the ranks, its traffic so far and its buffer pool.
#[derive(Debug)]
pub struct EndpointState {
    rank: usize,
    size: usize,
    counter: TrafficCounter,
    pool: BufferPool,
}

impl EndpointState {
    /// Rank `rank` of `size` ranks, no traffic yet, and a pool for `size`
    /// ranks ([`BufferPool::for_ranks`]).
    pub fn new(rank: usize, size: usize) -> Self {
        Self {
            rank,
            size,
            counter: TrafficCounter::default(),
            pool: BufferPool::for_ranks(size),
        }
    }
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }
    /// `peer` as a rank of this endpoint's transport: the check an endpoint
    /// makes before it touches a link.
    ///
    /// # Errors
    /// [`Error::NoSuchRank`].
    pub fn peer(&self, peer: usize) -> Result<usize> {
        if peer < self.size {
            Ok(peer)
        } else {
            Err(Error::NoSuchRank {
                rank: peer,
                size: self.size,
            })
        }
    }
    /// The traffic counted so far.
    pub fn counter(&self) -> &TrafficCounter {
        &self.counter
    }
    /// The counter, for an endpoint that moves bytes the provided calls do
    /// not see (MPI's own `MPI_Allreduce`, which counts what a ring would
    /// move).
    pub fn counter_mut(&mut self) -> &mut TrafficCounter {
        &mut self.counter
    }
    /// The buffer pool: sends may copy into its buffers (the thread and
    /// simulated transports ship them to the receiver).
    pub fn pool(&mut self) -> &mut BufferPool {
        &mut self.pool
    }
}

/// One rank's end of a transport: what a transport implements, moving
/// bytes and nothing else. Every endpoint is a [`Transport`] (a blanket
/// implementation), whose calls count the traffic (one round per call, the
/// bytes and messages each moved) and lend the pooled buffers
/// ([`Transport::take_buffer`], [`Transport::give_buffer`], and the
/// received buffer a [`Transport::recv_into`] replaces), kept in the
/// endpoint's [`EndpointState`]. So a transport of your own implements
/// this trait, not [`Transport`] (which a wrapper of another transport
/// implements: [`crate::Intercepting`]).
///
/// The moves follow the [`Transport`] contract of the calls they serve:
/// messages between two ranks arrive in order, of any length (zero
/// included); a send may wait until it is received, so an exchange must
/// not send-then-wait on both sides.
pub trait Endpoint {
    /// The state the provided [`Transport`] keeps for this endpoint.
    fn state(&self) -> &EndpointState;
    /// As [`Endpoint::state`], to change it.
    fn state_mut(&mut self) -> &mut EndpointState;
    /// Starts a call (a send, receive or exchange, in either form) before
    /// it is counted: an endpoint may refuse it here (abandoned, an
    /// injected fault) or record what happened since its last call. Does
    /// nothing by default.
    ///
    /// # Errors
    /// The refusal.
    fn begin(&mut self) -> Result<()> {
        Ok(())
    }
    /// Sends `data` to `to` ([`Transport::send`], uncounted).
    ///
    /// # Errors
    /// As [`Transport::send`].
    fn post(&mut self, to: usize, data: &[u8]) -> Result<()>;
    /// Receives the next message from `from` ([`Transport::recv`],
    /// uncounted).
    ///
    /// # Errors
    /// As [`Transport::recv`].
    fn fetch(&mut self, from: usize) -> Result<Vec<u8>>;
    /// Sends `data` to `to` and receives the next message from `from`
    /// ([`Transport::exchange`], uncounted).
    ///
    /// # Errors
    /// As [`Transport::exchange`].
    fn swap(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>>;
    /// [`Endpoint::fetch`] into `into` ([`Transport::recv_into`]). The
    /// default receives a message of its own and keeps `into`'s old
    /// buffer in the pool; an endpoint that can receive in place (MPI's)
    /// overrides it.
    ///
    /// # Errors
    /// As [`Endpoint::fetch`].
    fn fetch_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        let got = self.fetch(from)?;
        self.state_mut().pool.give(std::mem::replace(into, got));
        Ok(())
    }
    /// [`Endpoint::swap`] into `into` ([`Transport::exchange_into`]), as
    /// [`Endpoint::fetch_into`].
    ///
    /// # Errors
    /// As [`Endpoint::swap`].
    fn swap_into(&mut self, to: usize, data: &[u8], from: usize, into: &mut Vec<u8>) -> Result<()> {
        let got = self.swap(to, data, from)?;
        self.state_mut().pool.give(std::mem::replace(into, got));
        Ok(())
    }
    /// What [`Transport::abandon`] does: ends the peers' waits on this
    /// rank and fails its later calls. Nothing by default.
    fn close(&mut self) {}
    /// What [`Transport::allreduce_sum_f32_into`] does: the ring
    /// ([`crate::dense::ring_allreduce_into`]) by default.
    ///
    /// # Errors
    /// As [`Transport::allreduce_sum_f32_into`].
    fn sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        ring::ring_allreduce_into(self, x, out)
    }
}

/// The calls of every [`Endpoint`], counted and pooled here and nowhere
/// else: a call counts one round once [`Endpoint::begin`] lets it start,
/// and the messages and bytes it moved once it succeeded.
impl<L: Endpoint + ?Sized> Transport for L {
    fn rank(&self) -> usize {
        self.state().rank
    }
    fn size(&self) -> usize {
        self.state().size
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.begin()?;
        self.state_mut().counter.round();
        self.post(to, data)?;
        self.state_mut().counter.sent(data.len());
        Ok(())
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        self.begin()?;
        self.state_mut().counter.round();
        let got = self.fetch(from)?;
        self.state_mut().counter.received(got.len());
        Ok(got)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.begin()?;
        self.state_mut().counter.round();
        let got = self.swap(to, data, from)?;
        let counter = &mut self.state_mut().counter;
        counter.sent(data.len());
        counter.received(got.len());
        Ok(got)
    }
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        self.begin()?;
        self.state_mut().counter.round();
        self.swap_into(to, data, from, into)?;
        let len = into.len();
        let counter = &mut self.state_mut().counter;
        counter.sent(data.len());
        counter.received(len);
        Ok(())
    }
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        self.begin()?;
        self.state_mut().counter.round();
        self.fetch_into(from, into)?;
        let len = into.len();
        self.state_mut().counter.received(len);
        Ok(())
    }
    fn take_buffer(&mut self) -> Vec<u8> {
        self.state_mut().pool.take()
    }
    fn give_buffer(&mut self, buf: Vec<u8>) {
        self.state_mut().pool.give(buf);
    }
    fn traffic(&self) -> Traffic {
        self.state().counter.traffic()
    }
    fn allreduce_sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        self.sum_f32_into(x, out)
    }
    fn abandon(&mut self) {
        self.close();
    }
}
