//! The thread transport: P ranks as threads of one process.

use super::{Endpoint, EndpointState, Transport};
use sparse_core::{Error, Result};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

/// Runs `size` ranks as scoped threads connected by channels; the embedded
/// transport of `cargo test` and the main job.
///
/// Every receive waits at most `timeout`. A rank that returns an error or
/// panics drops its links, and a rank whose collective fails part way
/// closes them ([`Transport::abandon`]), so the ranks waiting on it get
/// [`Error::PeerFailed`] at once and fail in turn: nothing hangs. A fault
/// plan makes rank `r` fail at its `s`-th communication call.
///
/// Sends are buffered by default: a send never waits. With
/// [`ThreadCluster::synchronous`] every send waits until its message is
/// received, as MPI's do past the eager limit, so a scheme that would
/// deadlock under MPI deadlocks here too, and fails with
/// [`Error::Timeout`].
#[derive(Debug, Clone)]
pub struct ThreadCluster {
    size: usize,
    timeout: Duration,
    fault: Option<(usize, u64)>,
    synchronous: bool,
}

/// A message on a link, with where to say it was received (synchronous
/// sends).
type Msg = (Vec<u8>, Option<Sender<()>>);

impl ThreadCluster {
    /// `size` ranks (at least 1), a 10 s receive timeout, no fault.
    ///
    /// # Panics
    /// If `size == 0`.
    pub fn new(size: usize) -> Self {
        assert!(size > 0, "ThreadCluster::new(0)");
        Self {
            size,
            timeout: Duration::from_secs(10),
            fault: None,
            synchronous: false,
        }
    }
    /// Makes every send wait until its message is received (`MPI_Ssend`):
    /// [`Transport::send`] returns then, and [`Transport::exchange`]
    /// returns once it has received and its own message has been received,
    /// as the MPI transport's do for messages past MPI's eager limit. The
    /// wait is bounded by the timeout: a scheme that sends before it
    /// receives on both sides fails with [`Error::Timeout`] instead of
    /// passing here and deadlocking under MPI.
    pub fn synchronous(mut self, on: bool) -> Self {
        self.synchronous = on;
        self
    }
    /// Sets the receive timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// Rank `rank` fails with [`Error::Injected`] at its `step`-th call of
    /// send, receive or exchange (counting from 1).
    pub fn fault(mut self, rank: usize, step: u64) -> Self {
        self.fault = Some((rank, step));
        self
    }
    /// The `size` connected transports, rank by rank, for callers that run
    /// the ranks on threads of their own ([`ThreadCluster::run`] does it
    /// for you). Dropping one closes its links, as a failed rank does.
    pub fn transports(&self) -> Vec<ThreadTransport> {
        let p = self.size;
        // links[src][dst]: the channel from src to dst.
        // senders[src][dst] and receivers[dst][src] are the two ends of the
        // link from src to dst.
        let mut senders: Vec<Vec<Sender<Msg>>> = (0..p).map(|_| Vec::with_capacity(p)).collect();
        let mut receivers: Vec<Vec<Option<Receiver<Msg>>>> =
            (0..p).map(|_| (0..p).map(|_| None).collect()).collect();
        for (src, row) in senders.iter_mut().enumerate() {
            for rx_row in receivers.iter_mut() {
                let (tx, rx) = channel();
                row.push(tx);
                rx_row[src] = Some(rx);
            }
        }
        senders
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(rank, (tx, rx))| ThreadTransport {
                state: EndpointState::new(rank, p),
                senders: tx,
                receivers: rx
                    .into_iter()
                    .map(|r| r.expect("every link made"))
                    .collect(),
                timeout: self.timeout,
                calls: 0,
                fault: self.fault.filter(|&(r, _)| r == rank).map(|(_, s)| s),
                failed: false,
                abandoned: false,
                synchronous: self.synchronous,
            })
            .collect()
    }

    /// Runs `f` on every rank and returns each rank's result, by rank. A
    /// panic inside `f` becomes that rank's [`Error::Panicked`]; only the
    /// run's first panic is printed (a check that fails on every rank
    /// prints once).
    #[must_use = "a rank's failure (a failed check panics) is only in the results"]
    pub fn run<T: Send, F>(&self, f: F) -> Vec<Result<T>>
    where
        F: Fn(&mut ThreadTransport) -> Result<T> + Sync,
    {
        let transports = self.transports();
        let panics = super::RunPanics::default();
        std::thread::scope(|scope| {
            let handles: Vec<_> = transports
                .into_iter()
                .map(|mut t| {
                    let (f, panics) = (&f, &panics);
                    scope.spawn(move || {
                        let out = super::catch_rank(panics, t.rank(), || f(&mut t));
                        // Dropping the transport closes this rank's links.
                        drop(t);
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("rank threads catch their panics"))
                .collect()
        })
    }
}

/// One rank's end of a [`ThreadCluster`].
#[derive(Debug)]
pub struct ThreadTransport {
    /// Its rank, traffic and buffer pool: sends copy into pooled buffers,
    /// so messages travel in memory already mapped.
    state: EndpointState,
    senders: Vec<Sender<Msg>>,
    receivers: Vec<Receiver<Msg>>,
    timeout: Duration,
    calls: u64,
    fault: Option<u64>,
    failed: bool,
    /// Whether [`Transport::abandon`] closed the links.
    abandoned: bool,
    /// Sends wait until received ([`ThreadCluster::synchronous`]).
    synchronous: bool,
}

impl ThreadTransport {
    /// Counts a call and fires the injected fault when due; after a fault
    /// every call fails and the links are closed.
    fn step(&mut self) -> Result<()> {
        let rank = self.rank();
        self.calls += 1;
        if self.abandoned {
            return Err(Error::Transport {
                rank,
                detail: "abandoned after a failed collective".into(),
            });
        }
        if self.failed || self.fault == Some(self.calls) {
            self.failed = true;
            self.senders.clear();
            self.receivers.clear();
            return Err(Error::Injected {
                rank,
                step: self.fault.unwrap_or(self.calls),
            });
        }
        Ok(())
    }

    /// Posts `data` to `to`; in synchronous mode returns where its
    /// receipt will be said ([`ThreadTransport::wait_received`]).
    fn send_raw(&mut self, to: usize, data: &[u8]) -> Result<Option<Receiver<()>>> {
        self.state.peer(to)?;
        let mut msg = self.state.pool().take_fitting(data.len());
        msg.clear();
        msg.extend_from_slice(data);
        let (ack, receipt) = if self.synchronous {
            let (tx, rx) = channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.senders[to]
            .send((msg, ack))
            .map_err(|_| Error::PeerFailed {
                rank: self.state.rank(),
                peer: to,
            })?;
        Ok(receipt)
    }

    /// Waits, at most the timeout, until `to` has received the message
    /// `receipt` belongs to.
    fn wait_received(&self, to: usize, receipt: Option<Receiver<()>>) -> Result<()> {
        match receipt.map(|r| r.recv_timeout(self.timeout)) {
            None | Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(self.wait_error(to, e)),
        }
    }

    /// A wait on `peer` that ended without its message or receipt.
    fn wait_error(&self, peer: usize, e: RecvTimeoutError) -> Error {
        match e {
            RecvTimeoutError::Timeout => Error::Timeout {
                rank: self.state.rank(),
                peer,
                timeout_ms: self.timeout.as_millis() as u64,
            },
            RecvTimeoutError::Disconnected => Error::PeerFailed {
                rank: self.state.rank(),
                peer,
            },
        }
    }

    fn recv_raw(&mut self, from: usize) -> Result<Vec<u8>> {
        self.state.peer(from)?;
        match self.receivers[from].recv_timeout(self.timeout) {
            Ok((msg, ack)) => {
                if let Some(ack) = ack {
                    // The sender may have given up waiting: nothing to say.
                    let _ = ack.send(());
                }
                Ok(msg)
            }
            Err(e) => Err(self.wait_error(from, e)),
        }
    }
}

impl Endpoint for ThreadTransport {
    fn state(&self) -> &EndpointState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut EndpointState {
        &mut self.state
    }
    /// Refuses a call after a fault or [`Transport::abandon`], and fires
    /// the injected fault when due.
    fn begin(&mut self) -> Result<()> {
        self.step()
    }
    fn post(&mut self, to: usize, data: &[u8]) -> Result<()> {
        let receipt = self.send_raw(to, data)?;
        self.wait_received(to, receipt)
    }
    fn fetch(&mut self, from: usize) -> Result<Vec<u8>> {
        self.recv_raw(from)
    }
    fn swap(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        // Channels are unbounded: sending first cannot block, so a ring of
        // exchanges never deadlocks. A synchronous send is waited for
        // after the receive, as the MPI transport waits on its `MPI_Isend`.
        let receipt = self.send_raw(to, data)?;
        let got = self.recv_raw(from)?;
        self.wait_received(to, receipt)?;
        Ok(got)
    }
    /// Closes this rank's links, as a failed rank's do: its peers' waits
    /// on it end with [`Error::PeerFailed`], and its own later calls fail.
    fn close(&mut self) {
        self.abandoned = true;
        self.senders.clear();
        self.receivers.clear();
    }
}
