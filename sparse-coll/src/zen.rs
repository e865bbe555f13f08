//! Zen's Balanced Parallelism (push COO to the `h0` owner, pull the hash
//! bitmap plus values). Its Hierarchical Centralization is SparCML's
//! recursive doubling ([`crate::ssar_recursive_double`]), as Zen's Table 3
//! classifies it.

use crate::Transport;
use crate::push_pull::{Scheme, push_pull};
use crate::sparse::{Id, Reduced, enter};
use sparse_core::encoding::{Coo, Encoding, HashBitmap, PartitionIndex, Raw};
use sparse_core::{Element, Error, Result, SparseVec};
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
/// dimension by the caller; [`crate::Allreduce`] builds it fallibly before
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
