//! SparDL with B-SAG (Sec. 3.3): SRS inside teams, then a Bruck allgather
//! of each worker's top `h` between the workers of a column, `h` adjusted
//! from call to call by Alg. 2.

use crate::algorithm::{Budget, Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::dense::gather_bruck;
use crate::entry::Reduced;
use crate::frame::{put_block, sum_parts, take_block_view, take_parts};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::Scratch;
use crate::values::WireValues;
use crate::{Admission, Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::state::{Scope, State};
use sparse_core::topk::split_topk_into;
use sparse_core::{Element, Error, Result, SparseVec, abs_key};

use super::{Keep, Mem, cut_to, in_teams, k_and_teams, pick_cut, sag_admit};

/// The registry name, from which the entry id derives.
const BSAG_NAME: &str = "spardl_bsag";

/// SparDL with B-SAG (Sec. 3.3, any `d` dividing `P`), with the state of
/// Alg. 2's compression-ratio adjustment kept across calls.
///
/// Each call: SRS inside each team of `m = P / d` workers (as in
/// [`crate::SpardlRsag`]); every worker cuts its block to its top `h` and the `d`
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
/// Memory per rank: as [`crate::Spardl`], `O((4 + E) (nnz + k))` bytes.
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
        )?
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
        Some(prof.within(spardl_bsag(prof.p, k, d)))
    }
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let d = self.teams(t.size());
        Some(sag_admit(t, v, self.budget.k_for(v.dim()), d, BSAG_NAME))
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

impl<E: Element> Promises<E> for SpardlBsag {
    /// SRS in teams of `P / d` and its all-gather, with a Bruck
    /// allgather of `ceil(lg d)` steps between.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        let d = self.d.unwrap_or_else(|| smallest_divisor(p));
        Some(2 * u64::from(cost::ceil_log2(p / d)) + u64::from(cost::ceil_log2(d)))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
}

impl<E: Element> Registered<E> for SpardlBsag {
    const NAME: &'static str = BSAG_NAME;
    const LOSSLESS: bool = false;
    const STATEFUL: bool = true;
    const BUDGET: bool = true;
    const WARM: bool = true;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension), d (teams dividing P; default the smallest divisor above 1)";
    const HELP: &'static str = "SparDL with B-SAG: SRS in teams, an adaptive h between them; lossy";
    fn build(params: &mut Params, defaults: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(defaults)?;
        match super::teams_param(params)? {
            Some(d) => Self::new(budget, d),
            None => Ok(Self::auto_teams(budget)),
        }
    }
    /// The smallest divisor above 1 of `P` as its teams.
    fn suite_specs(p: usize) -> Vec<String> {
        vec![format!("{BSAG_NAME}:d={}", smallest_divisor(p))]
    }
}

/// The smallest divisor above 1 of `p` (1 for `p = 1`): B-SAG's default
/// teams.
fn smallest_divisor(p: usize) -> usize {
    (2..=p).find(|d| p.is_multiple_of(*d)).unwrap_or(1)
}

// SparDL's formula for B-SAG (Eq. 6 and Table 1).

/// SparDL with B-SAG and `d` teams (`d` dividing `P`; Eq. 6 plus the team
/// SRS and allgather as in [`crate::cost::spardl_rsag`]). B-SAG's Bruck allgather moves
/// `[2k (d - 1) / P, 2k (d^2 - d) / P]` words in `ceil(lg d)` rounds, so the
/// total is `2 ceil(lg(P/d)) + ceil(lg d)` rounds and
/// `[2k (2P - d - 1) / P, 2k (d^2 + 2P - 3d) / P]` words. The upper bound is
/// Table 1's; its printed lower bound is garbled in our copy, and the one
/// here is the sum of Eq. 6's lower bound and the team phases.
pub fn spardl_bsag(p: usize, k: usize, d: usize) -> cost::Bounds {
    let (pf, kf, df) = (p as f64, k as f64, d as f64);
    let r = 2.0 * cost::ceil_log2(p / d) as f64 + cost::ceil_log2(d) as f64;
    cost::Bounds {
        lo: Cost::new(r, 2.0 * kf * (2.0 * pf - df - 1.0) / pf),
        hi: Cost::new(r, 2.0 * kf * (df * df + 2.0 * pf - 3.0 * df) / pf),
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

    #[test]
    fn spardl_eq6_by_hand() {
        // P = 8, d = 4: rounds 2*1 + 2 = 4; lo = 200*(16-5)/8 = 275;
        // hi = 200 * (16 + 16 - 12)/8 = 500.
        let b = spardl_bsag(8, 100, 4);
        assert_eq!((b.lo, b.hi), (Cost::new(4.0, 275.0), Cost::new(4.0, 500.0)));
    }
}
