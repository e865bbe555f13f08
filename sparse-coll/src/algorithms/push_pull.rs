//! The point-to-point push/pull skeleton with one server per rank, shared by
//! Zen's Balanced Parallelism and the OmniReduce-style block baseline.

use crate::Transport;
use crate::entry::Reduced;
use crate::frame::sum_all;
use sparse_core::encoding::Encoding;
use sparse_core::{Element, Error, Result, SparseVec};

/// One push/pull scheme: which server owns an index, and how the pushed
/// pieces and the pulled partition results are encoded.
pub(crate) trait Scheme<E: Element> {
    fn owner(&self, idx: u32) -> usize;
    fn push(&self) -> Box<dyn Encoding<E> + '_>;
    fn pull(&self, server: usize) -> Result<Box<dyn Encoding<E> + '_>>;
}

/// Push: in `P - 1` direct steps every rank sends server `s` its entries
/// owned by `s`; servers sum them in rank order. Pull: in `P - 1` direct
/// steps every server sends its partition result to every rank. Lossless;
/// each partition is summed once, so every rank holds the same result.
/// The entries of `v` by owner, one piece per server of `p`, each in index
/// order.
pub(crate) fn split_by_owner<E: Element, S: Scheme<E>>(
    v: &SparseVec<E>,
    scheme: &S,
    p: usize,
) -> Vec<SparseVec<E>> {
    let mut pieces: Vec<(Vec<u32>, Vec<E>)> = vec![(Vec::new(), Vec::new()); p];
    for (i, x) in v.iter() {
        let s = scheme.owner(i);
        pieces[s].0.push(i);
        pieces[s].1.push(x);
    }
    pieces
        .into_iter()
        .map(|(i, x)| SparseVec::new_unchecked(v.dim(), i, x))
        .collect()
}

/// Push `pieces[s]` (this rank's entries owned by server `s`) to every
/// server, sum what this rank serves, pull every server's sum.
pub(crate) fn push_pull<T: Transport + ?Sized, E: Element, S: Scheme<E>>(
    t: &mut T,
    v: &SparseVec<E>,
    scheme: &S,
    pieces: Vec<SparseVec<E>>,
) -> Result<Reduced<E>> {
    let (p, r, dim) = (t.size(), t.rank(), v.dim());
    let start = t.traffic();
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
    let mine = sum_all(received.iter().flatten(), dim);
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
    let result = sum_all(parts.iter().flatten(), dim);
    Ok(Reduced {
        result,
        dropped: SparseVec::zeros(dim)?,
        traffic: t.traffic().since(&start),
        ..Reduced::default()
    })
}
