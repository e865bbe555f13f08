//! Point-to-point push/pull schemes with one server per rank: Zen's
//! Balanced Parallelism and the OmniReduce-style block baseline.

use crate::Transport;
use crate::sparse::{Reduced, agree};
use sparse_core::encoding::{Block, Coo, Encoding, HashBitmap, PartitionIndex, Raw};
use sparse_core::{Element, Error, Result, SparseVec};
use std::sync::Arc;

/// One push/pull scheme: which server owns an index, and how the pushed
/// pieces and the pulled partition results are encoded.
trait Scheme<E: Element> {
    fn owner(&self, idx: u32) -> usize;
    fn push(&self) -> Box<dyn Encoding<E> + '_>;
    fn pull(&self, server: usize) -> Result<Box<dyn Encoding<E> + '_>>;
}

/// Push: in `P - 1` direct steps every rank sends server `s` its entries
/// owned by `s`; servers sum them in rank order. Pull: in `P - 1` direct
/// steps every server sends its partition result to every rank. Lossless;
/// each partition is summed once, so every rank holds the same result.
fn push_pull<T: Transport + ?Sized, E: Element, S: Scheme<E>>(
    t: &mut T,
    v: &SparseVec<E>,
    scheme: &S,
) -> Result<Reduced<E>> {
    let (p, r, dim) = (t.size(), t.rank(), v.dim());
    let start = t.traffic();
    let mut pieces: Vec<(Vec<u32>, Vec<E>)> = vec![(Vec::new(), Vec::new()); p];
    for (i, x) in v.iter() {
        let s = scheme.owner(i);
        pieces[s].0.push(i);
        pieces[s].1.push(x);
    }
    let pieces: Vec<SparseVec<E>> = pieces
        .into_iter()
        .map(|(i, x)| SparseVec::new_unchecked(dim, i, x))
        .collect();
    let push = scheme.push();
    let mut received: Vec<Option<SparseVec<E>>> = vec![None; p];
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let got = t.exchange(to, &push.encode(&pieces[to])?, from)?;
        let part: SparseVec<E> = push.decode(&got)?;
        if part.indices().iter().any(|&i| scheme.owner(i) != r) {
            return Err(Error::corrupt(
                "push message",
                format!("rank {from} pushed an index owned by another server"),
            ));
        }
        received[from] = Some(part);
    }
    // Sum in rank order: rank 0's piece first.
    received[r] = Some(pieces[r].clone());
    let mut mine = SparseVec::zeros(dim)?;
    for piece in received.iter().flatten() {
        mine = mine.merge_sum(piece)?;
    }
    let pull_mine = scheme.pull(r)?.encode(&mine)?;
    let mut parts: Vec<Option<SparseVec<E>>> = vec![None; p];
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let got = t.exchange(to, &pull_mine, from)?;
        parts[from] = Some(scheme.pull(from)?.decode(&got)?);
    }
    // The owner reads its own partition through the pull encoding too, so
    // that every rank sees the same entries (the block encoding, say, does
    // not keep explicit zeros).
    parts[r] = Some(scheme.pull(r)?.decode(&pull_mine)?);
    let mut result = SparseVec::zeros(dim)?;
    for part in parts.into_iter().flatten() {
        result = result.merge_sum(&part)?;
    }
    Ok(Reduced {
        result,
        dropped: SparseVec::zeros(dim)?,
        traffic: t.traffic().since(&start),
    })
}

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
    agree(
        t,
        &[
            ("algorithm", 6),
            ("dimension", v.dim() as u64),
            ("element", E::CODE as u64),
            ("h0 seed", index.h0().seed()),
        ],
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

struct Omni {
    dim: usize,
    p: usize,
    block: Block<Raw>,
}

impl<E: Element> Scheme<E> for Omni {
    fn owner(&self, idx: u32) -> usize {
        sparse_core::stats::even_part(idx as usize, self.dim, self.p)
    }
    fn push(&self) -> Box<dyn Encoding<E> + '_> {
        Box::new(self.block)
    }
    fn pull(&self, _server: usize) -> Result<Box<dyn Encoding<E> + '_>> {
        Ok(Box::new(self.block))
    }
}

/// The OmniReduce-style baseline Zen improves on: point-to-point, one-shot,
/// with the dimension split evenly across the servers (imbalanced when the
/// non-zeros are skewed, Zen Table 3), pieces sent as OmniReduce's blocks
/// (ids of the non-zero blocks of `block_size` plus their whole values).
/// Lossless as a dense vector (explicit zeros inside a block are not
/// kept).
///
/// # Errors
/// [`Error::Disagreement`], [`Error::InvalidParameter`] for a zero block
/// size, transport errors, [`Error::Corrupt`].
pub fn omnireduce_blocks<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    block_size: usize,
) -> Result<Reduced<E>> {
    agree(
        t,
        &[
            ("algorithm", 7),
            ("dimension", v.dim() as u64),
            ("element", E::CODE as u64),
            ("block size", block_size as u64),
        ],
    )?;
    let scheme = Omni {
        dim: v.dim(),
        p: t.size(),
        block: Block::new(block_size, Raw)?,
    };
    push_pull(t, v, &scheme)
}
