//! The MPI transport (feature `mpi`): the same collectives over MPICH.

use crate::{BufferPool, Traffic, TrafficCounter, Transport};
use mpi::Tag;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use sparse_core::{Error, Result};

/// The tag of every message this transport sends: collectives on one
/// communicator run one at a time, in the same order on every rank, and
/// messages between two ranks arrive in the order they were sent (MPI's
/// non-overtaking rule), which is all the [`Transport`] contract asks.
const TAG: Tag = 0x5ca1;

/// A [`Transport`] over an MPI communicator (usually `MPI_COMM_WORLD`).
///
/// Messages of any length, zero included, travel as `MPI_BYTE`s; a
/// receive probes first (`MPI_Mprobe`), so sizes need not be known in
/// advance. [`Transport::exchange`] posts a non-blocking send, then
/// receives, then waits on the send, so rings and shifts never deadlock.
/// Traffic is counted as on the thread transport.
///
/// MPI receives have no timeout: a rank that dies leaves its peers
/// waiting. Programs therefore install [`MpiTransport::abort_on_panic`],
/// which turns a panic on any rank into `MPI_Abort` of the whole job, and
/// run under `mpiexec` with `MPIEXEC_TIMEOUT` as a backstop.
pub struct MpiTransport {
    comm: SimpleCommunicator,
    counter: TrafficCounter,
    pool: BufferPool,
}

impl std::fmt::Debug for MpiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiTransport")
            .field("rank", &self.comm.rank())
            .field("size", &self.comm.size())
            .field("traffic", &self.counter.traffic())
            .finish()
    }
}

impl MpiTransport {
    /// A transport over `comm`.
    pub fn new(comm: SimpleCommunicator) -> Self {
        let ranks = comm.size() as usize;
        Self {
            comm,
            counter: TrafficCounter::default(),
            pool: BufferPool::for_ranks(ranks),
        }
    }

    /// The communicator, for MPI calls of the program's own (barriers,
    /// `MPI_Allreduce` baselines, ...).
    pub fn comm(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Installs a panic hook that prints the panic (as the default hook
    /// does) and then calls `MPI_Abort` on `MPI_COMM_WORLD`, so that a rank
    /// that fails ends the whole job with a non-zero status instead of
    /// leaving the other ranks blocked in a receive.
    pub fn abort_on_panic() {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default(info);
            eprintln!("sparse-coll: a rank panicked; calling MPI_Abort");
            SimpleCommunicator::world().abort(101);
        }));
    }

    fn check_peer(&self, peer: usize) -> Result<i32> {
        let size = self.comm.size() as usize;
        if peer >= size {
            return Err(Error::NoSuchRank { rank: peer, size });
        }
        Ok(peer as i32)
    }

    /// Receives the next message from `from` into `into`: probes for its
    /// size, grows `into` only where it is too short (a buffer reused
    /// across calls is written over, not zeroed again) and receives in
    /// place.
    fn recv_raw(&mut self, from: i32, into: &mut Vec<u8>) {
        use mpi::datatype::Equivalence;
        let (msg, status) = self.comm.process_at_rank(from).matched_probe_with_tag(TAG);
        let len = usize::try_from(status.count(u8::equivalent_datatype()))
            .expect("MPI_Get_count of a received message is not negative");
        into.resize(len, 0);
        msg.matched_receive_into(&mut into[..]);
        self.counter.received(len);
    }
}

impl Transport for MpiTransport {
    /// `MPI_Allreduce` with `MPI_SUM`, after one small `MPI_Allreduce` that
    /// checks the lengths agree (a mismatch would be undefined in MPI).
    /// MPICH reduces each element in one fixed order for all ranks at these
    /// sizes (recursive doubling for short vectors, reduce-scatter then
    /// allgather for long ones), so every rank gets the same bits; the
    /// optimizers' tests check that under `mpiexec`. The traffic counters
    /// cannot see inside MPICH: the call counts one round and the bytes a
    /// ring moves (`2 (P - 1) / P` of the vector each way).
    fn allreduce_sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        use mpi::collective::{CommunicatorCollectives, SystemOperation};
        let p = self.comm.size() as usize;
        let n = x.len() as u64;
        let mut range = [0u64; 2];
        self.comm
            .all_reduce_into(&[n, u64::MAX - n], &mut range, SystemOperation::max());
        let (hi, lo) = (range[0], u64::MAX - range[1]);
        if hi != lo {
            return Err(Error::Disagreement {
                what: "dense allreduce length",
                detail: format!("lengths from {lo} to {hi}; this rank {n}"),
            });
        }
        out.resize(x.len(), 0.0);
        if p > 1 && !x.is_empty() {
            self.comm
                .all_reduce_into(x, &mut out[..], SystemOperation::sum());
            let bytes = (2 * (p - 1) * 4 * x.len()).div_ceil(p);
            self.counter.round();
            self.counter.sent(bytes);
            self.counter.received(bytes);
        } else {
            out.copy_from_slice(x);
        }
        Ok(())
    }
    fn take_buffer(&mut self) -> Vec<u8> {
        self.pool.take()
    }
    fn give_buffer(&mut self, buf: Vec<u8>) {
        self.pool.give(buf);
    }
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }
    fn size(&self) -> usize {
        self.comm.size() as usize
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        let to = self.check_peer(to)?;
        self.counter.round();
        self.comm.process_at_rank(to).send_with_tag(data, TAG);
        self.counter.sent(data.len());
        Ok(())
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        let mut got = Vec::new();
        self.recv_into(from, &mut got)?;
        Ok(got)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        let mut got = Vec::new();
        self.exchange_into(to, data, from, &mut got)?;
        Ok(got)
    }
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        let from = self.check_peer(from)?;
        self.counter.round();
        self.recv_raw(from, into);
        Ok(())
    }
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        let (to, from) = (self.check_peer(to)?, self.check_peer(from)?);
        self.counter.round();
        mpi::request::scope(|scope| {
            let req = self
                .comm
                .process_at_rank(to)
                .immediate_send_with_tag(scope, data, TAG);
            self.recv_raw(from, into);
            req.wait();
        });
        self.counter.sent(data.len());
        Ok(())
    }
    fn traffic(&self) -> Traffic {
        self.counter.traffic()
    }
}

// The non-blocking collectives move the transport to a progress thread.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<MpiTransport>();
};
