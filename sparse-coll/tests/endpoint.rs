//! A transport written outside the crate implements only moving bytes
//! ([`Endpoint`]): the counting of its traffic and the pooling of its
//! buffers come with it. Here a channel transport of a few lines, with no
//! counter and no pool of its own, runs every algorithm of the collective
//! suite (which checks what each call reports against what the transport
//! counted) and counts, call for call, what the thread transport counts.

use sparse_coll::testing::{algorithms, collective_suite_for, inputs};
use sparse_coll::{Defaults, Endpoint, EndpointState, Reduced, Registry, ThreadCluster, Transport};
use sparse_core::{Error, Result};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

/// One rank's end of a set of channels: moving bytes and nothing else.
struct Channels {
    state: EndpointState,
    to: Vec<Sender<Vec<u8>>>,
    from: Vec<Receiver<Vec<u8>>>,
}

impl Endpoint for Channels {
    fn state(&self) -> &EndpointState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut EndpointState {
        &mut self.state
    }
    fn post(&mut self, to: usize, data: &[u8]) -> Result<()> {
        let rank = self.state.rank();
        self.to[self.state.peer(to)?]
            .send(data.to_vec())
            .map_err(|_| Error::PeerFailed { rank, peer: to })
    }
    fn fetch(&mut self, from: usize) -> Result<Vec<u8>> {
        let rank = self.state.rank();
        self.from[self.state.peer(from)?]
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| Error::PeerFailed { rank, peer: from })
    }
    fn swap(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.post(to, data)?;
        self.fetch(from)
    }
    fn close(&mut self) {
        self.to.clear();
        self.from.clear();
    }
}

/// `p` connected ends, by rank.
fn channels(p: usize) -> Vec<Channels> {
    let mut to: Vec<Vec<Sender<Vec<u8>>>> = (0..p).map(|_| Vec::new()).collect();
    let mut from: Vec<Vec<Option<Receiver<Vec<u8>>>>> =
        (0..p).map(|_| (0..p).map(|_| None).collect()).collect();
    for (src, row) in to.iter_mut().enumerate() {
        for dst_from in from.iter_mut() {
            let (tx, rx) = channel();
            row.push(tx);
            dst_from[src] = Some(rx);
        }
    }
    to.into_iter()
        .zip(from)
        .enumerate()
        .map(|(rank, (to, from))| Channels {
            state: EndpointState::new(rank, p),
            to,
            from: from.into_iter().map(|r| r.expect("every link")).collect(),
        })
        .collect()
}

/// Runs `f` on `p` channel ranks, a thread each.
fn run<T: Send>(p: usize, f: impl Fn(&mut Channels) -> Result<T> + Sync) -> Vec<Result<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = channels(p)
            .into_iter()
            .map(|mut t| {
                let f = &f;
                s.spawn(move || f(&mut t))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn an_endpoint_passes_the_collective_suite() {
    let registry = Registry::<f32>::builtin();
    let p = 3;
    for spec in algorithms(p) {
        for res in run(p, |t| collective_suite_for(t, &registry, &spec)) {
            res.unwrap_or_else(|e| panic!("{spec} P={p}: {e}"));
        }
    }
}

#[test]
fn an_endpoint_counts_what_the_thread_transport_counts() {
    let registry = Registry::<f32>::builtin();
    let case = sparse_coll::testing::CORRUPT_CASE;
    for p in [2usize, 3, 5] {
        let ins = inputs(p, &case).unwrap();
        for spec in registry.suite_specs(p) {
            let call = |t: &mut dyn Transport| -> Result<(Reduced<f32>, sparse_coll::Traffic)> {
                let mut algo = registry.build(&spec, Defaults::density(0.04)?)?;
                let before = t.traffic();
                let r = t.rank();
                let red = algo.allreduce(t, &ins[r])?;
                Ok((red, t.traffic().since(&before)))
            };
            let ours: Vec<_> = run(p, |t| call(t))
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let threads: Vec<_> = ThreadCluster::new(p)
                .run(|t| call(t))
                .into_iter()
                .map(Result::unwrap)
                .collect();
            for (r, ((a, ta), (b, tb))) in ours.iter().zip(&threads).enumerate() {
                assert_eq!(a.result, b.result, "{spec} P={p} rank {r}");
                assert_eq!(ta, tb, "{spec} P={p} rank {r}: the counts");
                assert_eq!((a.traffic, a.entry), (b.traffic, b.entry), "{spec} P={p}");
                assert!(ta.rounds > 0 && ta.bytes_recv > 0, "{spec} P={p}: {ta:?}");
            }
        }
    }
}

/// The pool the provided calls keep: a buffer given back is lent again,
/// and a receive into a buffer keeps the one it replaces.
#[test]
fn an_endpoint_lends_pooled_buffers() {
    for res in run(2, |t| {
        let (r, peer) = (t.rank(), 1 - t.rank());
        t.give_buffer(Vec::with_capacity(4096));
        let mut got = t.take_buffer();
        assert_eq!(got.capacity(), 4096, "rank {r}: the buffer given back");
        t.exchange_into(peer, &[r as u8; 10], peer, &mut got)?;
        assert_eq!(got, vec![peer as u8; 10]);
        assert!(
            t.take_buffer().capacity() >= 4096,
            "rank {r}: the buffer the receive replaced is kept"
        );
        Ok(())
    }) {
        res.unwrap();
    }
}
