//! SparDL (Sec. 3.1-3.2): Spar-Reduce-Scatter with bags for any number of
//! workers, global residual collection, then Bruck all-gather.

use crate::Transport;
use crate::dense::bruck_allgather;
use crate::sparse::{Reduced, agree, put_pairs, read_pairs};
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Error, Result, SparseVec, abs_key};

/// Top `k` of `v` by magnitude (ties: lower index), and the rest.
pub(crate) fn split_topk<E: Element>(v: &SparseVec<E>, k: usize) -> (SparseVec<E>, SparseVec<E>) {
    if v.nnz() <= k {
        return (
            v.clone(),
            SparseVec::new_unchecked(v.dim(), Vec::new(), Vec::new()),
        );
    }
    let mut order: Vec<usize> = (0..v.nnz()).collect();
    let key = |j: usize| abs_key(v.values()[j]);
    if k > 0 {
        order.select_nth_unstable_by(k - 1, |&a, &b| key(b).cmp(&key(a)).then(a.cmp(&b)));
    }
    let mut keep = vec![false; v.nnz()];
    for &j in &order[..k] {
        keep[j] = true;
    }
    let part = |want: bool| {
        let (mut i, mut x) = (Vec::new(), Vec::new());
        for (j, (idx, val)) in v.iter().enumerate() {
            if keep[j] == want {
                i.push(idx);
                x.push(val);
            }
        }
        SparseVec::new_unchecked(v.dim(), i, x)
    };
    (part(true), part(false))
}

fn put<E: Element>(out: &mut Vec<u8>, v: &SparseVec<E>) {
    out.extend_from_slice(&(v.nnz() as u32).to_le_bytes());
    put_pairs(out, v);
}

/// Reads one `nnz: u32, indices, values` block whose indices must lie in
/// `lo..lo + len`.
fn take<E: Element>(b: &mut &[u8], dim: usize, lo: usize, len: usize) -> Result<SparseVec<E>> {
    let corrupt = |d: &str| Error::corrupt("spardl block", d);
    let nnz = u32::from_le_bytes(
        b.get(..4)
            .ok_or_else(|| corrupt("truncated"))?
            .try_into()
            .expect("4 bytes"),
    ) as usize;
    let need = 4 + nnz
        .checked_mul(4 + E::BYTES)
        .ok_or_else(|| corrupt("nnz overflow"))?;
    if b.len() < need {
        return Err(corrupt("truncated pairs"));
    }
    let part = read_pairs::<E>(&b[4..need], nnz, dim, "spardl block")?;
    *b = &b[need..];
    let (first, last) = (part.indices().first(), part.indices().last());
    if first.is_some_and(|&i| (i as usize) < lo) || last.is_some_and(|&i| i as usize >= lo + len) {
        return Err(corrupt("index outside its block"));
    }
    Ok(part)
}

/// SparDL without SAG: Spar-Reduce-Scatter, then Bruck all-gather.
///
/// The dimension is split evenly into `P` blocks and `k` into per-block
/// shares `k_j` (`k / P`, one more for the first `k % P` blocks). Worker `w`
/// keeps block `w` (the preservation bag) and puts the blocks at circular
/// offsets `2^(b-1) .. 2^b` into sending bag `b`, `b = 1 ..= l`,
/// `l = ceil(lg P)` (the last bag holds `P - 2^(l-1)` blocks). At step `i`
/// it sends bag `l - i + 1` to `w + 2^(l-i)` and receives the same bag of
/// `w - 2^(l-i)`, whose blocks it still holds (Thm. 3.1), and adds them in.
/// Every block is cut to its top `k_j` right before it is sent, and the
/// preserved block before the all-gather (the paper's optimized timing).
///
/// Global residual collection (Alg. 1): everything a cut removes, local or
/// received, stays in this rank's `dropped`, so the inputs sum to `result`
/// plus all `dropped`. Each block is reduced at one owner and all-gathered,
/// so `result` is identical on every rank. `2 ceil(lg P)` rounds; with full
/// blocks each rank receives `P - 1` blocks of `k/P` pairs in each phase,
/// SparDL's `4k (P - 1) / P` words (plus 4 bytes of count or frame per
/// block).
///
/// # Errors
/// [`Error::Disagreement`] (dimension, `k`), transport errors,
/// [`Error::Corrupt`].
pub fn spardl<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    k: usize,
) -> Result<Reduced<E>> {
    let dim = v.dim();
    agree(
        t,
        &[
            ("algorithm", 5),
            ("dimension", dim as u64),
            ("element", E::CODE as u64),
            ("k", k as u64),
        ],
    )?;
    let start = t.traffic();
    let (p, w) = (t.size(), t.rank());
    let span = |j: usize| (even_start(j, dim, p), even_len(j, dim, p));
    let share = |j: usize| (k / p + usize::from(j < k % p)).min(span(j).1);
    let mut blocks: Vec<SparseVec<E>> = (0..p).map(|j| v.restrict(span(j).0, span(j).1)).collect();
    let mut dropped = SparseVec::zeros(dim)?;
    let l = usize::BITS - (p - 1).leading_zeros();
    for i in 1..=l {
        let dist = 1usize << (l - i);
        let bag = dist..(2 * dist).min(p);
        let mut msg = Vec::new();
        for d in bag.clone() {
            let j = (w + d) % p;
            let (kept, cut) = split_topk(&blocks[j], share(j));
            dropped = dropped.merge_sum(&cut)?;
            put(&mut msg, &kept);
        }
        let got = t.exchange((w + dist) % p, &msg, (w + p - dist) % p)?;
        let mut rest: &[u8] = &got;
        for d in 0..bag.len() {
            let j = (w + d) % p;
            let (lo, len) = span(j);
            let part = take::<E>(&mut rest, dim, lo, len)?;
            blocks[j] = blocks[j].merge_sum(&part)?;
        }
        if !rest.is_empty() {
            return Err(Error::corrupt("spardl bag", "trailing bytes"));
        }
    }
    let (mine, cut) = split_topk(&blocks[w], share(w));
    dropped = dropped.merge_sum(&cut)?;
    let mut block = Vec::new();
    put(&mut block, &mine);
    let all = bruck_allgather(t, &block)?;
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for (q, b) in all.iter().enumerate() {
        let (lo, len) = span(q);
        let mut rest: &[u8] = b;
        let part = take::<E>(&mut rest, dim, lo, len)?;
        if !rest.is_empty() || part.nnz() > share(q) {
            return Err(Error::corrupt(
                "spardl block",
                format!(
                    "block {q}: {} entries for a share of {}",
                    part.nnz(),
                    share(q)
                ),
            ));
        }
        idx.extend_from_slice(part.indices());
        val.extend_from_slice(part.values());
    }
    Ok(Reduced {
        result: SparseVec::new_unchecked(dim, idx, val),
        dropped,
        traffic: t.traffic().since(&start),
    })
}
