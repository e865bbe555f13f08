//! Zen's Balanced Parallelism (push COO to the `h0` owner, pull the hash
//! bitmap plus values). Its Hierarchical Centralization is SparCML's
//! recursive doubling ([`crate::ssar_recursive_double`]), as Zen's Table 3
//! classifies it.

use crate::Transport;
use crate::algorithm::{Defaults, Params, Registered, SparseAllreduce};
use crate::plan::{Profile, bytes_cost};
use crate::push_pull::{Scheme, push_pull};
use crate::sparse::{Id, Reduced, enter};
use sparse_core::cost::{self, Cost};
use sparse_core::encoding::{Coo, Encoding, HashBitmap, PartitionIndex, Raw};
use sparse_core::{Element, Error, H0, Result, SparseVec};
use std::sync::Arc;

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
}

/// Zen's Balanced Parallelism (Def. 6, Sec. 3): `h0`, shared by all ranks,
/// assigns every index to a server (one per rank), which balances the load
/// whatever the skew (Thm. 2). Push sends COO; pull sends Zen's hash bitmap
/// (Alg. 2) of the server's partition plus the values, so the index part a
/// rank receives is at most `N/8` bytes plus a word of padding per server,
/// whatever the density.
///
/// `index` holds `h0` (with `P` partitions) and its sorted index sets over
/// the dimension, computed once per dimension, as Zen does offline. Host
/// data: hashing on the device is the backend's `hash_partition`.
///
/// Memory per rank: the partition index (`8 n` bytes, built once per
/// dimension by the caller; [`ZenBalancedParallelism`] builds it fallibly before
/// the call and turns a refused allocation into an error on every rank), plus
/// `O((4 + E) (nnz + result))` for the messages (`E` the element's bytes).
///
/// # Errors
/// [`Error::Disagreement`] (dimension, `h0`), [`Error::InvalidParameter`]
/// if `index` does not fit (partitions != P, other dimension), transport
/// errors, [`Error::Corrupt`].
pub fn zen_balanced_parallelism<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    index: &Arc<PartitionIndex>,
) -> Result<Reduced<E>> {
    let fits = if index.h0().partitions() as usize != t.size() || index.dim() != v.dim() {
        Err(Error::invalid(
            "index",
            format!(
                "{} partitions over {} for {} ranks and dimension {}",
                index.h0().partitions(),
                index.dim(),
                t.size(),
                v.dim()
            ),
        ))
    } else {
        Ok(())
    };
    enter_zen(t, v, index.h0().seed(), fits)?;
    push_pull(t, v, &Zen { index })
}

/// The entry of Zen's Balanced Parallelism on a rank that could not build
/// its partition index (`why`, e.g. [`Error::OutOfMemory`] for a large
/// dimension): the failure travels in the entry round, so every rank
/// returns an error instead of the others waiting on this one.
///
/// # Errors
/// Always: `why` on this rank ([`Error::PeerError`] on the others).
pub(crate) fn zen_failed<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    seed: u64,
    why: Error,
) -> Result<Reduced<E>> {
    enter_zen(t, v, seed, Err(why.clone()))?;
    Err(why)
}

fn enter_zen<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    seed: u64,
    local: Result<()>,
) -> Result<()> {
    enter(
        t,
        Id::ZenBalancedParallelism,
        v,
        &[("h0 seed", seed)],
        local,
    )
    .map(drop)
}

/// [`zen_balanced_parallelism`] as a [`SparseAllreduce`] (registry name
/// `zen_balanced_parallelism`), with its partition index built once per
/// (ranks, dimension) and kept across calls.
#[derive(Debug, Clone)]
pub struct ZenBalancedParallelism {
    seed: u64,
    index: Option<Arc<PartitionIndex>>,
}

impl ZenBalancedParallelism {
    /// Zen with the `h0` of this seed.
    pub fn new(seed: u64) -> Self {
        Self { seed, index: None }
    }
}

impl<E: Element> SparseAllreduce<E> for ZenBalancedParallelism {
    fn name(&self) -> String {
        "zen_balanced_parallelism".into()
    }
    fn params(&self) -> String {
        format!("seed={}", self.seed)
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
        let words = cost::zen_balanced_parallelism(p, n, density, prof.densification(), 1.0);
        Some(Cost::new(2.0 * prof.others(), words))
    }
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        let (p, dim) = (t.size(), v.dim());
        let index = match &self.index {
            Some(index) if index.h0().partitions() as usize == p && index.dim() == dim => {
                index.clone()
            }
            _ => {
                // Built before the call (8 bytes per coordinate); a refused
                // allocation reaches every rank as an error.
                let built = H0::new(self.seed, p as u32)
                    .and_then(|h0| PartitionIndex::new(h0, dim))
                    .map(Arc::new);
                let index = match built {
                    Ok(index) => index,
                    Err(e) => return zen_failed(t, v, self.seed, e),
                };
                self.index = Some(index.clone());
                index
            }
        };
        zen_balanced_parallelism(t, v, &index)
    }
}

impl<E: Element> Registered<E> for ZenBalancedParallelism {
    const NAME: &'static str = "zen_balanced_parallelism";
    const PARAMS: &'static str = "seed (of h0)";
    const HELP: &'static str = "Zen: push COO to the h0 owner, pull hash bitmap + values; lossless";
    fn build(params: &mut Params, _: Defaults) -> Result<Self> {
        Ok(Self::new(params.take("seed")?.unwrap_or(0x2e7)))
    }
}
