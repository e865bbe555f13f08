//! SparCML's SSAR_Recursive_double (sec. 5.3.1).

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::dense::Fold;
use crate::entry::{Admission, Reduced, admit};
use crate::failure::Failure;
use crate::frame::{
    StreamView, decode_stream, encode_stream, put_dense_stream, put_sparse_stream,
    stream_to_sparse, stream_view, take_parts,
};
use crate::profile::{Profile, bytes_cost};
use crate::values::{Packed, WireValues, values_param};
use crate::{Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::sparse::merge_sum_into;
use sparse_core::{Element, Error, Result, SparseVec, Stream};

/// SSAR_Recursive_double with raw values after the entry round, every sum
/// formed by [`Stream::sum`]: the reference [`raw_into`] is checked
/// against (the same messages, sums and result).
#[cfg(test)]
fn reference<T: Transport + ?Sized, E: Element>(t: &mut T, v: &SparseVec<E>) -> Result<Reduced<E>> {
    let dim = v.dim();
    let r = t.rank();
    let fold = Fold::new(t);
    let mut acc = Stream::from_sparse(v.clone());
    match fold.role(r) {
        Some(true) => t.send(r + 1, &encode_stream(&acc))?,
        Some(false) => acc = acc.sum(&decode_stream(&t.recv(r - 1)?, dim)?)?,
        None => {}
    }
    if let Some(nr) = fold.newrank {
        let mut mask = 1;
        while mask < fold.pp {
            let partner = fold.real(nr ^ mask);
            let got = decode_stream(&t.exchange(partner, &encode_stream(&acc), partner)?, dim)?;
            acc = acc.sum(&got)?;
            mask <<= 1;
        }
    }
    match fold.role(r) {
        Some(true) => acc = decode_stream(&t.recv(r + 1)?, dim)?,
        Some(false) => t.send(r - 1, &encode_stream(&acc))?,
        None => {}
    }
    Ok(Reduced {
        result: stream_to_sparse(acc)?,
        dropped: SparseVec::zeros(dim)?,
        ..Reduced::default()
    })
}

/// SSAR_Recursive_double with a lossy codec, after the entry round. The
/// outer error is any body's (peers may be left waiting); the inner one a
/// failure every rank agrees on with no message left unread: a partial
/// sum the codec cannot carry (it overflowed to an infinity, say) fails
/// its rank's local work part way (and that of every core rank holding
/// the same sum: they fail alike, named by the lowest of them), and from
/// then on those ranks, and every rank that hears of it, send [`Failure`]
/// frames in place of their messages.
fn quantized<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    values: &WireValues<E>,
) -> Result<Result<Reduced<E>>> {
    let dim = v.dim();
    let (r, p) = (t.rank(), t.size());
    let fold = Fold::new(t);
    let mut failure = Failure::default();
    let mut frame = Vec::new();
    let mut acc = v.clone();
    let mut dropped = SparseVec::zeros(dim)?;
    // `acc` split for sending, or `None` once this rank knows of a
    // failure. A failure is named by the lowest rank of those that hold
    // this same sum and so fail alike (`lowest`).
    let pack = |failure: &mut Failure, acc: &SparseVec<E>, lowest: usize| {
        failure.attempt(lowest, || values.pack(acc))
    };
    // A received message: `None` for a failure frame (noted).
    let read = |failure: &mut Failure, b: &[u8]| -> Result<Option<SparseVec<E>>> {
        if failure.note(b, p)? {
            return Ok(None);
        }
        let mut rest = b;
        let part = values.take(&mut rest, dim, 0, dim, "ssar message")?;
        if !rest.is_empty() {
            return Err(Error::corrupt("ssar message", "trailing bytes"));
        }
        Ok(Some(part))
    };
    match fold.role(r) {
        Some(true) => {
            let packed = pack(&mut failure, &acc, r);
            t.send(r + 1, message(packed.as_ref(), &failure, &mut frame))?;
            if let Some(packed) = packed {
                dropped = packed.into_parts().1;
            }
        }
        Some(false) => {
            if let Some(got) = read(&mut failure, &t.recv(r - 1)?)? {
                acc = acc.merge_sum(&got)?;
            }
        }
        None => {}
    }
    if let Some(nr) = fold.newrank {
        let mut mask = 1;
        while mask < fold.pp {
            let partner = fold.real(nr ^ mask);
            // Every rank of this block of `mask` core ranks knows what the
            // others know (they have exchanged all of it), so they send
            // the same failure, and after the exchange the block twice
            // its size does: the last step leaves every core rank
            // knowing the same lowest failing rank.
            let packed = pack(&mut failure, &acc, fold.real(nr & !(mask - 1)));
            let bytes = message(packed.as_ref(), &failure, &mut frame);
            let got = read(&mut failure, &t.exchange(partner, bytes, partner)?)?;
            if let (Some(packed), Some(got), false) = (packed, got, failure.failed()) {
                // The block of `mask` core ranks holds this same sum, and
                // makes the same split (splits are functions of the
                // values): its lowest keeps the remainder.
                if nr % mask == 0 {
                    dropped = dropped.merge_sum(packed.rest())?;
                }
                acc = packed.sent().merge_sum(&got)?;
            }
            mask <<= 1;
        }
    }
    match fold.role(r) {
        Some(true) => {
            let got = t.recv(r + 1)?;
            if !failure.note(&got, p)? {
                acc = stream_to_sparse(decode_stream(&got, dim)?)?;
            }
        }
        Some(false) if failure.failed() => t.send(r - 1, &failure.frame())?,
        Some(false) => t.send(r - 1, &encode_stream(&Stream::Sparse(acc.clone())))?,
        None => {}
    }
    Ok(failure.outcome().map(|()| Reduced {
        result: acc,
        dropped,
        ..Reduced::default()
    }))
}

/// What a rank sends for a partial sum: its packed message, or (where
/// `packed` is `None`: this rank knows of a failure) a failure frame,
/// written into `frame`.
fn message<'a, E: Element>(
    packed: Option<&'a Packed<E>>,
    failure: &Failure,
    frame: &'a mut Vec<u8>,
) -> &'a [u8] {
    match packed {
        Some(p) => p.bytes(),
        None => {
            *frame = failure.frame();
            frame
        }
    }
}

/// Rounds of recursive doubling with MPICH's fold: `lg P` for a power of
/// two, else `floor(lg P) + 2`.
pub(crate) fn fold_rounds(p: usize) -> f64 {
    if p.is_power_of_two() {
        cost::ceil_log2(p) as f64
    } else {
        cost::floor_log2(p) as f64 + 2.0
    }
}

/// Rank `r`'s rounds of recursive doubling with MPICH's fold on `p`
/// ranks: the folded rank sits out (its input out, the result back), its
/// partner takes two more than the `lg p'` of the core.
pub(crate) fn fold_rounds_of(p: usize, r: usize) -> u64 {
    let core = 1usize << p.ilog2();
    let rem = p - core;
    match (r < 2 * rem, r.is_multiple_of(2)) {
        (true, true) => 2,
        (true, false) => u64::from(core.ilog2()) + 2,
        _ => core.ilog2().into(),
    }
}

/// SSAR_Recursive_double with raw values after the entry round, into
/// `out`, reusing its vectors and the transport's buffer pool: each partial
/// sum is written into the pool's send buffer, the partner's is received
/// into a pooled buffer and read in place, and the sparse sums alternate
/// between `out`'s two vectors ([`merge_sum_into`]).
fn raw_into<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    const WHAT: &str = "stream message";
    let dim = v.dim();
    let r = t.rank();
    let fold = Fold::new(t);
    let mut acc = Acc {
        dim,
        delta: Stream::<E>::delta(dim),
        state: State::Input,
        parts: take_parts(&mut out.result),
        spare: take_parts(&mut out.dropped),
    };
    if v.nnz() > acc.delta {
        acc.state = State::Dense(acc.densify(v.indices(), v.values())?);
    }
    let (mut send, mut got) = (t.take_buffer(), t.take_buffer());
    let run = (|| {
        match fold.role(r) {
            Some(true) => t.send(r + 1, acc.encode(v, &mut send))?,
            Some(false) => {
                t.recv_into(r - 1, &mut got)?;
                acc.add(v, stream_view(&got, dim, WHAT)?)?;
            }
            None => {}
        }
        if let Some(nr) = fold.newrank {
            let mut mask = 1;
            while mask < fold.pp {
                let partner = fold.real(nr ^ mask);
                t.exchange_into(partner, acc.encode(v, &mut send), partner, &mut got)?;
                acc.add(v, stream_view(&got, dim, WHAT)?)?;
                mask <<= 1;
            }
        }
        match fold.role(r) {
            Some(true) => {
                t.recv_into(r + 1, &mut got)?;
                acc.replace(stream_view(&got, dim, WHAT)?);
            }
            Some(false) => t.send(r - 1, acc.encode(v, &mut send))?,
            None => {}
        }
        Ok(())
    })();
    t.give_buffer(send);
    t.give_buffer(got);
    run?;
    let Acc {
        state,
        mut parts,
        mut spare,
        ..
    } = acc;
    // An earlier partial sum may be left in the spare vectors.
    spare.0.clear();
    spare.1.clear();
    out.result = match state {
        State::Input => SparseVec::new_unchecked(dim, v.indices().to_vec(), v.values().to_vec()),
        State::Sparse => SparseVec::new_unchecked(dim, parts.0, parts.1),
        State::Dense(d) => {
            parts.0.clear();
            parts.1.clear();
            SparseVec::from_dense(&d)?
        }
    };
    out.dropped = SparseVec::new_unchecked(dim, spare.0, spare.1);
    Ok(())
}

/// Where [`raw_into`]'s partial sum is.
enum State<E> {
    /// Still the input.
    Input,
    /// In [`Acc::parts`], at most delta entries.
    Sparse,
    /// Dense, past delta (as [`Stream::from_sparse`] turns it).
    Dense(Vec<E>),
}

/// The partial sum of [`raw_into`] and its two pairs of
/// vectors.
struct Acc<E> {
    dim: usize,
    delta: usize,
    state: State<E>,
    parts: (Vec<u32>, Vec<E>),
    spare: (Vec<u32>, Vec<E>),
}

/// The sparse entries of a partial sum in `state` (`Err` with the dense
/// values past delta); `parts` holds them in [`State::Sparse`]. A function
/// of the fields rather than a method, so that [`Acc::add`] can write
/// `spare` while it reads them.
fn pairs<'a, E: Element>(
    state: &'a State<E>,
    parts: &'a (Vec<u32>, Vec<E>),
    v: &'a SparseVec<E>,
) -> std::result::Result<(&'a [u32], &'a [E]), &'a [E]> {
    match state {
        State::Input => Ok((v.indices(), v.values())),
        State::Sparse => Ok((&parts.0, &parts.1)),
        State::Dense(d) => Err(d),
    }
}

/// `d[i] = d[i] + x` for every pair, as [`SparseVec::add_to_dense`] adds.
fn add_pairs<E: Element>(d: &mut [E], i: &[u32], x: &[E]) {
    for (&i, &x) in i.iter().zip(x) {
        d[i as usize] = d[i as usize] + x;
    }
}

impl<E: Element> Acc<E> {
    /// `0 + x` at every entry, as [`SparseVec::to_dense`].
    fn densify(&self, i: &[u32], x: &[E]) -> Result<Vec<E>> {
        let mut d = sparse_core::alloc::try_filled(self.dim, E::zero(), "a dense stream")?;
        add_pairs(&mut d, i, x);
        Ok(d)
    }

    /// The partial sum as [`encode_stream`] writes it, into `buf`.
    fn encode<'b>(&self, v: &SparseVec<E>, buf: &'b mut Vec<u8>) -> &'b [u8] {
        buf.clear();
        match pairs(&self.state, &self.parts, v) {
            Ok((i, x)) => put_sparse_stream(buf, i, x),
            Err(d) => put_dense_stream(buf, d),
        }
        buf
    }

    /// `self + got`, in that order, as [`Stream::sum`] forms it.
    fn add(&mut self, v: &SparseVec<E>, got: StreamView<'_, E>) -> Result<()> {
        let next = match (pairs(&self.state, &self.parts, v).ok(), got) {
            (Some(a), StreamView::Sparse((i, x))) => {
                let (si, sv) = &mut self.spare;
                merge_sum_into(a, (&i, &x), si, sv);
                std::mem::swap(&mut self.parts, &mut self.spare);
                if self.parts.0.len() > self.delta {
                    State::Dense(self.densify(&self.parts.0, &self.parts.1)?)
                } else {
                    State::Sparse
                }
            }
            (Some((i, x)), StreamView::Dense(d)) => {
                let mut d = d.into_owned();
                add_pairs(&mut d, i, x);
                State::Dense(d)
            }
            (None, got) => {
                let State::Dense(mut a) = std::mem::replace(&mut self.state, State::Input) else {
                    unreachable!("pairs() is Err only when dense")
                };
                match got {
                    StreamView::Sparse((i, x)) => add_pairs(&mut a, &i, &x),
                    StreamView::Dense(d) => {
                        a.iter_mut().zip(d.iter()).for_each(|(a, &b)| *a = *a + b)
                    }
                }
                State::Dense(a)
            }
        };
        self.state = next;
        Ok(())
    }

    /// The partial sum replaced by `got` (a folded rank's result).
    fn replace(&mut self, got: StreamView<'_, E>) {
        self.state = match got {
            StreamView::Sparse((i, x)) => {
                let (pi, pv) = &mut self.parts;
                pi.clear();
                pv.clear();
                pi.extend_from_slice(&i);
                pv.extend_from_slice(&x);
                State::Sparse
            }
            StreamView::Dense(d) => State::Dense(d.into_owned()),
        };
    }
}

/// SSAR_Recursive_double: in round `t` ranks `2^(t-1)` apart exchange their
/// partial sums as sparse streams and add them (`lg P` rounds for a power
/// of two). A stream switches to dense past SparCML's delta, so a result
/// that fills in is never larger on the wire than dense. Non-powers of two
/// fold as MPICH does (each extra rank hands its stream to an odd partner
/// and gets the result back). Partners add `a + b` and `b + a`: equal in
/// IEEE arithmetic, so every rank holds a bitwise identical result.
/// Lossless.
///
/// Bytes: each message is an 8-byte header (tag, padding, `nnz: u32`) and
/// the pairs; between
/// `k lg P` pairs (indices fully overlap) and `(P - 1) k` (disjoint) for
/// the busiest rank, SparCML's bounds.
///
/// Memory per rank: the running stream and one received stream: `O((4 + E)
/// (nnz + result))` bytes while sparse, at most about `3 n E` once the stream
/// is dense past delta (`E` the element's bytes).
///
/// With a lossy codec (`values`) its partial sums are split before
/// each send a rank splits its partial sum with
/// [`WireValues::pack`], sends what the codec carries exactly and
/// adds the partner's (`a + b` and `b + a`, so partners stay identical).
/// The `2^i` core ranks of a block hold the same partial sum at step `i`,
/// so its remainder goes to the `dropped` of one of them, the block's
/// lowest; the inputs sum to `result` plus every `dropped`. A folded rank's
/// input is split likewise; the result goes back to it raw (exactly). Lossy
/// codecs send sparse blocks throughout (no dense switch); raw values travel
/// exactly.
///
///
/// Registry name `ssar_recursive_double`, parameter `values`.
///
/// # Errors
/// [`sparse_core::Error::Disagreement`] if ranks pass different dimensions;
/// transport errors; [`sparse_core::Error::Corrupt`] for malformed messages;
/// a lossy codec's errors.
#[derive(Debug, Clone, Default)]
pub struct SsarRecursiveDouble<E> {
    values: WireValues<E>,
}

impl<E: Element> SsarRecursiveDouble<E> {
    /// SSAR_Recursive_double sending its partial sums with `values`.
    pub fn new(values: WireValues<E>) -> Self {
        Self { values }
    }
}

/// The registry name, from which the entry id derives.
const NAME: &str = "ssar_recursive_double";

impl<E: Element> SparseAllreduce<E> for SsarRecursiveDouble<E> {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        values_param(&self.values)
    }
    fn lossless(&self) -> bool {
        self.values.lossless()
    }
    /// For each rank, the streams it receives: a rank with a folded partner
    /// (MPICH's fold, `P` not a power of two) first that partner's input,
    /// then at step `i` of the recursive doubling the union of the ranks its
    /// partner's group of `2^i` core ranks stands for (dense past delta); a
    /// folded rank only the result. The busiest rank's total.
    fn cost(&self, prof: &Profile) -> Cost {
        let prof = &prof.with_values(&self.values);
        let p = prof.p;
        if p <= 1 {
            return Cost::new(0.0, 0.0);
        }
        let core = 1usize << p.ilog2();
        let rem = p - core;
        let n = prof.n as f64;
        let stands_for = |x: usize| if x < rem { 2.0 } else { 1.0 };
        let busiest = (0..core)
            .map(|j| {
                let fold = if j < rem {
                    prof.stream_bytes(prof.k_avg() as f64, n)
                } else {
                    0.0
                };
                let steps: f64 = (0..core.ilog2())
                    .map(|i| {
                        let group = (j >> i) ^ 1;
                        let ranks: f64 =
                            (0..core).filter(|x| x >> i == group).map(stands_for).sum();
                        prof.stream_bytes(prof.union_of(ranks), n)
                    })
                    .sum();
                fold + steps
            })
            .fold(0.0, f64::max);
        let folded = if rem > 0 {
            prof.stream_bytes(prof.union as f64, n)
        } else {
            0.0
        };
        bytes_cost(fold_rounds(p), busiest.max(folded))
    }
    /// SparCML's bounds at the input's overlap.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(prof.within(ssar_recursive_double(prof.p, prof.k_avg())))
    }
    /// A lossy codec's split checked before the round.
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let local = self.values.ready(v);
        Some(admit(NAME, v, &[("values", self.values.code())], local))
    }
    /// The inner error: a partial sum a lossy codec cannot carry, that
    /// rank's own error and the others' [`Error::PeerError`] naming the
    /// lowest such rank (every rank took part in every message, so the
    /// next call works).
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
        Ok(quantized(t, v, &self.values)?.map(|red| *out = red))
    }
}

impl<E: Element> Promises<E> for SsarRecursiveDouble<E> {
    /// Recursive doubling with MPICH's fold.
    fn expected_rounds(&self, p: usize, r: usize) -> Option<u64> {
        Some(fold_rounds_of(p, r))
    }
}

impl<E: Element> Registered<E> for SsarRecursiveDouble<E> {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const WARM: bool = true;
    const PLANNED: bool = true;
    const VALUES: bool = true;
    const PARAMS: &'static str =
        "values (a codec of the registry: raw, f16, bf16, ssmean or a user's; default raw)";
    const HELP: &'static str = "SparCML's recursive doubling of sparse streams (Zen's Hierarchical Centralization); lossless";
    fn build(params: &mut Params, _: Defaults, catalog: &dyn Catalog<E>) -> Result<Self> {
        Ok(Self::new(params.take_values(catalog)?))
    }
}

// The papers' formulas for SSAR_Recursive_double: SparCML's bounds
// (sec. 5.3.1), and Zen's Eq. 2 for its Hierarchical Centralization, which
// Zen's Table 3 classifies as this recursive doubling.

/// SparCML SSAR_Recursive_double (sec. 5.3.1): `lg P` rounds; between
/// `k lg P` items (indices fully overlap) and `(P - 1) k` items (disjoint),
/// i.e. `[2k lg P, 2k (P - 1)]` words.
pub fn ssar_recursive_double(p: usize, k: usize) -> cost::Bounds {
    let lg = cost::ceil_log2(p) as f64;
    cost::Bounds {
        lo: Cost::new(lg, 2.0 * k as f64 * lg),
        hi: Cost::new(lg, 2.0 * k as f64 * (p as f64 - 1.0)),
    }
}

/// Zen Eq. 2, Hierarchical Centralization: `sum_{i=1}^{lg n}
/// gamma_{2^(i-1)} 2 M d / b`, where `gamma(k)` is the densification ratio
/// of `k` GPUs (`gamma(1) = 1`).
pub fn zen_hierarchical_centralization(
    n: usize,
    m: usize,
    density: f64,
    gamma: impl Fn(usize) -> f64,
    b: f64,
) -> f64 {
    (1..=cost::ceil_log2(n))
        .map(|i| gamma(1 << (i - 1)) * 2.0 * m as f64 * density / b)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ThreadCluster;
    use sparse_core::testing::generate::GradientSpec;

    /// The in-place path sends the reference's messages and returns its
    /// bits, on every rank, at every fold.
    #[test]
    fn raw_into_matches_the_reference() {
        for p in 1..=9usize {
            for (dim, density, overlap) in [(1usize, 1.0, 1.0), (97, 0.05, 0.5), (1000, 0.1, 0.0)] {
                let ins = GradientSpec {
                    overlap,
                    ..GradientSpec::new(dim, density, p as u64)
                }
                .generate::<f32>(p)
                .unwrap();
                let out = ThreadCluster::new(p).run(|t| {
                    let v = &ins[t.rank()];
                    let start = t.traffic();
                    let want = reference(t, v)?;
                    let mid = t.traffic();
                    let mut got = Reduced::default();
                    raw_into(t, v, &mut got)?;
                    Ok((want, got, mid.since(&start), t.traffic().since(&mid)))
                });
                for res in out {
                    let (want, got, want_traffic, got_traffic) = res.unwrap();
                    assert_eq!(want.result.indices(), got.result.indices(), "P={p}");
                    let bits = |v: &SparseVec<f32>| -> Vec<u32> {
                        v.values().iter().map(|x| x.to_bits()).collect()
                    };
                    assert_eq!(bits(&want.result), bits(&got.result), "P={p}");
                    assert_eq!(want_traffic, got_traffic, "P={p}");
                }
            }
        }
    }

    #[test]
    fn sparcml_bounds_by_hand() {
        // P = 8, k = 100: rec. doubling [2*100*3, 2*100*7].
        let rd = ssar_recursive_double(8, 100);
        assert_eq!(
            (rd.lo, rd.hi),
            (Cost::new(3.0, 600.0), Cost::new(3.0, 1400.0))
        );
    }

    #[test]
    fn zen_eq2_by_hand() {
        // gamma(1) = 1, gamma(2) = 1.5, n = 4, M = 1000, d = 0.1: 200 * (1 + 1.5) = 500.
        let g = |k: usize| if k == 1 { 1.0 } else { 1.5 };
        let hc = zen_hierarchical_centralization(4, 1000, 0.1, g, 1.0);
        assert!(approx::relative_eq!(hc, 500.0, max_relative = 1e-9), "{hc}");
    }
}
