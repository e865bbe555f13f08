//! SparDL (Sec. 3): Spar-Reduce-Scatter with bags for any number of
//! workers ([`srs`]), global residual collection, Bruck all-gather, and the
//! Spar-All-Gather variants with teams: R-SAG ([`rsag`]) and B-SAG with
//! Alg. 2's h-adjustment ([`bsag`]). This file holds SparDL without SAG
//! and what the three share: the block layout, the cuts of global
//! residual collection, the teams and the final all-gather.

mod bsag;
mod rsag;
mod srs;

pub use bsag::{SpardlBsag, spardl_bsag};
pub use rsag::{SpardlRsag, spardl_rsag};

use crate::algorithm::{Budget, Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::dense::{bruck_allgather, gather_bruck};
use crate::entry::{Admission, Reduced, admit};
use crate::failure::Failure;
use crate::frame::{put_block, take_block_view, take_parts};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::{Scratch, Work, add_into, copy_into};
use crate::values::{WireValues, values_param};
use crate::{Entered, Group, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::sparse::merge_sum_into;
use sparse_core::stats::{even_len, even_start};
use sparse_core::topk::split_topk_into;
use sparse_core::{Element, Error, Result, SparseVec, abs_key};

use rsag::{RSAG_NAME, rsag_teams};
use srs::spar_reduce_scatter;

/// The teams of the SparDL variants' Spar-All-Gather (`d=`): a fixed
/// count, or (`None`) chosen at each call from the number of ranks.
fn teams_param(params: &mut Params) -> Result<Option<usize>> {
    params.take::<usize>("d")
}

/// The block layout of SRS over `m` workers: block `j` is the even span
/// `j` of the dimension, and its share of `k` is `k / m` (one more for the
/// first `k % m` blocks), at most the span's length.
#[derive(Debug, Clone)]
struct Layout<E> {
    dim: usize,
    m: usize,
    k: usize,
    /// How block values travel.
    values: WireValues<E>,
}

/// What every rank keeps and how it sends it: the budget `k` of this call
/// and the value codec of the messages.
#[derive(Debug, Clone)]
struct Keep<E> {
    k: usize,
    values: WireValues<E>,
}

impl<E: Element> Layout<E> {
    fn span(&self, j: usize) -> (usize, usize) {
        (
            even_start(j, self.dim, self.m),
            even_len(j, self.dim, self.m),
        )
    }
    fn share(&self, j: usize) -> usize {
        sparse_core::topk::block_share(self.k, self.dim, self.m, j)
    }
}

/// Buffers the SparDL variants keep across calls (not state: results
/// never depend on them).
type Mem<E> = Work<E>;

/// An empty vector of dimension `dim`.
fn empty<E: Element>(dim: usize) -> SparseVec<E> {
    SparseVec::new_unchecked(dim, Vec::new(), Vec::new())
}

/// The final Bruck all-gather of SparDL: every worker of `t` contributes
/// its block (at most its share), and all get the concatenation, in
/// `out` (its allocations reused).
///
/// With a lossy codec, a worker that knows of a failure ([`Failure`]: its
/// own, or one Spar-Reduce-Scatter brought it) contributes a failure frame
/// instead, and so does one whose block the codec cannot carry; every
/// worker then learns of it here, and `out` is no result.
fn gather_blocks<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    mine: &SparseVec<E>,
    lay: &Layout<E>,
    dropped: &mut SparseVec<E>,
    msg: &mut Vec<u8>,
    out: &mut SparseVec<E>,
    failure: &mut Failure,
) -> Result<()> {
    let check = |q: usize, nnz: usize, rest: &[u8]| {
        if !rest.is_empty() || nnz > lay.share(q) {
            return Err(Error::corrupt(
                "spardl block",
                format!("block {q}: {nnz} entries for a share of {}", lay.share(q)),
            ));
        }
        Ok(())
    };
    if !lay.values.is_raw() {
        // Every rank, this one included, takes the block as the codec
        // carries it; the owner keeps the exact remainder.
        let packed = failure.attempt(t.rank(), || lay.values.pack(mine));
        let all = match packed {
            Some(packed) => {
                *dropped = dropped.merge_sum(packed.rest())?;
                bruck_allgather(t, packed.bytes())?
            }
            None => bruck_allgather(t, &failure.frame())?,
        };
        // Every worker sees every frame, so all of them end knowing the
        // same lowest failing worker.
        let p = t.size();
        for b in &all {
            failure.note(b, p)?;
        }
        if failure.failed() {
            return Ok(());
        }
        let (mut idx, mut val) = take_parts(out);
        for (q, b) in all.iter().enumerate() {
            let (lo, len) = lay.span(q);
            let mut rest: &[u8] = b;
            let part = lay
                .values
                .take(&mut rest, lay.dim, lo, len, "spardl block")?;
            check(q, part.nnz(), rest)?;
            idx.extend_from_slice(part.indices());
            val.extend_from_slice(part.values());
        }
        *out = SparseVec::new_unchecked(lay.dim, idx, val);
        return Ok(());
    }
    msg.clear();
    put_block(msg, mine);
    let own = [&msg[..]];
    let g = gather_bruck(t, &own)?;
    let (mut idx, mut val) = take_parts(out);
    for q in 0..t.size() {
        let (lo, len) = lay.span(q);
        let mut rest = g.block(q).unwrap_or(own[0]);
        let (i, x) = take_block_view::<E>(&mut rest, lay.dim, lo, len, "spardl block")?;
        check(q, i.len(), rest)?;
        idx.extend_from_slice(&i);
        val.extend_from_slice(&x);
    }
    g.release(t);
    *out = SparseVec::new_unchecked(lay.dim, idx, val);
    Ok(())
}

/// Cuts `block` to its top `n` in place and adds the rest to `dropped`.
fn cut_to<E: Element>(
    block: &mut SparseVec<E>,
    n: usize,
    dropped: &mut SparseVec<E>,
    mem: &mut Mem<E>,
) {
    if block.nnz() <= n {
        return;
    }
    let dim = block.dim();
    split_topk_into(
        (block.indices(), block.values()),
        n,
        abs_key,
        (&mut mem.kept.idx, &mut mem.kept.val),
        (&mut mem.cut.idx, &mut mem.cut.val),
        &mut mem.keys,
    );
    copy_into(block, dim, &mem.kept.idx, &mem.kept.val);
    add_into(dropped, (&mem.cut.idx, &mem.cut.val), &mut mem.tmp);
}

/// `block` becomes `block + (idx, val)` cut to its top `n`; of what the
/// cut removes, the entries `mine` picks are added to `dropped`.
fn add_and_cut<E: Element>(
    block: &mut SparseVec<E>,
    other: (&[u32], &[E]),
    n: usize,
    mine: impl Fn(u32) -> bool,
    dropped: &mut SparseVec<E>,
    mem: &mut Mem<E>,
) {
    let dim = block.dim();
    merge_sum_into(
        (block.indices(), block.values()),
        other,
        &mut mem.tmp.idx,
        &mut mem.tmp.val,
    );
    let (mut ki, mut kv) = take_parts(block);
    split_topk_into(
        (&mem.tmp.idx, &mem.tmp.val),
        n,
        abs_key,
        (&mut ki, &mut kv),
        (&mut mem.cut.idx, &mut mem.cut.val),
        &mut mem.keys,
    );
    *block = SparseVec::new_unchecked(dim, ki, kv);
    pick_cut(mine, dropped, mem);
}

/// Adds the entries of `mem.cut` that `mine` picks to `dropped`.
fn pick_cut<E: Element>(mine: impl Fn(u32) -> bool, dropped: &mut SparseVec<E>, mem: &mut Mem<E>) {
    let (ki, kv) = (&mut mem.kept.idx, &mut mem.kept.val);
    ki.clear();
    kv.clear();
    for (&i, &x) in mem.cut.idx.iter().zip(&mem.cut.val) {
        if mine(i) {
            ki.push(i);
            kv.push(x);
        }
    }
    add_into(dropped, (&mem.kept.idx, &mem.kept.val), &mut mem.tmp);
}

/// The entry round of SparDL with and without SAG on `d` teams: the
/// algorithm `name` and its `extra` parameters. Parameter errors travel in
/// it, so that every rank returns one even where only some ranks passed a
/// bad `d`.
fn teams_admit<T: Transport + ?Sized, E: Element>(
    t: &T,
    v: &SparseVec<E>,
    d: usize,
    name: &str,
    extra: &[(&'static str, u64)],
    ready: Result<()>,
) -> Admission {
    let local = ready.and_then(|()| {
        if name == RSAG_NAME {
            rsag_teams(d)
        } else {
            Ok(())
        }
        .and_then(|()| teams(t, d).map(drop))
    });
    admit(name, v, extra, local)
}

/// [`teams_admit`] for SparDL with SAG: budget `k` and `d` teams.
fn sag_admit<T: Transport + ?Sized, E: Element>(
    t: &T,
    v: &SparseVec<E>,
    k: usize,
    d: usize,
    name: &str,
) -> Admission {
    teams_admit(
        t,
        v,
        d,
        name,
        &[("k", k as u64), ("teams", d as u64)],
        Ok(()),
    )
}

/// The body of SparDL with and without SAG after [`teams_admit`], into
/// `out` (its allocations reused with `mem`'s): Spar-Reduce-Scatter inside
/// this worker's team of `m = P / d` workers over `m` blocks, then `sag`
/// between the `d` workers of this worker's column (given the layout,
/// this worker's position in its team, its block as SRS left it, which it
/// turns into the block for the final all-gather, and `dropped`, to which
/// it adds whatever it cuts), then the Bruck all-gather inside the team.
/// With `d = 1` the column is this worker alone. The inner error is a
/// failure every worker agrees on with no message left unread (a lossy
/// codec's, [`Failure`]); the SAG variants send raw values, which never
/// fail so.
fn in_teams<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    budget: Keep<E>,
    d: usize,
    mem: &mut Mem<E>,
    out: &mut Reduced<E>,
    sag: impl FnOnce(
        &mut Group<'_, T>,
        &Layout<E>,
        usize,
        &mut SparseVec<E>,
        &mut SparseVec<E>,
        &mut Mem<E>,
    ) -> Result<()>,
) -> Result<Result<()>> {
    let dim = v.dim();
    let (team, column) = teams(t, d)?;
    let lay = Layout {
        dim,
        m: team.len(),
        k: budget.k,
        values: budget.values,
    };
    let (i, x) = take_parts(&mut out.dropped);
    let mut dropped = SparseVec::new_unchecked(dim, i, x);
    let pos = team.iter().position(|&r| r == t.rank()).expect("a member");
    let mut failure = Failure::default();
    spar_reduce_scatter(
        &mut Group::new(t, team.clone())?,
        v,
        &lay,
        &mut dropped,
        mem,
        &mut failure,
    )?;
    let mut block = std::mem::replace(&mut mem.blocks[pos], empty(dim));
    if !failure.failed() {
        sag(
            &mut Group::new(t, column)?,
            &lay,
            pos,
            &mut block,
            &mut dropped,
            mem,
        )?;
    }
    gather_blocks(
        &mut Group::new(t, team)?,
        &block,
        &lay,
        &mut dropped,
        &mut mem.msg,
        &mut out.result,
        &mut failure,
    )?;
    mem.blocks[pos] = block;
    out.dropped = dropped;
    Ok(failure.outcome())
}

/// The teams of SparDL's SAG: `P` workers in `d` teams of `m = P / d`
/// consecutive ranks. Team `w / m`, position `w % m`; the column of a
/// worker is the `d` workers at its position, one per team.
fn teams<T: Transport + ?Sized>(t: &T, d: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    let p = t.size();
    if d == 0 || !p.is_multiple_of(d) {
        return Err(Error::invalid(
            "d",
            format!(
                "d = {d} teams do not divide {p} ranks evenly: give a d that divides the \
                 number of ranks, or leave d out"
            ),
        ));
    }
    let (m, w) = (p / d, t.rank());
    let team = (0..m).map(|j| (w / m) * m + j).collect();
    let column = (0..d).map(|j| j * m + w % m).collect();
    Ok((team, column))
}

/// The parameters of a SAG variant: the budget, and `d` when fixed.
fn k_and_teams(budget: Budget, d: Option<usize>) -> String {
    match d {
        Some(d) => format!("{budget},d={d}"),
        None => budget.param(),
    }
}

/// SparDL without SAG: Spar-Reduce-Scatter, then Bruck all-gather.
///
/// The dimension is split evenly into `P` blocks and `k` into per-block
/// shares `k_j` (`k / P`, one more for the first `k % P` blocks). SRS
/// (see the bags in the crate README and Sec. 3.1) reduces block `w` at
/// worker `w` in `ceil(lg P)` steps, whose sources and targets differ, so any
/// `P` works without extra steps; every block is cut to its top `k_j` right
/// before it is sent, and the preserved block before the all-gather (the
/// paper's optimized timing).
///
/// Global residual collection (Alg. 1): everything a cut removes, local or
/// received, stays in this rank's `dropped`, so the inputs sum to `result`
/// plus all `dropped`. Each block is reduced at one owner and all-gathered,
/// so `result` is identical on every rank. `2 ceil(lg P)` rounds; with full
/// blocks each rank receives `P - 1` blocks of `k/P` pairs in each phase,
/// SparDL's `4k (P - 1) / P` words (plus 4 bytes of count or frame per
/// block).
///
/// Memory per rank: `O((4 + E) (nnz + k))` bytes (`E` the element's bytes):
/// the input's blocks, the received blocks of at most `k / P` entries each,
/// `dropped`, and the result.
///
/// With a lossy codec (`values`) every block a rank sends
/// (in Spar-Reduce-Scatter and in the all-gather) is split with
/// [`WireValues::pack`] and the remainder joins that rank's
/// `dropped`, with the cuts of global residual collection; the inputs sum
/// to `result` plus every `dropped`. Raw values travel exactly as in
/// SparDL.
///
///
/// Registry name `spardl`, parameters `k` and `values`.
///
/// # Errors
/// [`Error::Disagreement`] (dimension, `k`), transport errors,
/// [`Error::Corrupt`]; a lossy codec's errors.
#[derive(Debug, Clone)]
pub struct Spardl<E> {
    budget: Budget,
    values: WireValues<E>,
    /// Buffers kept across calls (not state: results never depend on it).
    mem: Scratch,
}

impl<E: Element> Spardl<E> {
    /// SparDL keeping `budget` (a count, or a density of each call's
    /// dimension).
    pub fn new(budget: Budget) -> Self {
        Self {
            budget,
            values: WireValues::raw(),
            mem: Scratch::default(),
        }
    }
    /// The same, its blocks sent with `values`.
    #[must_use]
    pub fn with_values(self, values: WireValues<E>) -> Self {
        Self { values, ..self }
    }
}

/// The registry name, from which the entry id derives.
const NAME: &str = "spardl";

impl<E: Element> SparseAllreduce<E> for Spardl<E> {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        match values_param(&self.values) {
            v if v.is_empty() => self.budget.param(),
            v => format!("{},{v}", self.budget.param()),
        }
    }
    fn lossless(&self) -> bool {
        false
    }
    /// Table 1 in pairs of this element (full blocks of `k / P`, at most
    /// the union), plus the all-gather's frames.
    fn cost(&self, prof: &Profile) -> Cost {
        let prof = &prof.with_values(&self.values);
        let k = self.budget.k_for(prof.n).min(prof.union);
        let c = spardl(prof.p, k);
        bytes_cost(
            c.rounds,
            c.words / 2.0 * prof.pair_bytes() + 8.0 * prof.others(),
        )
    }
    /// A codec's split checked before the round.
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let k = self.budget.k_for(v.dim());
        let extra = [("k", k as u64), ("values", self.values.code())];
        let ready = self.values.ready(v);
        Some(teams_admit(t, v, 1, NAME, &extra, ready))
    }
    /// The inner error: a block a lossy codec cannot carry, that rank's
    /// own error and the others' [`Error::PeerError`] naming the lowest
    /// such rank (every rank took part in every message, so the next call
    /// works).
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let budget = Keep {
            k: self.budget.k_for(v.dim()),
            values: self.values.clone(),
        };
        let mem = self.mem.get::<Mem<E>>();
        in_teams(
            t,
            v,
            budget,
            1,
            mem,
            out,
            |_, lay, pos, block, dropped, mem| {
                cut_to(block, lay.share(pos), dropped, mem);
                Ok(())
            },
        )
    }
}

impl<E: Element> Promises<E> for Spardl<E> {
    /// Spar-Reduce-Scatter and the all-gather, Bruck's each.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(2 * u64::from(cost::ceil_log2(p)))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
}

impl<E: Element> Registered<E> for Spardl<E> {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = false;
    const BUDGET: bool = true;
    const WARM: bool = true;
    const VALUES: bool = true;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension), values (a codec of the registry; default raw)";
    const HELP: &'static str =
        "SparDL: Spar-Reduce-Scatter with global residual collection, Bruck all-gather; lossy";
    fn build(params: &mut Params, d: Defaults, catalog: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(d)?;
        Ok(Self::new(budget).with_values(params.take_values(catalog)?))
    }
}

// SparDL's formula for SparDL without SAG (Eq. 3).

/// SparDL without SAG (Eq. 3): Spar-Reduce-Scatter (Eq. 1) plus Bruck
/// allgather (Eq. 2), each `ceil(lg P)` rounds and `2k (P - 1) / P` words:
/// `2 ceil(lg P)` rounds, `4k (P - 1) / P` words, for any `P`.
pub fn spardl(p: usize, k: usize) -> Cost {
    Cost::new(
        2.0 * cost::ceil_log2(p) as f64,
        4.0 * crate::profile::frac(p) * k as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spardl_eq3_by_hand() {
        // P = 8, k = 100: 2 * 3 rounds, 4 * 100 * 7/8 words.
        assert_eq!(spardl(8, 100), Cost::new(6.0, 350.0));
        // P = 6 (not a power of two): ceil(lg 6) = 3, 4 * 120 * 5/6.
        let s6 = spardl(6, 120);
        assert_eq!(s6.rounds, 6.0);
        assert!(approx::relative_eq!(s6.words, 400.0, max_relative = 1e-9));
    }
}
