//! SparDL with R-SAG (Sec. 3.3): SRS inside teams, then recursive
//! doubling between the workers of a column.

use crate::algorithm::{Budget, Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::entry::Reduced;
use crate::frame::{put_block, take_block_view};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::Scratch;
use crate::values::WireValues;
use crate::{Admission, Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::{Element, Error, Result, SparseVec};

use super::{Keep, Mem, add_and_cut, cut_to, in_teams, k_and_teams, sag_admit};

/// The registry name, from which the entry id derives.
pub(super) const RSAG_NAME: &str = "spardl_rsag";

/// R-SAG's teams: `d` a power of two.
///
/// # Errors
/// [`Error::InvalidParameter`] named `d` otherwise.
pub(super) fn rsag_teams(d: usize) -> Result<()> {
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
    )?
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
/// Memory per rank: as [`crate::Spardl`], `O((4 + E) (nnz + k))` bytes.
///
/// Registry name `spardl_rsag`, parameters `k` and `d`.
///
/// # Errors
/// [`Error::InvalidParameter`] if `d` is not a power of two dividing `P`;
/// as [`crate::Spardl`].
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
        self.d.unwrap_or(if p.is_multiple_of(2) { 2 } else { 1 })
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
        let c = spardl_rsag(prof.p, k, self.teams(prof.p));
        bytes_cost(c.rounds, c.words / 2.0 * prof.pair_bytes())
    }
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let d = self.teams(t.size());
        Some(sag_admit(t, v, self.budget.k_for(v.dim()), d, RSAG_NAME))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let k = self.budget.k_for(v.dim());
        let d = self.teams(t.size());
        rsag(t, v, k, d, self.mem.get::<Mem<E>>(), out)?;
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for SpardlRsag {
    /// SRS in teams of `P / d` and its all-gather, with `lg d` steps of
    /// recursive doubling between.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        let d = self.teams(p);
        Some(2 * u64::from(cost::ceil_log2(p / d)) + u64::from(d.ilog2()))
    }
    fn max_result_entries(&self, dim: usize) -> Option<usize> {
        Some(self.budget.k_for(dim))
    }
}

impl<E: Element> Registered<E> for SpardlRsag {
    const NAME: &'static str = RSAG_NAME;
    const LOSSLESS: bool = false;
    const BUDGET: bool = true;
    const WARM: bool = true;
    const PARAMS: &'static str = "k (entries kept) or density (of the dimension), d (teams, a power of two dividing P; default 2 for even P, else 1)";
    const HELP: &'static str =
        "SparDL with R-SAG: SRS in teams, recursive doubling between them; lossy";
    fn build(params: &mut Params, d: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        let budget = params.take_budget(d)?;
        let teams = super::teams_param(params)?;
        teams.map_or(Ok(()), rsag_teams)?;
        Ok(Self::new(budget, teams))
    }
    /// The largest power of two up to 4 dividing `P` as its teams.
    fn suite_specs(p: usize) -> Vec<String> {
        let d = [4usize, 2, 1]
            .into_iter()
            .find(|d| p.is_multiple_of(*d))
            .unwrap_or(1);
        vec![format!("{RSAG_NAME}:d={d}")]
    }
}

// SparDL's formula for R-SAG (Eq. 5).

/// SparDL with R-SAG and `d` teams (`d` a power of two dividing `P`; Eq. 5):
/// SRS and the final Bruck allgather inside a team of `P / d` ranks cost
/// `ceil(lg(P/d))` rounds and `2k (P - d) / P` words each (the text's
/// "2k (P-d)/2" is a typo: `2k (m - 1) / m` with `m = P / d`), and R-SAG's
/// `lg d` recursive-doubling steps move `2 L` words each with
/// `L = d k / P` (Eq. 4): `2 ceil(lg(P/d)) + lg d` rounds,
/// `2k ((2P - 2d) / P + d lg d / P)` words.
pub fn spardl_rsag(p: usize, k: usize, d: usize) -> Cost {
    let (pf, kf, df) = (p as f64, k as f64, d as f64);
    let lgd = cost::ceil_log2(d) as f64;
    Cost::new(
        2.0 * cost::ceil_log2(p / d) as f64 + lgd,
        2.0 * kf * ((2.0 * pf - 2.0 * df) / pf + df * lgd / pf),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spardl_eq5_by_hand() {
        // P = 8, d = 2: 2 lg 4 + 1 = 5 rounds; 2*100*((16-4)/8 + 2*1/8) = 200*1.75 = 350.
        assert_eq!(spardl_rsag(8, 100, 2), Cost::new(5.0, 350.0));
        // d = 2 keeps SparDL's bandwidth with fewer rounds (the paper's remark).
        assert_eq!(
            spardl_rsag(8, 100, 2).words,
            super::super::spardl(8, 100).words
        );
    }
}
