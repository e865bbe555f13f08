//! Zen's Balanced Parallelism (push COO to the `h0` owner, pull the hash
//! bitmap plus values). Its Hierarchical Centralization is SparCML's
//! recursive doubling ([`crate::SsarRecursiveDouble`]), as Zen's Table 3
//! classifies it.

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::algorithms::push_pull::{Keeps, PushPull, Scheme, push_pull_into, split_by_owner};
use crate::entry::{Admission, Reduced, admit};
use crate::frame::take_parts;
use crate::profile::{Profile, bytes_cost};
use crate::scratch::Scratch;
use crate::{Entered, Transport};
use sparse_core::cost::Cost;
use sparse_core::encoding::{Coo, Encoding, HashBitmap, PartitionIndex, Raw};
use sparse_core::hash::HashProbe;
use sparse_core::stats::imbalance_ratio;
use sparse_core::{
    Backend, Element, Error, H0, HashPartitions, HierarchicalHash, Result, SparseVec,
};
use std::sync::{Arc, Mutex, Weak};

struct Zen<'a> {
    index: &'a Arc<PartitionIndex>,
}

impl<E: Element> Scheme<E> for Zen<'_> {
    fn owner(&self, idx: u32) -> usize {
        self.index.h0().partition(idx) as usize
    }
    fn push(&self) -> Box<dyn Encoding<E> + '_> {
        Box::new(Coo(Raw))
    }
    fn pull(&self, server: usize) -> Result<Box<dyn Encoding<E> + '_>> {
        Ok(Box::new(HashBitmap::new(
            self.index.clone(),
            server as u32,
            Raw,
        )?))
    }
    /// The hash bitmap with raw values keeps every stored entry.
    fn pull_keeps(&self) -> Keeps {
        Keeps::Every
    }
}

/// Where Zen's hierarchical hashing (Alg. 1) runs: on the host
/// ([`HostHashing`], the default) or on a backend ([`OnBackend`], a kernel
/// backend hashes on the device). Both give the same partitions, the
/// backend suite's differential tests hold every backend to the host's.
pub trait ZenHashing<E: Element>: Send {
    /// Partitions `v`'s entries with `h`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] for a table the machine cannot hold; the
    /// backend's errors.
    fn partition(&self, v: &SparseVec<E>, h: &HierarchicalHash) -> Result<HashPartitions<E>>;
    /// Zen's push pieces of `v` with `h` into `pieces` (one per partition,
    /// each in index order; the vector's contents replaced) and the
    /// hashing's statistics: what [`zen_pieces`] returns. The default
    /// partitions with [`ZenHashing::partition`] and sorts each
    /// partition; [`HostHashing`] makes the same pieces and statistics
    /// without a table, in memory `probe` keeps across calls.
    ///
    /// # Errors
    /// As [`ZenHashing::partition`]; [`SparseVec::check`]'s errors for an
    /// invalid `v`.
    fn pieces_into(
        &self,
        v: &SparseVec<E>,
        h: &HierarchicalHash,
        probe: &mut HashProbe,
        pieces: &mut Vec<SparseVec<E>>,
    ) -> Result<ZenStats> {
        let _ = probe;
        let parts = self.partition(v, h)?;
        let imbalance = imbalance_ratio(&parts.sizes());
        pieces.clear();
        for w in parts.offsets.windows(2) {
            let mut pairs: Vec<(u32, E)> = parts.indices[w[0]..w[1]]
                .iter()
                .copied()
                .zip(parts.values[w[0]..w[1]].iter().copied())
                .collect();
            pairs.sort_unstable_by_key(|p| p.0);
            let (idx, val) = pairs.into_iter().unzip();
            pieces.push(SparseVec::new(v.dim(), idx, val)?);
        }
        Ok(ZenStats {
            serial: parts.serial,
            fallback: parts.fallback,
            imbalance,
        })
    }
}

/// Zen's hashing on the host ([`sparse_core::hash::partition_host`]).
///
/// Its pieces ([`ZenHashing::pieces_into`]) are made without the table:
/// every entry lands in its `h0` partition and each piece is put in index
/// order, so the pieces are `v` split by `h0` in its own (sorted) order,
/// made in one pass; the statistics come from replaying the placement on
/// a bitmap of the parallel slots ([`HashProbe`]), which counts the serial
/// and fallback entries exactly as the table does. `zen_pieces` on the
/// host and on `backend-cpu` (which runs `partition_host`) are held to the
/// same pieces and statistics by the tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostHashing;

impl<E: Element> ZenHashing<E> for HostHashing {
    fn partition(&self, v: &SparseVec<E>, h: &HierarchicalHash) -> Result<HashPartitions<E>> {
        sparse_core::hash::partition_host(v.indices(), v.values(), h)
    }
    fn pieces_into(
        &self,
        v: &SparseVec<E>,
        h: &HierarchicalHash,
        probe: &mut HashProbe,
        pieces: &mut Vec<SparseVec<E>>,
    ) -> Result<ZenStats> {
        v.check()?;
        let p = h.h0.partitions() as usize;
        pieces.resize_with(p, || SparseVec::new_unchecked(0, Vec::new(), Vec::new()));
        let mut taken: Vec<(Vec<u32>, Vec<E>)> = pieces.iter_mut().map(take_parts).collect();
        let (idx, val) = (v.indices(), v.values());
        let counted = probe.probe_with(idx, h, |k, part| {
            taken[part].0.push(idx[k]);
            taken[part].1.push(val[k]);
        });
        let sizes: Vec<usize> = taken.iter().map(|t| t.0.len()).collect();
        for (piece, (i, x)) in pieces.iter_mut().zip(taken) {
            *piece = SparseVec::new_unchecked(v.dim(), i, x);
        }
        let (serial, fallback) = counted?;
        Ok(ZenStats {
            serial,
            fallback,
            imbalance: imbalance_ratio(&sizes),
        })
    }
}

/// Zen's hashing on a backend: the entries uploaded, partitioned by
/// [`sparse_core::HashOps::hash_partition`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OnBackend<B>(pub B);

impl<E: Element, B: Backend<E> + Send> ZenHashing<E> for OnBackend<B> {
    fn partition(&self, v: &SparseVec<E>, h: &HierarchicalHash) -> Result<HashPartitions<E>> {
        let b = &self.0;
        b.hash_partition(&b.upload(v.indices())?, &b.upload(v.values())?, h)
    }
}

/// Zen's push pieces by its hierarchical hashing (Alg. 1) where `hashing`
/// runs it: every entry of `v` in its `h0` partition through the rehash
/// functions, the serial overflow area and the fallback list (nothing is
/// lost), then each partition put in index order for the wire. Returns the
/// pieces and the partition's statistics.
///
/// # Errors
/// As [`ZenHashing::partition`].
pub fn zen_pieces<H: ZenHashing<E>, E: Element>(
    hashing: &H,
    hash: &HierarchicalHash,
    v: &SparseVec<E>,
) -> Result<(Vec<SparseVec<E>>, ZenStats)> {
    let mut pieces = Vec::new();
    let stats = hashing.pieces_into(v, hash, &mut HashProbe::new(), &mut pieces)?;
    Ok((pieces, stats))
}

/// What Zen's hierarchical hashing did on one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZenStats {
    /// Entries placed in the serial overflow area.
    pub serial: usize,
    /// Entries that found it full and went to the fallback list.
    pub fallback: usize,
    /// The push imbalance ratio (Def. 8): 1 is perfect balance.
    pub imbalance: f64,
}

/// Zen's Balanced Parallelism (Def. 6, Sec. 3): `h0`, shared by all ranks,
/// assigns every index to a server (one per rank), which balances the load
/// whatever the skew (Thm. 2). Push sends COO; pull sends Zen's hash bitmap
/// (Alg. 2) of the server's partition plus the values, so the index part a
/// rank receives is at most `N/8` bytes plus a word of padding per server,
/// whatever the density.
///
/// Each call splits the input into the servers' pieces with hierarchical
/// hashing ([`zen_pieces`], Alg. 1) where `H` runs it (the host by
/// default, [`OnBackend`] for a backend: a kernel backend hashes on the
/// device), before the entry round, so an error there reaches every rank. The partition index of the hash
/// bitmaps (`h0` with `P` partitions and its sorted index sets over the
/// dimension) is built once per (ranks, dimension) and kept across calls,
/// as Zen does offline.
///
/// Memory per rank: the partition index (`8 n` bytes, built fallibly
/// before the call: a refused allocation is an error on every rank), plus
/// `O((4 + E) (nnz + result))` for the messages (`E` the element's bytes).
/// Registry name `zen_balanced_parallelism`, parameters `seed`, `r1`,
/// `r2`.
///
/// # Errors
/// [`Error::Disagreement`] (dimension, `h0`), [`Error::OutOfMemory`],
/// the backend's errors, transport errors, [`Error::Corrupt`].
#[derive(Debug, Clone)]
pub struct ZenBalancedParallelism<H = HostHashing> {
    seed: u64,
    slots: Option<(u32, u32)>,
    hashing: H,
    index: Option<Arc<PartitionIndex>>,
    last: Option<ZenStats>,
    /// Pieces by `h0` alone on the host ([`ZenBalancedParallelism::host_split`]).
    host: bool,
    /// The hash functions of the last call and what they were made for
    /// (ranks, rank, slots, entries), kept while those stay the same.
    hash: Option<(HashKey, HierarchicalHash)>,
    /// The call's memory, kept across calls ([`ZenBufs`] for the call's
    /// `E`: the type is the trait's parameter, not this struct's); its
    /// pieces are made by the entry round's local work, for the body.
    scratch: Scratch,
}

/// What a call's hash functions depend on besides the seed: ranks, rank,
/// fixed slots, entries (for the default slots).
type HashKey = (usize, usize, Option<(u32, u32)>, usize);

/// Zen's memory kept across calls.
#[derive(Debug)]
struct ZenBufs<E: Element> {
    push_pull: PushPull<E>,
    probe: HashProbe,
    /// The entry round made this call's pieces.
    ready: bool,
}

impl<E: Element> Default for ZenBufs<E> {
    fn default() -> Self {
        Self {
            push_pull: PushPull::default(),
            probe: HashProbe::new(),
            ready: false,
        }
    }
}

impl ZenBalancedParallelism {
    /// Zen with the `h0` of this seed, hashing on the host with Zen's
    /// memory defaults (`r1 = 2 nnz` parallel slots, `r2 = r1 / 10` serial
    /// ones).
    pub fn new(seed: u64) -> Self {
        Self::hashing(HostHashing, seed)
    }
}

impl<B> ZenBalancedParallelism<OnBackend<B>> {
    /// Zen hashing on backend `b`.
    pub fn on(b: B, seed: u64) -> Self {
        Self::hashing(OnBackend(b), seed)
    }
}

impl<H> ZenBalancedParallelism<H> {
    /// Zen hashing where `hashing` runs it.
    pub fn hashing(hashing: H, seed: u64) -> Self {
        Self {
            seed,
            slots: None,
            hashing,
            index: None,
            last: None,
            host: false,
            hash: None,
            scratch: Scratch::default(),
        }
    }
    /// The most slots (`r1 + r2`) a partition's table may have: 2^24, room
    /// for 8 million entries per partition at Zen's default `r1 = 2 nnz`.
    /// The table takes `P (r1 + r2)` slots of 4 bytes plus a value each,
    /// whatever the input, so a bound keeps a parameter from asking for
    /// gigabytes; within it, the table is allocated fallibly (a refusal is
    /// [`Error::OutOfMemory`] on every rank, from the entry round).
    pub const MAX_SLOTS: u64 = 1 << 24;
    /// Fixed hash memory: `r1` parallel and `r2` serial slots per partition
    /// instead of Zen's defaults for each call's entries.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `r1 == 0` or `r1 + r2` above
    /// [`ZenBalancedParallelism::MAX_SLOTS`].
    pub fn with_slots(mut self, r1: u32, r2: u32) -> Result<Self> {
        if r1 == 0 {
            return Err(Error::invalid("r1", "at least one parallel slot"));
        }
        let slots = u64::from(r1) + u64::from(r2);
        if slots > Self::MAX_SLOTS {
            return Err(Error::invalid(
                "r1",
                format!(
                    "r1 + r2 = {slots} slots per partition above {}",
                    Self::MAX_SLOTS
                ),
            ));
        }
        self.slots = Some((r1, r2));
        Ok(self)
    }
    /// The same collective with its pieces split by `h0` alone on the
    /// host, without hierarchical hashing: the reference the hashing's
    /// pieces are checked against (the same pieces, so the same messages
    /// and result). No [`ZenStats`].
    #[must_use]
    pub fn host_split(self) -> Self {
        Self { host: true, ..self }
    }
    /// The partition index for `p` ranks and dimension `dim`: the kept
    /// one, or the one ranks of this process share ([`shared_index`]).
    fn index_for(&mut self, p: usize, dim: usize) -> Result<Arc<PartitionIndex>> {
        match &self.index {
            Some(index) if index.h0().partitions() as usize == p && index.dim() == dim => {
                Ok(index.clone())
            }
            _ => {
                let index = shared_index(self.seed, p, dim)?;
                self.index = Some(index.clone());
                Ok(index)
            }
        }
    }
    /// What the hashing did on the last call.
    pub fn last_stats(&self) -> Option<ZenStats> {
        self.last
    }
    /// This call's pieces, into the kept buffers.
    fn make_pieces<E: Element>(&mut self, v: &SparseVec<E>, p: usize, rank: usize) -> Result<()>
    where
        H: ZenHashing<E>,
    {
        if self.host {
            let index = self.index_for(p, v.dim())?;
            let bufs = self.scratch.get::<ZenBufs<E>>();
            split_by_owner(v, &Zen { index: &index }, p, &mut bufs.push_pull);
            return Ok(());
        }
        let key = (p, rank, self.slots, v.nnz());
        if self.hash.as_ref().is_none_or(|(k, _)| *k != key) {
            self.hash = None;
            let rehash = self.seed ^ 0x5a5a_0000 ^ rank as u64;
            let hash = match self.slots {
                Some((r1, r2)) => HierarchicalHash::new(self.seed, rehash, p as u32, 3, r1, r2)?,
                None => HierarchicalHash::with_defaults(self.seed, rehash, p as u32, v.nnz())?,
            };
            self.hash = Some((key, hash));
        }
        let hash = &self.hash.as_ref().expect("made above").1;
        let bufs = self.scratch.get::<ZenBufs<E>>();
        let stats =
            self.hashing
                .pieces_into(v, hash, &mut bufs.probe, &mut bufs.push_pull.pieces)?;
        self.last = Some(stats);
        Ok(())
    }
}

/// The partition index of `h0(seed, p)` over `dim` coordinates (8 bytes per
/// coordinate, built fallibly). It is a function of its three arguments
/// and never changes, so the ranks of one process (threads, the simulated
/// cluster's thousand ranks) share one copy while any holds it: the first
/// to ask builds it, under the lock, and the others wait for it.
fn shared_index(seed: u64, p: usize, dim: usize) -> Result<Arc<PartitionIndex>> {
    type Key = (u64, usize, usize);
    static CACHE: Mutex<Vec<(Key, Weak<PartitionIndex>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(_, w)| w.strong_count() > 0);
    let key = (seed, p, dim);
    if let Some(index) = cache
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(index);
    }
    let index = Arc::new(PartitionIndex::new(H0::new(seed, p as u32)?, dim)?);
    cache.push((key, Arc::downgrade(&index)));
    Ok(index)
}

/// The registry name, from which the entry id derives.
const NAME: &str = "zen_balanced_parallelism";

impl<H: ZenHashing<E>, E: Element> SparseAllreduce<E> for ZenBalancedParallelism<H> {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        match self.slots {
            Some((r1, r2)) => format!("seed={},r1={r1},r2={r2}", self.seed),
            None => format!("seed={}", self.seed),
        }
    }
    fn lossless(&self) -> bool {
        true
    }
    /// Push: from every other rank, COO of its `k / P` entries this rank
    /// serves; pull: from every other server, the hash bitmap of its
    /// `n / P` indices and the values of its share of the union. `2 (P - 1)`
    /// rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let (p, n) = (prof.p as f64, prof.n as f64);
        let vb = prof.value_bytes as f64;
        let mine = prof.k_avg() as f64 / p + prof.fullest_excess();
        let push = 12.0 + prof.pair_bytes() * mine;
        let pull = 28.0 + 4.0 * (n / p / 32.0).ceil() + vb * prof.union as f64 / p;
        bytes_cost(2.0 * prof.others(), prof.others() * (push + pull))
    }
    /// Zen's Eq. 1 at the input's densification ratio (values and indices
    /// of the push, values of the pull; the bitmaps not counted).
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        let (p, n) = (prof.p, prof.n);
        let density = prof.k_avg() as f64 / n.max(1) as f64;
        let words = zen_balanced_parallelism(p, n, density, prof.densification(), 1.0);
        Some(Cost::new(2.0 * prof.others(), words))
    }
    /// The partition index (built once) and this call's pieces are made
    /// before the round, so that their failure reaches every rank.
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let (p, dim) = (t.size(), v.dim());
        let ready = self
            .index_for(p, dim)
            .and_then(|_| v.check())
            .and_then(|()| self.make_pieces(v, p, t.rank()))
            .map(|()| self.scratch.get::<ZenBufs<E>>().ready = true);
        Some(admit(NAME, v, &[("h0 seed", self.seed)], ready))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let index = self.index_for(t.size(), v.dim())?;
        let bufs = self.scratch.get::<ZenBufs<E>>();
        assert!(
            std::mem::take(&mut bufs.ready),
            "the entry round made this call's pieces"
        );
        push_pull_into(t, v.dim(), &Zen { index: &index }, &mut bufs.push_pull, out).map(Ok)
    }
}

impl<H: ZenHashing<E>, E: Element> Promises<E> for ZenBalancedParallelism<H> {
    /// Push to every other server, then pull from every other server.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(2 * (p as u64 - 1))
    }
}

impl<E: Element> Registered<E> for ZenBalancedParallelism {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const WARM: bool = true;
    const PLANNED: bool = true;
    const PARAMS: &'static str = "seed (of h0), r1 and r2 (parallel and serial hash slots per partition; default 2 nnz and r1 / 10)";
    const HELP: &'static str =
        "Zen: hierarchical hashing, push COO to the h0 owner, pull hash bitmap + values; lossless";
    fn build(params: &mut Params, _: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        let zen = Self::new(params.take("seed")?.unwrap_or(0x2e7));
        match (params.take("r1")?, params.take("r2")?) {
            (None, None) => Ok(zen),
            (r1, r2) => {
                let r1 = r1.unwrap_or(1024);
                zen.with_slots(r1, r2.unwrap_or((r1 / 10).max(1)))
            }
        }
    }
}

// Zen's Eq. 1, the time of Balanced Parallelism.

/// Zen Eq. 1, Balanced Parallelism: `(n - 1) / n (gamma_n + 1) 2 M d / b`,
/// where `gamma_n` is the densification ratio over all `n` GPUs (Def. 4), `M`
/// the dense size in elements, `d` the density, `b` the bandwidth in
/// elements per second. Each element costs 2 (COO index and value), as in
/// the paper. Returns the time; with `b = 1` it is the words received.
pub fn zen_balanced_parallelism(n: usize, m: usize, density: f64, gamma_n: f64, b: f64) -> f64 {
    crate::profile::frac(n) * (gamma_n + 1.0) * 2.0 * m as f64 * density / b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zen_eq1_by_hand() {
        // n = 4, M = 1000, d = 0.1, gamma_4 = 2.5, b = 1: 3/4 * 3.5 * 200 = 525.
        let bp = zen_balanced_parallelism(4, 1000, 0.1, 2.5, 1.0);
        assert!(approx::relative_eq!(bp, 525.0, max_relative = 1e-9), "{bp}");
        // Fully overlapping indices (gamma = 1): BP = 3/4*2*200 = 300 < HC = 2*200 = 400.
        let hc = crate::cost::zen_hierarchical_centralization(4, 1000, 0.1, |_| 1.0, 1.0);
        assert!(zen_balanced_parallelism(4, 1000, 0.1, 1.0, 1.0) < hc);
    }
}
