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
/// # Errors
/// [`Error::Disagreement`] (dimension, `h0`), [`Error::InvalidParameter`]
/// if `index` does not fit (partitions != P, other dimension), transport
/// errors, [`Error::Corrupt`].
pub fn zen_balanced_parallelism<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    index: &Arc<PartitionIndex>,
) -> Result<Reduced<E>> {
    enter::<_, E>(
        t,
        Id::ZenBalancedParallelism,
        v.dim(),
        &[("h0 seed", index.h0().seed())],
    )?;
    if index.h0().partitions() as usize != t.size() || index.dim() != v.dim() {
        return Err(Error::invalid(
            "index",
            format!(
                "{} partitions over {} for {} ranks and dimension {}",
                index.h0().partitions(),
                index.dim(),
                t.size(),
                v.dim()
            ),
        ));
    }
    push_pull(t, v, &Zen { index })
}
