//! Ok-Topk (Li and Hoefler, as SparDL's Table 1 and experiments use it):
//! split and reduce over balanced regions, global selection by a reused
//! threshold, then allgather.

use crate::algorithm::{Budget, Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::dense::{bruck_allgather, gather_bruck};
use crate::entry::{Admission, Reduced, admit};
use crate::frame::{
    PairsView, put_block_parts, split_where_into, sum_parts, take_block_view, take_parts,
};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::{Pairs, Scratch, add_into, copy_into};
use crate::{Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::state::{Scope, State};
use sparse_core::stats::even_start;
use sparse_core::topk::split_topk_into;
use sparse_core::{Element, Error, Result, SparseVec, abs_key};
use std::borrow::Cow;
use std::marker::PhantomData;

/// Ok-Topk with its state across calls: the local and global thresholds and
/// the region boundaries, re-estimated every `period` calls (the first call
/// included) and reused in between, which is what makes Ok-Topk cheap.
///
/// One call, on each rank:
/// 1. **local selection**: the entries of the input whose magnitude reaches
///    the local threshold (on a refresh call, the exact `k`-th largest
///    magnitude of the input); the others go to `dropped`;
/// 2. **balanced regions** (refresh calls): every rank states how many
///    entries it selected and the `P - 1` indices that cut them into `P`
///    equal parts; a Bruck allgather shares them and each boundary is the
///    count-weighted mean of the ranks' cuts (integer arithmetic, so every
///    rank gets the same boundaries). Region `j` is owned by rank `j`;
/// 3. **split and reduce**: `P - 1` direct steps; at step `s` a rank sends
///    its entries of region `r + s` to that region's owner; owners sum their
///    region in rank order;
/// 4. **global selection**: owners keep the entries of their region sum
///    whose magnitude reaches the global threshold (on a refresh call, the
///    exact `k`-th largest magnitude over all regions, found by a Bruck
///    allgather of every owner's top-`k` magnitudes); the rest goes to the
///    owner's `dropped`;
/// 5. **allgather**: Bruck allgather of the selected region entries, which
///    every rank concatenates in region order (bitwise identical).
///
/// **Budget** (DGC's rule, so that a stale threshold cannot send
/// everything): a rank whose local threshold selects more than
/// `max(k, floor(1.3 k))` entries falls back to its exact top-`k` (tie
/// rule: the lower index wins) and re-estimates its threshold from this
/// input; when the gathered global selection holds more than that, every
/// rank keeps the exact top-`k` of it (the same on every rank, from the same
/// bytes) and each owner adds what it cut from its own region to its
/// `dropped`, and the global threshold is re-estimated from it. A threshold
/// that could not be estimated (fewer than `k` entries seen: an empty or
/// tiny first call) is re-estimated at once on the next call instead of
/// selecting everything for `period - 1` calls; for the global threshold
/// that makes the next call a refresh call (the state is the same on every
/// rank, so all ranks refresh together). So every rank sends at most
/// `max(k, floor(1.3 k))` entries into the split phase, and `result` holds
/// at most that many.
///
/// The inputs sum to `result` plus all `dropped`. Ok-Topk balances the
/// selected entries across ranks before a recursive-doubling allgatherv;
/// Bruck's allgather takes blocks of any size in `ceil(lg P)` rounds for
/// any `P`, so that balancing step is left out. Rounds: `(P - 1) +
/// ceil(lg P)`, plus `2 ceil(lg P)` on refresh calls. How the regions are
/// balanced and how the thresholds are re-estimated are this crate's
/// choices (the papers here do not specify them).
///
/// Memory per rank: `O((4 + E) (nnz + P budget))` bytes (`E` the
/// element's bytes): the input, its selection, the region pieces received
/// and the gathered result.
#[derive(Debug, Clone)]
pub struct OkTopk<E> {
    budget: Budget,
    period: u64,
    calls: u64,
    /// `None`: re-estimate at the next call.
    local: Option<u64>,
    /// `None`: the next call refreshes.
    global: Option<u64>,
    bounds: Vec<usize>,
    /// Buffers kept across calls (not state: results never depend on it).
    mem: Scratch,
    _element: PhantomData<E>,
}

/// The `k`-th largest magnitude key of `keys` (`None` when there are fewer
/// than `k`, so that no threshold can be estimated; above every key when
/// `k == 0`).
fn kth_key(mut keys: Vec<u64>, k: usize) -> Option<u64> {
    sparse_core::topk::kth_largest(&mut keys, k)
}

/// The `k`-th largest magnitude key of `values` (`None` when there are
/// fewer than `k`, so that no threshold can be estimated; above every key
/// when `k == 0`), by the host radix select with `scratch` for its keys:
/// the key [`kth_key`] finds in a vector of the keys.
fn kth_magnitude<E: Element>(values: &[E], k: usize, scratch: &mut Vec<u64>) -> Option<u64> {
    match k {
        0 => Some(u64::MAX),
        k if values.len() < k => None,
        k => Some(sparse_core::topk::kth_key(values, k, abs_key, scratch).0),
    }
}

/// Whether an entry reaches `threshold` (every entry without one).
fn reaches<E: Element>(threshold: Option<u64>) -> impl Fn(u32, E) -> bool {
    move |_, x| threshold.is_none_or(|th| abs_key(x) >= th)
}

impl<E: Element> OkTopk<E> {
    /// Ok-Topk selecting about `budget` entries (a count, or a density of
    /// each call's dimension), re-estimating its thresholds and regions
    /// every `period` calls.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `period == 0`.
    pub fn new(budget: Budget, period: u64) -> Result<Self> {
        if period == 0 {
            return Err(Error::invalid("period", "must be at least 1"));
        }
        Ok(Self {
            budget,
            period,
            calls: 0,
            local: None,
            global: None,
            bounds: Vec::new(),
            mem: Scratch::default(),
            _element: PhantomData,
        })
    }

    /// The region boundaries in use (`P + 1` of them, from 0 to the
    /// dimension); empty before the first call.
    pub fn bounds(&self) -> &[usize] {
        &self.bounds
    }

    /// The most entries a rank sends into the split phase, and the most
    /// the result holds, on an input of dimension `dim`: `max(k,
    /// floor(1.3 k))` for the budget's `k` there.
    pub fn most(&self, dim: usize) -> usize {
        let k = self.budget.k_for(dim);
        k.max(k.saturating_mul(13) / 10)
    }

    /// Whether the next call re-estimates thresholds and regions: every
    /// `period` calls, and after a call whose global threshold could not be
    /// estimated.
    pub fn refreshes_next(&self) -> bool {
        self.calls.is_multiple_of(self.period) || self.global.is_none()
    }

    /// Whether the regions in use cut `0..dim` among `p` ranks: a call on
    /// another number of ranks or another dimension re-cuts them, or the
    /// entries outside the old regions would reach no owner.
    fn regions_fit(&self, p: usize, dim: usize) -> bool {
        self.bounds.len() == p + 1 && self.bounds.last() == Some(&dim)
    }

    fn balance<T: Transport + ?Sized>(&mut self, t: &mut T, sel: &SparseVec<E>) -> Result<()> {
        let (p, dim) = (t.size(), sel.dim());
        let n = sel.nnz();
        let mut msg = (n as u64).to_le_bytes().to_vec();
        for j in 1..p {
            msg.extend_from_slice(
                &sel.indices()
                    .get(j * n / p)
                    .copied()
                    .unwrap_or(0)
                    .to_le_bytes(),
            );
        }
        let all = bruck_allgather(t, &msg)?;
        let mut total = 0u128;
        let mut sums = vec![0u128; p];
        for b in &all {
            if b.len() != 8 + 4 * (p - 1) {
                return Err(Error::corrupt("ok-topk boundaries", "wrong length"));
            }
            let c = u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as u128;
            total += c;
            for (j, w) in b[8..].chunks_exact(4).enumerate() {
                let cut = u32::from_le_bytes(w.try_into().expect("4 bytes")) as u128;
                if cut as usize >= dim.max(1) {
                    return Err(Error::corrupt("ok-topk boundaries", "cut out of range"));
                }
                sums[j + 1] += c * cut;
            }
        }
        let bounds: Vec<usize> = (0..=p)
            .map(|j| match j {
                0 => 0,
                j if j == p => dim,
                j if total == 0 => even_start(j, dim, p),
                j => (sums[j] / total) as usize,
            })
            .collect();
        // Every rank's cuts increase, and so does their weighted mean: a
        // region ending before it starts came from a corrupt message (the
        // same on every rank, which all read the same gathered bytes).
        if bounds.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::corrupt(
                "ok-topk boundaries",
                format!("regions out of order: {bounds:?}"),
            ));
        }
        self.bounds = bounds;
        Ok(())
    }

    fn global_threshold<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        region: &SparseVec<E>,
        k: usize,
    ) -> Result<()> {
        // This region's `k` largest magnitudes (all when it has fewer):
        // the global k-th largest is among their union.
        let (kept, _) = region.split_topk(k);
        let top: Vec<u64> = kept.values().iter().map(|&x| abs_key(x)).collect();
        let mut msg = Vec::with_capacity(top.len() * E::BYTES);
        for key in &top {
            msg.extend_from_slice(&key.to_le_bytes()[..E::BYTES]);
        }
        let all = bruck_allgather(t, &msg)?;
        let mut union = Vec::new();
        for b in &all {
            if b.len() % E::BYTES != 0 {
                return Err(Error::corrupt("ok-topk magnitudes", "ragged length"));
            }
            union.extend(b.chunks_exact(E::BYTES).map(|c| {
                let mut w = [0u8; 8];
                w[..E::BYTES].copy_from_slice(c);
                u64::from_le_bytes(w)
            }));
        }
        self.global = kth_key(union, k);
        Ok(())
    }

    /// One Ok-Topk allreduce of `v` after the entry round, into `out`:
    /// the steps of [`OkTopk`]'s doc, in order. The selection is read in
    /// place where every entry reaches the local threshold, the pieces are
    /// sent from it and received into the transport's buffers, and the
    /// region's sum is built in vectors kept across calls.
    fn reduce<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        v: &SparseVec<E>,
        mem: &mut Mem<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        let dim = v.dim();
        let (k, most) = (self.budget.k_for(dim), self.most(dim));
        let refresh = self.refreshes_next() || !self.regions_fit(t.size(), dim);
        let (i, x) = take_parts(&mut out.dropped);
        let mut dropped = SparseVec::new_unchecked(dim, i, x);
        // 1. Local selection (`v` itself when every entry reaches it).
        let picked = self.select_local(v, refresh, mem, &mut dropped);
        let sel = picked.as_ref().unwrap_or(v);
        // 2. Balanced regions.
        if refresh {
            self.balance(t, sel)?;
        }
        // 3. Split and reduce: this rank's region sum.
        let sum = split_and_reduce(t, sel, &self.bounds, mem)?;
        // 4. Global selection: the rest of the region goes to `dropped`.
        if refresh {
            self.global_threshold(t, &sum, k)?;
        }
        split_where_into(
            &sum,
            reaches(self.global),
            (&mut mem.chosen.idx, &mut mem.chosen.val),
            (&mut mem.cut.idx, &mut mem.cut.val),
        );
        (_, mem.kept.idx, mem.kept.val) = sum.into_parts();
        add_into(&mut dropped, (&mem.cut.idx, &mem.cut.val), &mut mem.tmp);
        // 5. Allgather, kept within the budget.
        let mut result = gather_regions(t, dim, &self.bounds, mem, &mut out.result)?;
        if result.nnz() > most {
            self.cut_to_budget(&mut result, t.rank(), mem, &mut dropped);
        }
        self.calls = self.calls.wrapping_add(1);
        out.result = result;
        out.dropped = dropped;
        if let Some(p) = picked {
            (_, mem.picked.idx, mem.picked.val) = p.into_parts();
        }
        Ok(())
    }

    /// Step 1, local selection: the entries of `v` that reach the local
    /// threshold (re-estimated on a `refresh` call or when there is none),
    /// `None` when that is every entry (the caller reads `v` itself); past
    /// the budget the exact top-`k`, the threshold re-estimated from `v`.
    /// What is not selected is added to `dropped`.
    fn select_local(
        &mut self,
        v: &SparseVec<E>,
        refresh: bool,
        mem: &mut Mem<E>,
        dropped: &mut SparseVec<E>,
    ) -> Option<SparseVec<E>> {
        let dim = v.dim();
        let (k, most) = (self.budget.k_for(dim), self.most(dim));
        if refresh || self.local.is_none() {
            self.local = kth_magnitude(v.values(), k, &mut mem.keys);
        }
        let every = self
            .local
            .is_none_or(|th| v.values().iter().all(|&x| abs_key(x) >= th));
        let mut picked = None;
        if !every {
            let (mut pi, mut pv) = (
                std::mem::take(&mut mem.picked.idx),
                std::mem::take(&mut mem.picked.val),
            );
            let (mut di, mut dv) = take_parts(dropped);
            split_where_into(
                v,
                reaches(self.local),
                (&mut pi, &mut pv),
                (&mut di, &mut dv),
            );
            *dropped = SparseVec::new_unchecked(dim, di, dv);
            picked = Some(SparseVec::new_unchecked(dim, pi, pv));
        }
        if picked.as_ref().map_or(v.nnz(), SparseVec::nnz) > most {
            // The reused threshold went stale: exact top-k, re-estimated.
            let (mut pi, mut pv) = match picked.take() {
                Some(mut p) => take_parts(&mut p),
                None => (
                    std::mem::take(&mut mem.picked.idx),
                    std::mem::take(&mut mem.picked.val),
                ),
            };
            let (mut di, mut dv) = take_parts(dropped);
            split_topk_into(
                (v.indices(), v.values()),
                k,
                abs_key,
                (&mut pi, &mut pv),
                (&mut di, &mut dv),
                &mut mem.keys,
            );
            *dropped = SparseVec::new_unchecked(dim, di, dv);
            picked = Some(SparseVec::new_unchecked(dim, pi, pv));
            self.local = kth_magnitude(v.values(), k, &mut mem.keys);
        }
        picked
    }

    /// Step 5's budget: a gathered `result` past `max(k, floor(1.3 k))`
    /// becomes, on every rank, the same exact top-`k` of the same gathered
    /// entries; this rank (the owner of region `r`) adds what was cut from
    /// its region to `dropped`, and the global threshold is re-estimated
    /// from the result.
    fn cut_to_budget(
        &mut self,
        result: &mut SparseVec<E>,
        r: usize,
        mem: &mut Mem<E>,
        dropped: &mut SparseVec<E>,
    ) {
        let (dim, k) = (result.dim(), self.budget.k_for(result.dim()));
        split_topk_into(
            (result.indices(), result.values()),
            k,
            abs_key,
            (&mut mem.chosen.idx, &mut mem.chosen.val),
            (&mut mem.cut.idx, &mut mem.cut.val),
            &mut mem.keys,
        );
        let (lo, len) = (self.bounds[r], self.bounds[r + 1] - self.bounds[r]);
        let a = mem.cut.idx.partition_point(|&i| (i as usize) < lo);
        let b = mem.cut.idx.partition_point(|&i| (i as usize) < lo + len);
        add_into(
            dropped,
            (&mem.cut.idx[a..b], &mem.cut.val[a..b]),
            &mut mem.tmp,
        );
        self.global = kth_magnitude(result.values(), k, &mut mem.keys);
        copy_into(result, dim, &mem.chosen.idx, &mem.chosen.val);
    }
}

/// The vectors Ok-Topk works in, kept across calls: the sums of its
/// regions and the two sides of a cut, a merge's output, the selection's
/// keys, the message sent, its own selection and the entries of its region
/// it sends on.
#[derive(Debug)]
struct Mem<E> {
    kept: Pairs<E>,
    cut: Pairs<E>,
    tmp: Pairs<E>,
    keys: Vec<u64>,
    msg: Vec<u8>,
    picked: Pairs<E>,
    chosen: Pairs<E>,
}

impl<E> Default for Mem<E> {
    fn default() -> Self {
        Self {
            kept: Pairs::default(),
            cut: Pairs::default(),
            tmp: Pairs::default(),
            keys: Vec::new(),
            msg: Vec::new(),
            picked: Pairs::default(),
            chosen: Pairs::default(),
        }
    }
}

/// Step 3, split and reduce: in `P - 1` direct steps this rank sends the
/// entries of `sel` in region `r + s` (of `bounds`) to that region's owner
/// and receives its own region's from `r - s`; the region's sum in rank
/// order, built in `mem.kept`'s vectors.
fn split_and_reduce<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    sel: &SparseVec<E>,
    bounds: &[usize],
    mem: &mut Mem<E>,
) -> Result<SparseVec<E>> {
    let (p, r, dim) = (t.size(), t.rank(), sel.dim());
    let region = |j: usize| (bounds[j], bounds[j + 1] - bounds[j]);
    let piece = |j: usize| {
        let span = sel.span(region(j).0, region(j).1);
        (&sel.indices()[span.clone()], &sel.values()[span])
    };
    let mut got: Vec<Vec<u8>> = (0..p).map(|_| Vec::new()).collect();
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        mem.msg.clear();
        let (i, x) = piece(to);
        put_block_parts(&mut mem.msg, i, x);
        got[from] = t.take_buffer();
        t.exchange_into(to, &mem.msg, from, &mut got[from])?;
    }
    let (lo, len) = region(r);
    let parts = (0..p)
        .map(|q| {
            if q == r {
                let (i, x) = piece(r);
                return Ok((Cow::Borrowed(i), Cow::Borrowed(x)));
            }
            let mut rest: &[u8] = &got[q];
            let part = take_block_view(&mut rest, dim, lo, len, "ok-topk piece")?;
            if !rest.is_empty() {
                return Err(Error::corrupt("ok-topk piece", "trailing bytes"));
            }
            Ok(part)
        })
        .collect::<Result<Vec<PairsView<'_, E>>>>();
    let parts = parts?;
    sum_parts(
        &parts,
        dim,
        (&mut mem.kept.idx, &mut mem.kept.val),
        (&mut mem.tmp.idx, &mut mem.tmp.val),
    );
    drop(parts);
    got.into_iter().for_each(|b| t.give_buffer(b));
    Ok(SparseVec::new_unchecked(
        dim,
        std::mem::take(&mut mem.kept.idx),
        std::mem::take(&mut mem.kept.val),
    ))
}

/// Step 5, allgather: every owner's selected entries (`mem.chosen`, this
/// rank's) gathered with Bruck and concatenated in region order, in
/// `into`'s vectors; an entry outside its owner's region (of `bounds`) is
/// a corrupt block.
fn gather_regions<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    dim: usize,
    bounds: &[usize],
    mem: &mut Mem<E>,
    into: &mut SparseVec<E>,
) -> Result<SparseVec<E>> {
    mem.msg.clear();
    put_block_parts(&mut mem.msg, &mem.chosen.idx, &mem.chosen.val);
    let own = [&mem.msg[..]];
    let g = gather_bruck(t, &own)?;
    let (mut idx, mut val) = take_parts(into);
    for q in 0..t.size() {
        let mut rest = g.block(q).unwrap_or(own[0]);
        let (lo, len) = (bounds[q], bounds[q + 1] - bounds[q]);
        let (i, x) = take_block_view::<E>(&mut rest, dim, lo, len, "ok-topk block")?;
        if !rest.is_empty() {
            return Err(Error::corrupt("ok-topk block", "trailing bytes"));
        }
        idx.extend_from_slice(&i);
        val.extend_from_slice(&x);
    }
    g.release(t);
    SparseVec::new(dim, idx, val).map_err(|e| Error::corrupt("ok-topk blocks", e))
}

/// The registry name, from which the entry id derives.
const NAME: &str = "ok_topk";

impl<E: Element> OkTopk<E> {
    /// The state's kind: the thresholds are `E`'s bits, so the element
    /// type is part of it.
    fn kind() -> String {
        format!("sparse_coll::OkTopk<{}>", E::NAME)
    }
}

impl<E: Element> SparseAllreduce<E> for OkTopk<E> {
    /// Forgets the thresholds, regions and call count: the next call
    /// estimates afresh, as a first call does.
    fn reset(&mut self) {
        self.calls = 0;
        self.local = None;
        self.global = None;
        self.bounds.clear();
    }
    /// The call count, both thresholds and the region bounds: all depend
    /// on the rank count or on this rank's data ([`Scope::Local`]).
    fn save_state(&self) -> Result<State> {
        let mut s = State::new(Self::kind(), 1);
        s.put_u64("calls", Scope::Local, self.calls)
            .put_opt_u64("local", Scope::Local, self.local)
            .put_opt_u64("global", Scope::Local, self.global)
            .put(
                "bounds",
                Scope::Local,
                sparse_core::state::Tensor::U64(self.bounds.iter().map(|&b| b as u64).collect()),
            );
        Ok(s)
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect(&Self::kind(), 1)?;
        let (calls, local, global) = (
            s.local_u64("calls", 0)?,
            s.local_opt_u64("local")?,
            s.local_opt_u64("global")?,
        );
        let bounds = s
            .local_u64s("bounds")?
            .iter()
            .map(|&b| usize::try_from(b))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| {
                Error::corrupt(
                    "training state",
                    "sparse_coll::OkTopk: a bound does not fit",
                )
            })?;
        // Regions cover the input from 0 (the end is checked against the
        // input's length where they are used).
        if bounds.windows(2).any(|w| w[0] > w[1]) || bounds.first().is_some_and(|&b| b != 0) {
            return Err(Error::corrupt(
                "training state",
                format!(
                    "sparse_coll::OkTopk: region bounds out of order or not from 0: {bounds:?}"
                ),
            ));
        }
        self.calls = calls;
        self.local = local;
        self.global = global;
        self.bounds = bounds;
        Ok(())
    }
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        format!("{},period={}", self.budget.param(), self.period)
    }
    fn lossless(&self) -> bool {
        false
    }
    /// The call this state makes next: each rank's selection (`k` of its
    /// entries) split to the region owners, the owners' selections
    /// allgathered (`k` over all regions); a refresh call adds the
    /// boundaries' and the magnitudes' allgathers. Rounds `(P - 1) +
    /// ceil(lg P)`, plus `2 ceil(lg P)` when refreshing.
    fn cost(&self, prof: &Profile) -> Cost {
        let (p, lg) = (prof.p as f64, cost::ceil_log2(prof.p) as f64);
        let k = self.budget.k_for(prof.n) as f64;
        let pair = prof.pair_bytes();
        let held = prof.k_avg().max(1) as f64;
        let sel = k.min(held);
        // The union of the selections: the same share of the union.
        let sel_union = prof.union as f64 * sel / held;
        let chosen = k.min(sel_union);
        let mut bytes =
            prof.others() * (4.0 + pair * sel / p) + prof.others() * (8.0 + pair * chosen / p);
        let mut rounds = prof.others() + lg;
        if self.refreshes_next() || !self.regions_fit(prof.p, prof.n) {
            let mags = k.min(sel_union / p);
            bytes += prof.others() * (12.0 + 4.0 * prof.others())
                + prof.others() * (4.0 + prof.value_bytes as f64 * mags);
            rounds += 2.0 * lg;
        }
        bytes_cost(rounds, bytes)
    }
    /// SparDL's Table 1 bounds at the input's overlap.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(prof.within(ok_topk(prof.p, self.budget.k_for(prof.n))))
    }
    /// The ranks agree on the budget, the period and the call counter, so
    /// a rank whose state is out of step is a disagreement.
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let fields = [
            ("k", self.budget.k_for(v.dim()) as u64),
            ("period", self.period),
            ("call", self.calls),
        ];
        Some(admit(NAME, v, &fields, Ok(())))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let mut mem = std::mem::take(&mut self.mem);
        let done = self.reduce(t, v, mem.get::<Mem<E>>(), out);
        self.mem = mem;
        done?;
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for OkTopk<E> {
    /// A first call refreshes: the split to the region owners (`P - 1`
    /// steps) and three Bruck allgathers (boundaries, magnitudes, the
    /// selections).
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(p as u64 - 1 + 3 * u64::from(cost::ceil_log2(p)))
    }
    /// The owners' selections may together exceed `k` by the threshold's
    /// estimate: at most 30% more.
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.most(dim))
    }
}

impl<E: Element> Registered<E> for OkTopk<E> {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = false;
    const STATEFUL: bool = true;
    const BUDGET: bool = true;
    const WARM: bool = true;
    const PARAMS: &'static str = "k (entries selected) or density (of the dimension), period (calls between re-estimations, default 32)";
    const HELP: &'static str =
        "Ok-Topk: split and reduce over balanced regions, reused thresholds; lossy";
    fn build(params: &mut Params, d: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(d)?;
        Self::new(budget, params.take("period")?.unwrap_or(32))
    }
}

// SparDL's Table 1 formula for Ok-Topk.

/// Ok-Topk (SparDL Table 1, Li and Hoefler): `2 (P + lg P)` rounds,
/// `[2k (P - 1) / P, 6k (P - 1) / P]` words.
pub fn ok_topk(p: usize, k: usize) -> cost::Bounds {
    let r = 2.0 * (p as f64 + cost::ceil_log2(p) as f64);
    cost::Bounds {
        lo: Cost::new(r, 2.0 * crate::profile::frac(p) * k as f64),
        hi: Cost::new(r, 6.0 * crate::profile::frac(p) * k as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spardl_table1_by_hand() {
        // P = 8, k = 100: 2 (8 + 3) rounds, [2, 6] * 100 * 7/8 words.
        let ok = ok_topk(8, 100);
        assert_eq!(
            (ok.lo, ok.hi),
            (Cost::new(22.0, 175.0), Cost::new(22.0, 525.0))
        );
    }
}
