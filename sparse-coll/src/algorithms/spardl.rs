//! SparDL (Sec. 3): Spar-Reduce-Scatter with bags for any number of
//! workers, global residual collection, Bruck all-gather, and the
//! Spar-All-Gather variants with teams: R-SAG and B-SAG with Alg. 2's
//! h-adjustment.

use crate::algorithm::{Budget, Catalog, Defaults, Params, Registered, SparseAllreduce};
use crate::dense::{bruck_allgather, gather_bruck};
use crate::entry::{Reduced, enter};
use crate::frame::{put_block, put_block_parts, sum_parts, take_block_view, take_parts};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::{Scratch, Work, add_into, copy_into};
use crate::values::{WireValues, values_param};
use crate::{Entered, Group, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::sparse::merge_sum_into;
use sparse_core::state::{Scope, State};
use sparse_core::stats::{even_len, even_start};
use sparse_core::topk::split_topk_into;
use sparse_core::{Element, Error, Result, SparseVec, abs_key};

/// Top `k` of `v` by magnitude (ties: lower index), and the rest: the
/// workspace's one host top-k ([`SparseVec::split_topk`]).
pub fn split_topk<E: Element>(v: &SparseVec<E>, k: usize) -> (SparseVec<E>, SparseVec<E>) {
    v.split_topk(k)
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

/// Spar-Reduce-Scatter (Sec. 3.1) on `t` (a whole world or a team): leaves
/// this worker's block `t.rank()` summed over the workers, not yet cut to
/// its share, in `mem.blocks[t.rank()]`; every cut entry is added to
/// `dropped`.
///
/// Worker `w` keeps block `w` (the preservation bag) and puts the blocks at
/// circular offsets `2^(b-1) .. 2^b` into sending bag `b`, `b = 1 ..= l`,
/// `l = ceil(lg m)` (the last bag holds `m - 2^(l-1)` blocks). At step `i`
/// it sends bag `l - i + 1` to `w + 2^(l-i)` and receives the same bag of
/// `w - 2^(l-i)`, whose blocks it still holds (Thm. 3.1), and adds them in.
/// Every block is cut to its share right before it is sent. Raw values
/// are written straight from the blocks and received blocks are added
/// from the message in place; the blocks live in `mem`, so that a warm
/// call reuses their allocations.
fn spar_reduce_scatter<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    lay: &Layout<E>,
    dropped: &mut SparseVec<E>,
    mem: &mut Mem<E>,
) -> Result<()> {
    let (p, w, dim) = (t.size(), t.rank(), lay.dim);
    let raw = lay.values.is_raw();
    let Mem {
        blocks,
        kept,
        cut,
        tmp,
        keys,
        msg,
        ..
    } = mem;
    // Received messages come from the transport's pool and go back to it,
    // as the thread transport passes buffers from rank to rank.
    let mut got = t.take_buffer();
    blocks.truncate(p);
    blocks.resize_with(p, || empty(dim));
    for (j, block) in blocks.iter_mut().enumerate() {
        let (lo, len) = lay.span(j);
        let span = v.span(lo, len);
        copy_into(block, dim, &v.indices()[span.clone()], &v.values()[span]);
    }
    let l = usize::BITS - (p - 1).leading_zeros();
    for i in 1..=l {
        let dist = 1usize << (l - i);
        let bag = dist..(2 * dist).min(p);
        msg.clear();
        for d in bag.clone() {
            let j = (w + d) % p;
            let share = lay.share(j);
            let block = &blocks[j];
            if !raw {
                let (kept, cut) = split_topk(block, share);
                // What the codec cannot carry exactly stays here too.
                let packed = lay.values.pack(&kept)?;
                *dropped = dropped.merge_sum(&cut)?.merge_sum(packed.rest())?;
                packed.put(msg);
            } else if block.nnz() <= share {
                put_block(msg, block);
            } else {
                split_topk_into(
                    (block.indices(), block.values()),
                    share,
                    abs_key,
                    (&mut kept.idx, &mut kept.val),
                    (&mut cut.idx, &mut cut.val),
                    keys,
                );
                put_block_parts(msg, &kept.idx, &kept.val);
                add_into(dropped, (&cut.idx, &cut.val), tmp);
            }
        }
        t.exchange_into((w + dist) % p, msg, (w + p - dist) % p, &mut got)?;
        let mut rest: &[u8] = &got;
        for d in 0..bag.len() {
            let j = (w + d) % p;
            let (lo, len) = lay.span(j);
            if raw {
                let (i, x) = take_block_view::<E>(&mut rest, dim, lo, len, "spardl block")?;
                add_into(&mut blocks[j], (&i, &x), tmp);
            } else {
                let part = lay.values.take(&mut rest, dim, lo, len, "spardl block")?;
                blocks[j] = blocks[j].merge_sum(&part)?;
            }
        }
        if !rest.is_empty() {
            return Err(Error::corrupt("spardl bag", "trailing bytes"));
        }
    }
    t.give_buffer(got);
    Ok(())
}

/// The final Bruck all-gather of SparDL: every worker of `t` contributes
/// its block (at most its share), and all get the concatenation, in
/// `out` (its allocations reused).
fn gather_blocks<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    mine: &SparseVec<E>,
    lay: &Layout<E>,
    dropped: &mut SparseVec<E>,
    msg: &mut Vec<u8>,
    out: &mut SparseVec<E>,
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
        let packed = lay.values.pack(mine)?;
        *dropped = dropped.merge_sum(packed.rest())?;
        let all = bruck_allgather(t, packed.bytes())?;
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
fn teams_enter<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    d: usize,
    name: &str,
    extra: &[(&'static str, u64)],
    ready: Result<()>,
) -> Result<Entered> {
    let local = ready.and_then(|()| {
        if name == RSAG_NAME {
            rsag_teams(d)
        } else {
            Ok(())
        }
        .and_then(|()| teams(t, d).map(drop))
    });
    enter(t, name, v, extra, local)
}

/// R-SAG's teams: `d` a power of two.
///
/// # Errors
/// [`Error::InvalidParameter`] named `d` otherwise.
fn rsag_teams(d: usize) -> Result<()> {
    if d.is_power_of_two() {
        Ok(())
    } else {
        Err(Error::invalid(
            "d",
            format!(
                "{RSAG_NAME}: d = {d} teams: R-SAG needs d a power of two (1, 2, 4, ...) \
                 dividing the number of ranks; leave d out for 2 teams at an even number \
                 of ranks, else 1"
            ),
        ))
    }
}

/// [`teams_enter`] for SparDL with SAG: budget `k` and `d` teams.
fn sag_enter<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    k: usize,
    d: usize,
    name: &str,
) -> Result<Entered> {
    teams_enter(
        t,
        v,
        d,
        name,
        &[("k", k as u64), ("teams", d as u64)],
        Ok(()),
    )
}

/// The body of SparDL with and without SAG after [`teams_enter`], into
/// `out` (its allocations reused with `mem`'s): Spar-Reduce-Scatter inside
/// this worker's team of `m = P / d` workers over `m` blocks, then `sag`
/// between the `d` workers of this worker's column (given the layout,
/// this worker's position in its team, its block as SRS left it, which it
/// turns into the block for the final all-gather, and `dropped`, to which
/// it adds whatever it cuts), then the Bruck all-gather inside the team.
/// With `d = 1` the column is this worker alone.
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
) -> Result<()> {
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
    spar_reduce_scatter(
        &mut Group::new(t, team.clone())?,
        v,
        &lay,
        &mut dropped,
        mem,
    )?;
    let mut block = std::mem::replace(&mut mem.blocks[pos], empty(dim));
    sag(
        &mut Group::new(t, column)?,
        &lay,
        pos,
        &mut block,
        &mut dropped,
        mem,
    )?;
    gather_blocks(
        &mut Group::new(t, team)?,
        &block,
        &lay,
        &mut dropped,
        &mut mem.msg,
        &mut out.result,
    )?;
    mem.blocks[pos] = block;
    out.dropped = dropped;
    Ok(())
}

/// The teams of SparDL's SAG: `P` workers in `d` teams of `m = P / d`
/// consecutive ranks. Team `w / m`, position `w % m`; the column of a
/// worker is the `d` workers at its position, one per team.
fn teams<T: Transport + ?Sized>(t: &T, d: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    let p = t.size();
    if d == 0 || p % d != 0 {
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

/// R-SAG after the entry round, into `out`.
fn rsag<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    k: usize,
    d: usize,
    mem: &mut Mem<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    let keep = Keep {
        k,
        values: WireValues::raw(),
    };
    in_teams(
        t,
        v,
        keep,
        d,
        mem,
        out,
        |col, lay, pos, block, dropped, mem| {
            let (lo, len) = lay.span(pos);
            let l = lay.share(pos);
            cut_to(block, l, dropped, mem);
            let c = col.rank();
            let mut mask = 1;
            while mask < d {
                let partner = c ^ mask;
                mem.msg.clear();
                put_block(&mut mem.msg, block);
                let mut got = col.take_buffer();
                col.exchange_into(partner, &mem.msg, partner, &mut got)?;
                let mut rest: &[u8] = &got;
                let (i, x) = take_block_view::<E>(&mut rest, lay.dim, lo, len, "r-sag block")?;
                if !rest.is_empty() || i.len() > l {
                    return Err(Error::corrupt("r-sag block", "over its share"));
                }
                // After this step the 2 * mask column workers of this aligned
                // range all hold this sum and cut the same entries: each cut
                // entry goes to exactly one of them.
                let group = 2 * mask;
                let base = c & !(group - 1);
                add_and_cut(
                    block,
                    (&i, &x),
                    l,
                    |i| base + i as usize % group == c,
                    dropped,
                    mem,
                );
                drop((i, x));
                col.give_buffer(got);
                mask <<= 1;
            }
            Ok(())
        },
    )
}

/// SparDL with B-SAG (Sec. 3.3, any `d` dividing `P`), with the state of
/// Alg. 2's compression-ratio adjustment kept across calls.
///
/// Each call: SRS inside each team of `m = P / d` workers (as in
/// [`SpardlRsag`]); every worker cuts its block to its top `h` and the `d`
/// workers of a column all-gather their blocks with Bruck (`ceil(lg d)`
/// rounds), sum them in column order (the same sum on all `d`), count the
/// entries `N_t` and cut the sum to its top `L = k / m`; then the Bruck
/// all-gather inside the team. The paper gives each column member `1/d`
/// of every cut value; here each cut entry goes whole to column member
/// `index % d`, so that conservation is exact in floating point.
///
/// Alg. 2, with `L` the share of this worker's block (`d k / P` when `P`
/// divides `k`): `h` starts at `L / d` (`k / P`) and the step at
/// `0.01 L (d - 1) / d` (`0.01 k (d - 1) / P`);
/// before each later call, if `N_t > L` XOR `step > 0` (the step already
/// points the right way: down when too many entries arrived) the step is
/// doubled on the second such call in a row, otherwise it is reversed and
/// halved; then `h += step`. The printed line 3 shows the XOR; the prose
/// describing the direction is inverted, and the listing is followed. `h`
/// is kept in `[L / d, L]` (`[k / P, d k / P]`), the range the paper derives, and rounded
/// to whole entries.
///
/// Memory per rank: as [`Spardl`], `O((4 + E) (nnz + k))` bytes.
#[derive(Debug, Clone)]
pub struct SpardlBsag {
    budget: Budget,
    /// Buffers kept across calls (not state: results never depend on it).
    mem: Scratch,
    /// `None`: the smallest divisor above 1 of `P`, at each call.
    d: Option<usize>,
    h: f64,
    step: f64,
    flag: bool,
    last_count: Option<usize>,
}

impl SpardlBsag {
    /// B-SAG with `d` teams (`d` must divide the number of workers, checked
    /// at each call) and `budget` (a count, or a density of each call's
    /// dimension).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `d == 0`.
    pub fn new(budget: Budget, d: usize) -> Result<Self> {
        if d == 0 {
            return Err(Error::invalid(
                "d",
                "d = 0 teams: give at least one team, or leave d out",
            ));
        }
        Ok(Self {
            budget,
            mem: Scratch::default(),
            d: Some(d),
            h: f64::NAN,
            step: f64::NAN,
            flag: false,
            last_count: None,
        })
    }

    /// The `h` of the next call for a column whose blocks have a share of
    /// `l` (Alg. 2's `L`), after the adjustment for the last count.
    /// B-SAG whose teams are the smallest divisor above 1 of the number of
    /// workers, chosen at each call (1 team for one worker).
    pub fn auto_teams(budget: Budget) -> Self {
        Self {
            d: None,
            ..Self::new(budget, 1).expect("one team")
        }
    }

    fn next_h(&mut self, l: usize, d: usize) -> usize {
        let (l, d) = (l as f64, d as f64);
        let (lo, hi) = (l / d, l);
        if self.h.is_nan() {
            self.h = lo;
            self.step = 0.01 * l * (d - 1.0) / d;
        } else if let Some(n) = self.last_count {
            if (n as f64 > l) ^ (self.step > 0.0) {
                if self.flag {
                    self.step *= 2.0;
                    self.flag = false;
                } else {
                    self.flag = true;
                }
            } else {
                self.step = -self.step / 2.0;
                self.flag = false;
            }
            self.h = (self.h + self.step).clamp(lo, hi);
        }
        self.h.round() as usize
    }

    /// The current `h` (entries each worker sends into B-SAG), `None`
    /// before the first call.
    pub fn h(&self) -> Option<f64> {
        (!self.h.is_nan()).then_some(self.h)
    }

    /// `N_t` of the last call: the entries of this worker's column sum.
    pub fn last_count(&self) -> Option<usize> {
        self.last_count
    }

    /// The teams of a call on `p` workers.
    fn teams(&self, p: usize) -> usize {
        self.d.unwrap_or_else(|| smallest_divisor(p))
    }

    /// One SparDL allreduce with B-SAG after the entry round, into `out`.
    fn reduce<T: Transport + ?Sized, E: Element>(
        &mut self,
        t: &mut T,
        v: &SparseVec<E>,
        mem: &mut Mem<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        let (k, d) = (self.budget.k_for(v.dim()), self.teams(t.size()));
        let keep = Keep {
            k,
            values: WireValues::raw(),
        };
        in_teams(
            t,
            v,
            keep,
            d,
            mem,
            out,
            |col, lay, pos, block, dropped, mem| {
                let (lo, len) = lay.span(pos);
                let h = self.next_h(lay.share(pos), d);
                // Alg. 2 moves h within [L / d, L] from call to call: room for
                // its largest from the first call on, so that a warm call
                // allocates nothing however h moves.
                let most = lay.share(pos) * d;
                for pairs in [&mut mem.tmp, &mut mem.kept, &mut mem.cut] {
                    pairs.idx.reserve(most);
                    pairs.val.reserve(most);
                }
                mem.msg.reserve(4 + lay.share(pos) * (4 + E::BYTES));
                cut_to(block, h, dropped, mem);
                mem.msg.clear();
                put_block(&mut mem.msg, block);
                let own = [&mem.msg[..]];
                let g = gather_bruck(col, &own)?;
                let parts = (0..col.size())
                    .map(|q| {
                        let mut rest = g.block(q).unwrap_or(own[0]);
                        let part =
                            take_block_view::<E>(&mut rest, lay.dim, lo, len, "b-sag block")?;
                        if !rest.is_empty() {
                            return Err(Error::corrupt("b-sag block", "trailing bytes"));
                        }
                        Ok(part)
                    })
                    .collect::<Result<Vec<_>>>()?;
                sum_parts(
                    &parts,
                    lay.dim,
                    (&mut mem.tmp.idx, &mut mem.tmp.val),
                    (&mut mem.kept.idx, &mut mem.kept.val),
                );
                drop(parts);
                g.release(col);
                self.last_count = Some(mem.tmp.idx.len());
                let (mut ki, mut kv) = take_parts(block);
                split_topk_into(
                    (&mem.tmp.idx, &mem.tmp.val),
                    lay.share(pos),
                    abs_key,
                    (&mut ki, &mut kv),
                    (&mut mem.cut.idx, &mut mem.cut.val),
                    &mut mem.keys,
                );
                *block = SparseVec::new_unchecked(lay.dim, ki, kv);
                let c = col.rank();
                pick_cut(|i| i as usize % d == c, dropped, mem);
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bsag_adjusts_h_as_alg_2_does() {
        // k = 400, d = 4, P = 8: m = 2, L = k / m = 200.
        let mut b = SpardlBsag::new(Budget::k(400).unwrap(), 4).unwrap();
        let l = 200;
        // Line 1: h = L / d = k / P = 50, step = 0.01 L (d - 1) / d = 1.5.
        assert_eq!(b.next_h(l, 4), 50);
        assert_eq!((b.h, b.step, b.flag), (50.0, 1.5, false));
        // Too few entries arrived (N <= L) and the step points up: keep the
        // direction; the first time only sets the flag.
        b.last_count = Some(120);
        assert_eq!(b.next_h(l, 4), 52);
        assert_eq!((b.h, b.step, b.flag), (51.5, 1.5, true));
        // The second time in a row doubles the step.
        assert_eq!(b.next_h(l, 4), 55);
        assert_eq!((b.h, b.step, b.flag), (54.5, 3.0, false));
        // Too many (N > L) while going up: reverse and halve.
        b.last_count = Some(260);
        b.next_h(l, 4);
        assert_eq!((b.h, b.step, b.flag), (53.0, -1.5, false));
        // Still too many, going down: keep, then double.
        b.next_h(l, 4);
        assert_eq!((b.h, b.step, b.flag), (51.5, -1.5, true));
        b.next_h(l, 4);
        assert_eq!((b.h, b.step, b.flag), (50.0, -3.0, false));
        // h never leaves [L / d, L].
        b.next_h(l, 4);
        assert_eq!(b.h, 50.0);
        b.last_count = Some(0);
        for _ in 0..40 {
            b.next_h(l, 4);
            assert!((50.0..=200.0).contains(&b.h));
        }
        assert_eq!(b.h, 200.0, "starved of entries, h climbs to L");
    }
}

/// The parameters of a SAG variant: the budget, and `d` when fixed.
fn k_and_teams(budget: Budget, d: Option<usize>) -> String {
    match d {
        Some(d) => format!("{budget},d={d}"),
        None => budget.param(),
    }
}

/// The smallest divisor above 1 of `p` (1 for `p = 1`): B-SAG's default
/// teams.
fn smallest_divisor(p: usize) -> usize {
    (2..=p).find(|d| p % d == 0).unwrap_or(1)
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

/// The registry names, from which the entry ids derive.
const NAME: &str = "spardl";
const RSAG_NAME: &str = "spardl_rsag";
const BSAG_NAME: &str = "spardl_bsag";

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
        let c = cost::spardl(prof.p, k);
        bytes_cost(
            c.rounds,
            c.words / 2.0 * prof.pair_bytes() + 8.0 * prof.others(),
        )
    }
    /// Spar-Reduce-Scatter and the all-gather, Bruck's each.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(2 * u64::from(cost::ceil_log2(p)))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
    /// A codec's split checked before the round.
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        let k = self.budget.k_for(v.dim());
        let extra = [("k", k as u64), ("values", self.values.code())];
        let ready = self.values.ready(v);
        teams_enter(t, v, 1, NAME, &extra, ready)
    }
    fn body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<()> {
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
        )?;
        Ok(())
    }
}

impl<E: Element> Registered<E> for Spardl<E> {
    const NAME: &'static str = NAME;
    const VALUES: bool = true;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension), values (a codec of the registry; default raw)";
    const HELP: &'static str =
        "SparDL: Spar-Reduce-Scatter with global residual collection, Bruck all-gather; lossy";
    fn build(params: &mut Params, d: Defaults, catalog: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(d)?;
        Ok(Self::new(budget).with_values(params.take_values(catalog)?))
    }
}

/// SparDL with R-SAG (Sec. 3.3, `d` a power of two dividing `P`): SRS inside
/// each team of `m = P / d` workers over `m` blocks with shares of
/// `L = k / m` (Layout), then `lg d` recursive-doubling steps between the
/// workers of a column, each exchanging its block, adding the partner's and
/// cutting the sum to its top `L`, then the Bruck all-gather inside the
/// team. Rounds `2 ceil(lg m) + lg d`; with full blocks each rank receives
/// `2k (P - d) / P` words in each team phase and `2L` per R-SAG step
/// (Eq. 5), plus 4 bytes of count per block.
///
/// Both partners of a step hold the same sum (`a + b` and `b + a`) and cut
/// the same entries. The paper gives each partner half of every cut value.
/// But at step `i` all `2^i` workers of an aligned range of the column hold
/// that same sum and make the same cut, so halves would count each cut
/// value `2^(i-1)` times over for `d > 2`; and `x / 2 + x / 2` is not always
/// `x` in floating point (subnormals). Here each cut entry goes whole to
/// exactly one of those `2^i` workers (the one at offset `index mod 2^i`),
/// so the conservation identity holds exactly. `d = 1` is SparDL without
/// SAG.
///
/// Memory per rank: as [`Spardl`], `O((4 + E) (nnz + k))` bytes.
///
/// Registry name `spardl_rsag`, parameters `k` and `d`.
///
/// # Errors
/// [`Error::InvalidParameter`] if `d` is not a power of two dividing `P`;
/// as [`Spardl`].
#[derive(Debug, Clone)]
pub struct SpardlRsag {
    budget: Budget,
    /// Buffers kept across calls (not state: results never depend on it).
    mem: Scratch,
    /// `None`: 2 teams for an even number of workers, else 1, at each call.
    d: Option<usize>,
}

impl SpardlRsag {
    /// SparDL with R-SAG keeping `budget` (a count, or a density of each
    /// call's dimension) on `d` teams (`None`: 2 for an even number of
    /// workers, else 1).
    pub fn new(budget: Budget, d: Option<usize>) -> Self {
        Self {
            budget,
            mem: Scratch::default(),
            d,
        }
    }
    fn teams(&self, p: usize) -> usize {
        self.d.unwrap_or(if p % 2 == 0 { 2 } else { 1 })
    }
}

impl<E: Element> SparseAllreduce<E> for SpardlRsag {
    fn name(&self) -> String {
        RSAG_NAME.into()
    }
    fn params(&self) -> String {
        k_and_teams(self.budget, self.d)
    }
    fn lossless(&self) -> bool {
        false
    }
    /// Eq. 5 in pairs of this element (at most the union).
    fn cost(&self, prof: &Profile) -> Cost {
        let k = self.budget.k_for(prof.n).min(prof.union);
        let c = cost::spardl_rsag(prof.p, k, self.teams(prof.p));
        bytes_cost(c.rounds, c.words / 2.0 * prof.pair_bytes())
    }
    /// SRS in teams of `P / d` and its all-gather, with `lg d` steps of
    /// recursive doubling between.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        let d = self.teams(p);
        Some(2 * u64::from(cost::ceil_log2(p / d)) + u64::from(d.ilog2()))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        let d = self.teams(t.size());
        sag_enter(t, v, self.budget.k_for(v.dim()), d, RSAG_NAME)
    }
    fn body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        let k = self.budget.k_for(v.dim());
        let d = self.teams(t.size());
        rsag(t, v, k, d, self.mem.get::<Mem<E>>(), out)?;
        Ok(())
    }
}

impl<E: Element> Registered<E> for SpardlRsag {
    const NAME: &'static str = RSAG_NAME;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension), d (teams, a power of two dividing P; default 2 for even P, else 1)";
    const HELP: &'static str =
        "SparDL with R-SAG: SRS in teams, recursive doubling between them; lossy";
    fn build(params: &mut Params, d: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(d)?;
        let teams = crate::algorithm::teams_param(params)?;
        teams.map_or(Ok(()), rsag_teams)?;
        Ok(Self::new(budget, teams))
    }
    /// The largest power of two up to 4 dividing `P` as its teams.
    fn suite_specs(p: usize) -> Vec<String> {
        let d = [4usize, 2, 1].into_iter().find(|d| p % d == 0).unwrap_or(1);
        vec![format!("{RSAG_NAME}:d={d}")]
    }
}

impl<E: Element> SparseAllreduce<E> for SpardlBsag {
    /// Forgets Alg. 2's `h` and its adjustment: the next call starts from
    /// the first call's `h`.
    fn reset(&mut self) {
        self.h = f64::NAN;
        self.step = f64::NAN;
        self.flag = false;
        self.last_count = None;
    }
    /// Alg. 2's `h`, its step and flag, and the last count: they depend
    /// on the rank count ([`Scope::Local`]).
    fn save_state(&self) -> Result<State> {
        let mut s = State::new("sparse_coll::SpardlBsag", 1);
        s.put_f64("h", Scope::Local, self.h)
            .put_f64("step", Scope::Local, self.step)
            .put_bool("flag", Scope::Local, self.flag)
            .put_opt_u64(
                "last_count",
                Scope::Local,
                self.last_count.map(|c| c as u64),
            );
        Ok(s)
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect("sparse_coll::SpardlBsag", 1)?;
        let (h, step, flag) = (
            s.local_f64("h", f64::NAN)?,
            s.local_f64("step", f64::NAN)?,
            s.local_bool("flag", false)?,
        );
        let last_count = s
            .local_opt_u64("last_count")?
            .map(usize::try_from)
            .transpose()
            .map_err(|_| {
                Error::corrupt(
                    "training state",
                    "sparse_coll::SpardlBsag: last_count does not fit",
                )
            })?;
        self.h = h;
        self.step = step;
        self.flag = flag;
        self.last_count = last_count;
        Ok(())
    }
    fn name(&self) -> String {
        BSAG_NAME.into()
    }
    fn params(&self) -> String {
        k_and_teams(self.budget, self.d)
    }
    fn lossless(&self) -> bool {
        false
    }
    /// The call this state makes next: SRS inside the team of `m = P / d`
    /// (`k (m - 1) / m` pairs), the column's allgather of `h` entries from
    /// each of the `d - 1` others (`h` as Alg. 2 will set it), and the
    /// team's all-gather of blocks of `min(L, N_t)` entries, `N_t` the last
    /// call's column sum (before any call: `h` plus the others' entries not
    /// shared, at the input's overlap).
    fn cost(&self, prof: &Profile) -> Cost {
        let p = prof.p;
        let d = self.d.unwrap_or_else(|| smallest_divisor(p)).max(1);
        let m = (p / d).max(1);
        let pair = prof.pair_bytes();
        let k_all = self.budget.k_for(prof.n);
        let k = k_all.min(prof.union) as f64;
        let l = k_all / m;
        let h = self.clone().next_h(l, d) as f64;
        let n_t = self.last_count.map_or_else(
            || h * (1.0 + (d as f64 - 1.0) * (1.0 - prof.overlap())),
            |c| c as f64,
        );
        let mf = m as f64;
        let bytes = pair * k * (mf - 1.0) / mf
            + (d as f64 - 1.0) * (8.0 + pair * h)
            + (mf - 1.0) * (8.0 + pair * (l as f64).min(n_t));
        let rounds = 2.0 * cost::ceil_log2(m) as f64 + cost::ceil_log2(d) as f64;
        bytes_cost(rounds, bytes)
    }
    /// SparDL's Table 1 bounds at the input's overlap.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        let d = self.d.unwrap_or_else(|| smallest_divisor(prof.p));
        let k = self.budget.k_for(prof.n);
        Some(prof.within(cost::spardl_bsag(prof.p, k, d)))
    }
    /// SRS in teams of `P / d` and its all-gather, with a Bruck
    /// allgather of `ceil(lg d)` steps between.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        let d = self.d.unwrap_or_else(|| smallest_divisor(p));
        Some(2 * u64::from(cost::ceil_log2(p / d)) + u64::from(cost::ceil_log2(d)))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        let d = self.teams(t.size());
        sag_enter(t, v, self.budget.k_for(v.dim()), d, BSAG_NAME)
    }
    fn body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        let mut mem = std::mem::take(&mut self.mem);
        let done = self.reduce(t, v, mem.get::<Mem<E>>(), out);
        self.mem = mem;
        done?;
        Ok(())
    }
}

impl<E: Element> Registered<E> for SpardlBsag {
    const NAME: &'static str = BSAG_NAME;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension), d (teams dividing P; default the smallest divisor above 1)";
    const HELP: &'static str = "SparDL with B-SAG: SRS in teams, an adaptive h between them; lossy";
    fn build(params: &mut Params, defaults: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(defaults)?;
        match crate::algorithm::teams_param(params)? {
            Some(d) => Self::new(budget, d),
            None => Ok(Self::auto_teams(budget)),
        }
    }
    /// The smallest divisor above 1 of `P` as its teams.
    fn suite_specs(p: usize) -> Vec<String> {
        vec![format!("{BSAG_NAME}:d={}", smallest_divisor(p))]
    }
}
