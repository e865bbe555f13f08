//! TopkA / AGsparse (RedSync sec. 5.3, SparDL Table 1): every rank's
//! selected pairs are allgathered and summed locally.

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::bytes::{le_bytes, le_u32s};
use crate::dense::{bruck_allgather, gather_bruck};
use crate::entry::{Admission, Reduced, admit};
use crate::frame::{pairs_view, sum_all, sum_parts, take_parts};
use crate::profile::{Profile, bytes_cost};
use crate::values::{WireValues, values_param};
use crate::{Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::{Element, Error, Result, SparseVec};
use std::borrow::Cow;

/// TopkA with a codec, after the entry round: each rank sends what
/// [`WireValues::pack`] keeps and returns the exact remainder in
/// `dropped`.
fn quantized<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    values: &WireValues<E>,
) -> Result<Reduced<E>> {
    let packed = values.pack(v)?;
    let all = bruck_allgather(t, packed.bytes())?;
    let dropped = packed.into_parts().1;
    let parts = all
        .iter()
        .map(|b| {
            let mut rest: &[u8] = b;
            let part = values.take(&mut rest, v.dim(), 0, v.dim(), "topk_a message")?;
            if !rest.is_empty() {
                return Err(Error::corrupt("topk_a message", "trailing bytes"));
            }
            Ok(part)
        })
        .collect::<Result<Vec<_>>>()?;
    let result = sum_all(parts.iter(), v.dim());
    Ok(Reduced {
        result,
        dropped,
        ..Reduced::default()
    })
}

/// TopkA with raw values after the entry round, into `out`, reusing its
/// allocations and the transport's buffer pool: the pairs are sent as they
/// lie in memory, the received pairs read in place, and the sum in rank
/// order merged into `out`'s vectors
/// ([`sparse_core::sparse::merge_sum_into`]).
fn raw_into<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    let (dim, p) = (v.dim(), t.size());
    let (idx, val) = (le_u32s(v.indices()), le_bytes(v.values()));
    let own = [&idx[..], &val[..]];
    let g = gather_bruck(t, &own)?;
    let views = (0..p)
        .map(|q| match g.block(q) {
            None => Ok((Cow::Borrowed(v.indices()), Cow::Borrowed(v.values()))),
            // The Bruck frame carries the length: nnz follows from it.
            Some(b) => pairs_view::<E>(b, b.len() / (4 + E::BYTES), dim, "topk_a message"),
        })
        .collect::<Result<Vec<_>>>()?;
    // The sum in rank order, alternating between the result's and the
    // (empty) dropped vector's allocations.
    let (mut ai, mut av) = take_parts(&mut out.result);
    let (mut bi, mut bv) = take_parts(&mut out.dropped);
    sum_parts(&views, dim, (&mut ai, &mut av), (&mut bi, &mut bv));
    drop(views);
    g.release(t);
    out.result = SparseVec::new_unchecked(dim, ai, av);
    out.dropped = SparseVec::new_unchecked(dim, bi, bv);
    Ok(())
}

/// TopkA / AGsparse: each rank's `(indices, values)`, packed behind a
/// 4-byte length (indices then values), is allgathered with Bruck's
/// algorithm (any `P`, `ceil(lg P)` rounds); every rank then sums the `P`
/// vectors in rank order, so the result is bitwise identical everywhere.
/// Lossless with raw values. A rank receives `sum over other ranks q of
/// (4 + nnz_q (4 + isize))` bytes: with `k` each, SparDL's `2 (P - 1) k`
/// words plus the framing.
///
/// With a lossy codec (`values`; RedSync's quantized AGsparse with
/// [`WireValues::same_sign_mean`]; any codec of the registry, a user's
/// own included) each rank sends what
/// [`WireValues::pack`] keeps and returns the exact remainder in
/// `dropped`, so the inputs sum to `result` plus every `dropped`.
///
/// Memory per rank: the `P` gathered messages and the merged result, about
/// `2 (4 + E) K` bytes for `K` entries over all ranks (`E` the element's
/// bytes). Registry name `topk_a`, parameter `values`.
///
/// # Errors
/// [`sparse_core::Error::Disagreement`] if ranks pass different
/// dimensions; transport errors; [`sparse_core::Error::Corrupt`] for
/// malformed messages; [`sparse_core::Error::NonFinite`] for a value a
/// lossy codec cannot take (on every rank).
#[derive(Debug, Clone, Default)]
pub struct TopkA<E> {
    values: WireValues<E>,
}

impl<E: Element> TopkA<E> {
    /// TopkA sending its values with `values`.
    pub fn new(values: WireValues<E>) -> Self {
        Self { values }
    }
}

/// The registry name, from which the entry id derives.
const NAME: &str = "topk_a";

impl<E: Element> SparseAllreduce<E> for TopkA<E> {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        values_param(&self.values)
    }
    fn lossless(&self) -> bool {
        self.values.lossless()
    }
    /// Every other rank's framed pairs, in `ceil(lg P)` rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let prof = prof.with_values(&self.values);
        let bytes = prof.others() * (4.0 + prof.pair_bytes() * prof.k_avg() as f64);
        bytes_cost(cost::ceil_log2(prof.p) as f64, bytes)
    }
    /// Table 1 with the mean `k`.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(topk_a(prof.p, prof.k_avg()))
    }
    /// A lossy codec's split checked before the round.
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let local = self.values.ready(v);
        Some(admit(NAME, v, &[("values", self.values.code())], local))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        if self.values.is_raw() {
            return raw_into(t, v, out).map(Ok);
        }
        *out = quantized(t, v, &self.values)?;
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for TopkA<E> {
    /// A Bruck allgather: `ceil(lg P)` rounds on every rank.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(cost::ceil_log2(p).into())
    }
    /// Raw values: a framed block of every other rank's pairs.
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        let pair = 4 + E::BYTES;
        self.values.is_raw().then(|| {
            (0..ins.len())
                .filter(|&q| q != r)
                .map(|q| (4 + pair * ins[q].nnz()) as u64)
                .sum()
        })
    }
}

impl<E: Element> Registered<E> for TopkA<E> {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const WARM: bool = true;
    const PLANNED: bool = true;
    const VALUES: bool = true;
    const PARAMS: &'static str =
        "values (a codec of the registry: raw, f16, bf16, ssmean or a user's; default raw)";
    const HELP: &'static str =
        "allgather of every rank's pairs, summed in rank order (RedSync, SparDL's TopkA); lossless";
    fn build(params: &mut Params, _: Defaults, catalog: &dyn Catalog<E>) -> Result<Self> {
        Ok(Self::new(params.take_values(catalog)?))
    }
}

// The papers' formulas for TopkA (SparDL's Table 1; RedSync's Eq. 1, the
// time of the allgather-based synchronisation this is, and its Eq. 2, the
// time of the dense allreduce RedSync weighs it against).

/// TopkA / AGsparse (SparDL Table 1; RedSync sec. 5.3 and App. B): an
/// allgather of every rank's `k` pairs by recursive doubling: `lg P` rounds,
/// `2 (P - 1) k` words.
pub fn topk_a(p: usize, k: usize) -> Cost {
    Cost::new(cost::ceil_log2(p) as f64, 2.0 * (p as f64 - 1.0) * k as f64)
}

/// RedSync Eq. 1 (time of allgather-based sparse synchronisation):
/// `T_select + lg(p) alpha + (p - 1) M D beta + p gamma1`, with `M` the layer
/// size in bytes, `D` the density of the communication set, `beta` seconds
/// per byte and `gamma1` the time to decompress one rank's message.
pub fn redsync_sparse_time(
    p: usize,
    m_bytes: f64,
    density: f64,
    t_select: f64,
    alpha: f64,
    beta: f64,
    gamma1: f64,
) -> f64 {
    t_select
        + cost::ceil_log2(p) as f64 * alpha
        + (p as f64 - 1.0) * m_bytes * density * beta
        + p as f64 * gamma1
}

/// RedSync Eq. 2 (time of Rabenseifner's dense allreduce, which RedSync
/// weighs against Eq. 1 to choose a layer's synchronisation):
/// `2 lg(p) alpha + 2 (p - 1) / p M beta + (p - 1) / p gamma2`, with
/// `gamma2` the time to reduce `M` bytes locally.
pub fn redsync_dense_time(p: usize, m_bytes: f64, alpha: f64, beta: f64, gamma2: f64) -> f64 {
    let frac = (p as f64 - 1.0) / p as f64;
    2.0 * cost::ceil_log2(p) as f64 * alpha + 2.0 * frac * m_bytes * beta + frac * gamma2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spardl_table1_by_hand() {
        // P = 8, k = 100: lg 8 = 3 rounds, 2 * 7 * 100 words.
        assert_eq!(topk_a(8, 100), Cost::new(3.0, 1400.0));
    }

    #[test]
    fn redsync_eq1_by_hand() {
        // p = 4, M = 1e6 bytes, D = 0.001, select 1 ms, alpha 1 us, beta 1 ns, gamma1 10 us:
        // 1e-3 + 2e-6 + 3 * 1000 * 1e-9 + 4e-5 = 0.001045.
        let t = redsync_sparse_time(4, 1e6, 0.001, 1e-3, 1e-6, 1e-9, 1e-5);
        assert!(
            approx::relative_eq!(t, 0.001045, max_relative = 1e-9),
            "{t}"
        );
    }

    #[test]
    fn redsync_eq2_by_hand() {
        // p = 4, M = 1e6 bytes, alpha 1 us, beta 1 ns, gamma2 200 us:
        // 4e-6 + 1.5e6 * 1e-9 + 0.75 * 2e-4 = 0.001654.
        let t = redsync_dense_time(4, 1e6, 1e-6, 1e-9, 2e-4);
        assert!(
            approx::relative_eq!(t, 0.001654, max_relative = 1e-9),
            "{t}"
        );
    }
}
