//! gTopk (Shi et al., as SparDL's Table 1 states it): a reduction tree with
//! top-k re-selection, then a broadcast tree.

use crate::algorithm::{Budget, Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::entry::{Admission, Reduced, admit};
use crate::frame::{PairsView, put_block, take_block_view, take_parts};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::{Scratch, Work, add_into, copy_into};
use crate::{Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::sparse::merge_sum_into;
use sparse_core::topk::split_topk_into;
use sparse_core::{Element, Error, Result, SparseVec, abs_key};

/// What gTopk keeps across calls: the sum of a level (in `kept`), its
/// cut, a merge buffer, the selection's keys and the message it sends.
type Mem<E> = Work<E>;

/// The pairs of a gTopk message (`nnz: u32`, pairs; at most `k`), read in
/// place.
fn read<E: Element>(b: &[u8], dim: usize, k: usize) -> Result<PairsView<'_, E>> {
    let mut rest = b;
    let part = take_block_view::<E>(&mut rest, dim, 0, dim, "gtopk message")?;
    if !rest.is_empty() || part.0.len() > k {
        return Err(Error::corrupt(
            "gtopk message",
            format!("{} entries for k = {k}", part.0.len()),
        ));
    }
    Ok(part)
}

/// gTopk after the entry round, into `out`: the reduction tree, then the
/// broadcast. The result is built in `out.result` and the cuts gathered
/// in `out.dropped`, their allocations reused with `mem`'s and the
/// transport's buffers, so that a warm call allocates nothing that grows
/// with the data.
fn trees<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    k: usize,
    mem: &mut Mem<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    let dim = v.dim();
    let (p, r) = (t.size(), t.rank());
    // This rank's own top k in `out.result`, the rest in `out.dropped`.
    v.split_topk_into(k, &mut out.result, &mut out.dropped, &mut mem.keys);
    let mut got = t.take_buffer();
    let mut dist = 1;
    while dist < p {
        if r % (2 * dist) == dist {
            mem.msg.clear();
            put_block(&mut mem.msg, &out.result);
            t.send(r - dist, &mem.msg)?;
            break;
        }
        if r + dist < p {
            t.recv_into(r + dist, &mut got)?;
            let (i, x) = read::<E>(&got, dim, k)?;
            merge_sum_into(
                (out.result.indices(), out.result.values()),
                (&i, &x),
                &mut mem.kept.idx,
                &mut mem.kept.val,
            );
            let (mut ki, mut kv) = take_parts(&mut out.result);
            split_topk_into(
                (&mem.kept.idx, &mem.kept.val),
                k,
                abs_key,
                (&mut ki, &mut kv),
                (&mut mem.cut.idx, &mut mem.cut.val),
                &mut mem.keys,
            );
            out.result = SparseVec::new_unchecked(dim, ki, kv);
            add_into(&mut out.dropped, (&mem.cut.idx, &mem.cut.val), &mut mem.tmp);
        }
        dist <<= 1;
    }
    // Broadcast down the same tree: a rank receives from the parent it sent
    // to (r minus its lowest set bit), then serves its own children.
    let low = if r == 0 {
        p.next_power_of_two()
    } else {
        1 << r.trailing_zeros()
    };
    if r != 0 {
        t.recv_into(r - low, &mut got)?;
        let (i, x) = read::<E>(&got, dim, k)?;
        copy_into(&mut out.result, dim, &i, &x);
    }
    t.give_buffer(got);
    mem.msg.clear();
    put_block(&mut mem.msg, &out.result);
    let mut dist = low / 2;
    while dist >= 1 {
        if r + dist < p {
            t.send(r + dist, &mem.msg)?;
        }
        dist /= 2;
    }
    Ok(())
}

/// gTopk for any `P`: every rank cuts its input to its top `k`; in a
/// binomial reduction tree (`ceil(lg P)` steps; at distance `2^i`, rank `r`
/// with `r mod 2^(i+1) = 2^i` sends to `r - 2^i`), each receiver adds the
/// incoming `k` pairs to its own and cuts the sum back to its top `k`
/// (ties: lower index). Rank 0 ends with the global top-`k` set and sends
/// it down the mirrored binomial broadcast tree, so every rank returns
/// rank 0's bytes: bitwise identical. The binomial tree needs no power of
/// two (Shi et al. assume one; SparDL notes gTopk only runs there).
///
/// Every cut stays in the `dropped` of the rank that made it, so the inputs
/// sum to `result` plus all `dropped` (residual collection as in SparDL).
/// Rank 0 is the busiest: `2 ceil(lg P)` rounds, receiving `ceil(lg P)`
/// messages of `4 + k (4 + isize)` bytes when every rank has `k` entries,
/// and sending as many (Table 1's `4 k lg P` words counts both).
///
/// Memory per rank: `O((4 + E) (nnz + k))` bytes (`E` the element's bytes):
/// the input and two `k`-entry messages at a time.
///
/// Registry name `gtopk`, parameter `k` or `density`.
///
/// # Errors
/// [`Error::Disagreement`] (dimension, `k`), transport errors,
/// [`Error::Corrupt`].
#[derive(Debug, Clone)]
pub struct Gtopk {
    budget: Budget,
    /// Buffers kept across calls (not state: results never depend on it).
    mem: Scratch,
}

impl Gtopk {
    /// gTopk keeping `budget` (a count, or a density of each call's
    /// dimension).
    pub fn new(budget: Budget) -> Self {
        Self {
            budget,
            mem: Scratch::default(),
        }
    }
}

/// The registry name, from which the entry id derives.
const NAME: &str = "gtopk";

impl<E: Element> SparseAllreduce<E> for Gtopk {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        self.budget.param()
    }
    fn lossless(&self) -> bool {
        false
    }
    /// What the root receives: from its child `i`, the top `k` of a
    /// subtree of `2^i` ranks (all of it when the subtree holds fewer).
    fn cost(&self, prof: &Profile) -> Cost {
        let k = self.budget.k_for(prof.n);
        let lg = cost::ceil_log2(prof.p);
        let bytes: f64 = (0..lg)
            .map(|i| {
                let subtree = prof.union_of((1u64 << i) as f64);
                4.0 + prof.pair_bytes() * subtree.min(k as f64)
            })
            .sum();
        bytes_cost(2.0 * lg as f64, bytes)
    }
    /// Table 1: `4 k lg P` words, the root's words sent and received.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(gtopk(prof.p, self.budget.k_for(prof.n)))
    }
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let k = self.budget.k_for(v.dim());
        Some(admit(NAME, v, &[("k", k as u64)], Ok(())))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let mem = self.mem.get::<Mem<E>>();
        trees(t, v, self.budget.k_for(v.dim()), mem, out)?;
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for Gtopk {
    /// Binomial trees: a rank receives from each child and sends to its
    /// parent, then the mirror image.
    fn expected_rounds(&self, p: usize, r: usize) -> Option<u64> {
        let low = if r == 0 {
            p.next_power_of_two()
        } else {
            1 << r.trailing_zeros()
        };
        let children = (0..low.ilog2()).filter(|&i| r + (1 << i) < p).count() as u64;
        Some(2 * (children + u64::from(r != 0)))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
}

impl<E: Element> Registered<E> for Gtopk {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = false;
    const BUDGET: bool = true;
    const WARM: bool = true;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension)";
    const HELP: &'static str = "gTopk: top-k merged up a binomial tree, broadcast down; lossy";
    fn build(params: &mut Params, d: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        Ok(Self::new(params.take_budget(d)?))
    }
}

// SparDL's Table 1 formula for gTopk.

/// gTopk (SparDL Table 1, Shi et al.): a reduction tree with top-k
/// re-selection, then a broadcast tree: `2 lg P` rounds, `4 k lg P` words.
pub fn gtopk(p: usize, k: usize) -> Cost {
    let lg = cost::ceil_log2(p) as f64;
    Cost::new(2.0 * lg, 4.0 * lg * k as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spardl_table1_by_hand() {
        // P = 8, k = 100: 2 * 3 rounds, 4 * 100 * 3 words.
        assert_eq!(gtopk(8, 100), Cost::new(6.0, 1200.0));
    }
}
