//! SparCML's SSAR_Split_allgather and DSAR_Split_allgather (sec. 5.3.2-3).

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::bytes::{from_le_u32s, le_bytes, le_u32s};
use crate::dense::{gather_bruck, gather_recursive_doubling};
use crate::entry::{Admission, Reduced, admit};
use crate::frame::{
    PairsView, StreamView, encode_stream, put_rebased, sparse_header, stream_view, sum_parts,
    take_parts,
};
use crate::profile::{Profile, bytes_cost};
use crate::{Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::encoding::{Qsgd, Reader, ValueCodec};
use sparse_core::qsgd::QsgdParams;
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Error, Result, SparseVec, Stream};
use std::borrow::Cow;

mod dsar;
use dsar::dense_phase_bytes;
pub use dsar::{DsarSplitAllgather, dsar_lower_bound, dsar_split_allgather};

/// How the reduced partitions travel in the allgather phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Phase {
    /// Sparse streams (SSAR: the result is expected to stay sparse; a
    /// partition that fills in still switches to dense past delta).
    Sparse,
    /// DSAR: dense partitions, optionally QSGD-quantized.
    Dense(Option<QsgdParams>),
}

/// The allgather of the reduced partitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Gather {
    /// Bruck: `ceil(lg P)` rounds for any `P` (SparCML's choice here).
    Bruck,
    /// Recursive doubling with MPICH's fold (TopkDSA as SparDL runs it).
    RecursiveDoubling,
}

/// `(P - 1)` direct steps, then a Bruck allgather.
fn split_rounds(p: usize) -> f64 {
    (p - 1) as f64 + cost::ceil_log2(p) as f64
}

/// SSAR_Split_allgather: the dimension is split evenly into `P`
/// partitions; in `P - 1` direct steps every rank sends each owner its
/// entries of that partition; owners sum their partition (contributions in
/// rank order) and a Bruck allgather (any `P`, `ceil(lg P)` rounds)
/// concatenates the partitions, each as a sparse stream (dense past delta).
/// Lossless; bitwise identical on every rank (each partition is summed once).
///
/// Memory per rank: `O((4 + E) (nnz + result))` bytes while the partitions
/// stay sparse; at most `n (2 E + 4)` for a dense result (`E` the element's
/// bytes).
///
/// Registry name `ssar_split_allgather`.
///
/// # Errors
/// [`Error::Disagreement`], transport errors, [`Error::Corrupt`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SsarSplitAllgather;

/// SSAR_Split_allgather's registry name, from which the entry id derives.
const SSAR_NAME: &str = "ssar_split_allgather";

/// Rank `r`'s bytes in the split phase (from every other rank a stream of
/// its entries in `r`'s partition) and the allgather of the partitions
/// (each a framed stream block; `dense`: every block dense).
pub(crate) fn split_bytes<E: Element>(ins: &[SparseVec<E>], r: usize, dense: bool) -> u64 {
    let p = ins.len();
    let others = || (0..p).filter(move |&q| q != r);
    let pieces: u64 = others()
        .map(|q| 8 + (4 + E::BYTES as u64) * partition(ins, q, r).count() as u64)
        .sum();
    pieces
        + others()
            .map(|q| 4 + block_bytes(ins, q, dense))
            .sum::<u64>()
}

/// Bytes of partition `q` of the sum as a stream (`dense`: always dense).
pub(crate) fn block_bytes<E: Element>(ins: &[SparseVec<E>], q: usize, dense: bool) -> u64 {
    let (p, dim) = (ins.len(), ins[0].dim());
    let mut union: Vec<u32> = (0..p).flat_map(|from| partition(ins, from, q)).collect();
    union.sort_unstable();
    union.dedup();
    let len = even_len(q, dim, p);
    // A stream's header: tag and padding, and for pairs their count.
    let bytes = if dense || union.len() > Stream::<E>::delta(len) {
        4 + E::BYTES * len
    } else {
        8 + (4 + E::BYTES) * union.len()
    };
    bytes as u64
}

/// The indices of rank `from`'s input in partition `q`.
fn partition<E: Element>(
    ins: &[SparseVec<E>],
    from: usize,
    q: usize,
) -> impl Iterator<Item = u32> + '_ {
    let (p, dim) = (ins.len(), ins[0].dim());
    let range = even_start(q, dim, p)..even_start(q, dim, p) + even_len(q, dim, p);
    ins[from]
        .indices()
        .iter()
        .copied()
        .filter(move |&i| range.contains(&(i as usize)))
}

impl<E: Element> SparseAllreduce<E> for SsarSplitAllgather {
    fn name(&self) -> String {
        SSAR_NAME.into()
    }
    fn lossless(&self) -> bool {
        true
    }
    /// The split phase, then every other partition of the sum as a stream,
    /// in `(P - 1) + ceil(lg P)` rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let bytes =
            prof.split_phase_bytes() + prof.others() * (4.0 + prof.partition_stream_bytes());
        bytes_cost(split_rounds(prof.p), bytes)
    }
    /// SparCML's bounds at the input's overlap.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(prof.within(ssar_split_allgather(prof.p, prof.k_avg())))
    }
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        Some(split_admit(t, v, Phase::Sparse, SSAR_NAME))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        split_allgather(t, v, Phase::Sparse, Gather::Bruck, out).map(Ok)
    }
}

impl<E: Element> Promises<E> for SsarSplitAllgather {
    /// `P - 1` direct steps, then a Bruck allgather.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(p as u64 - 1 + u64::from(cost::ceil_log2(p)))
    }
    /// The split phase's pieces, then the partitions' stream blocks.
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        Some(split_bytes(ins, r, false))
    }
}

impl<E: Element> Registered<E> for SsarSplitAllgather {
    const NAME: &'static str = SSAR_NAME;
    const LOSSLESS: bool = true;
    const WARM: bool = true;
    const PLANNED: bool = true;
    const PARAMS: &'static str = "";
    const HELP: &'static str =
        "SparCML's split phase, then a Bruck allgather of sparse streams; lossless";
    fn build(_: &mut Params, _: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        Ok(Self)
    }
}

/// The entry round of the split-allgather family: the dense phase holds
/// the whole result densely, so it is probed for before the call and a
/// refused allocation is an error on every rank; the ranks agree on the
/// quantization.
pub(crate) fn split_admit<T: Transport + ?Sized, E: Element>(
    t: &T,
    v: &SparseVec<E>,
    phase: Phase,
    name: &str,
) -> Admission {
    split_admit_probing(t, v, phase, name, true)
}

/// [`split_admit`], the dense phase's probe made only where `probe`.
fn split_admit_probing<T: Transport + ?Sized, E: Element>(
    t: &T,
    v: &SparseVec<E>,
    phase: Phase,
    name: &str,
    probe: bool,
) -> Admission {
    let qbits = match phase {
        Phase::Dense(Some(q)) => q.bits() as u64 | (q.bucket() as u64) << 8,
        _ => 0,
    };
    let local = match phase {
        Phase::Dense(_) if !probe => Ok(()),
        Phase::Dense(_) => sparse_core::alloc::probe(
            dense_phase_bytes::<E>(v.dim(), t.size()),
            "DSAR's dense result",
        ),
        Phase::Sparse => Ok(()),
    };
    admit(name, v, &[("quantization", qbits)], local)
}

/// The split-allgather family after [`split_admit`], into `out` (its
/// allocations reused, as the transport's buffer pool is): the split phase
/// writes each owner's entries straight from the input, received pairs are
/// read in place, and each owner sums its partition in rank order
/// ([`sparse_core::sparse::merge_sum_into`]). In the sparse phase a sum
/// past delta is formed again by [`Stream::sum`], which turns dense on the
/// way as SparCML's stream does, so that what travels is the stream's.
// About 85 lines: the steps are the functions below; what is left here is
// the buffers and vectors lent from one step to the next, which must stay
// in one scope for the sum and the messages to be read in place.
pub(crate) fn split_allgather<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    phase: Phase,
    gather: Gather,
    out: &mut Reduced<E>,
) -> Result<()> {
    let dim = v.dim();
    let (p, r) = (t.size(), t.rank());
    let (lo, len) = (even_start(r, dim, p), even_len(r, dim, p));
    let got = split_phase(t, v)?;
    // This rank's own pairs, re-indexed in a pooled buffer and read from it
    // as the received ones are.
    let (qlo, span) = partition_span(v, r, p);
    let mut own_buf = t.take_buffer();
    own_buf.clear();
    put_rebased(&mut own_buf, &v.indices()[span.clone()], qlo);
    let own_idx = from_le_u32s(&own_buf);
    let own = (&own_idx[..], &v.values()[span]);
    let parts = partition_parts(&got, own, r, len)?;
    // The sum, alternating between the result's and dropped's vectors.
    let (mut ai, mut av) = take_parts(&mut out.result);
    let (mut bi, mut bv) = take_parts(&mut out.dropped);
    sum_parts(&parts, len, (&mut ai, &mut av), (&mut bi, &mut bv));
    // The partition's block for the allgather: the sparse sum itself as a
    // stream, written from its vectors; or a block encoded here (and what
    // QSGD removed from the partition, dense, this rank's share of
    // `dropped`).
    let sparse_sum = phase == Phase::Sparse && ai.len() <= Stream::<E>::delta(len);
    let header = sparse_header(ai.len());
    let (block, rest) = if sparse_sum {
        (Vec::new(), None)
    } else {
        encode_block(phase, &parts, (&ai, &av), len, r)?
    };
    drop(parts);
    got.into_iter().for_each(|m| t.give_buffer(m));
    t.give_buffer(own_buf);
    let (hi, hv) = (le_u32s(&ai), le_bytes(&av));
    let own: Vec<&[u8]> = if sparse_sum {
        vec![&header, &hi, &hv]
    } else {
        vec![&block]
    };
    // The result: every partition in rank order, shifted to its place.
    let (mut result_i, mut result_v) = (bi, bv);
    result_i.clear();
    result_v.clear();
    let mut append = |q: usize, b: Option<&[u8]>| -> Result<()> {
        let view = match b {
            None if sparse_sum => {
                StreamView::Sparse((Cow::Borrowed(&ai[..]), Cow::Borrowed(&av[..])))
            }
            None => block_view(&block, len)?,
            Some(b) => block_view(b, even_len(q, dim, p))?,
        };
        append_partition(
            view,
            even_start(q, dim, p) as u32,
            &mut result_i,
            &mut result_v,
        );
        Ok(())
    };
    match gather {
        Gather::Bruck => {
            let g = gather_bruck(t, &own)?;
            (0..p).try_for_each(|q| append(q, g.block(q)))?;
            g.release(t);
        }
        Gather::RecursiveDoubling => {
            let g = gather_recursive_doubling(t, &own)?;
            (0..p).try_for_each(|q| append(q, g.block(q)))?;
            g.release(t);
        }
    }
    // This rank's share of what QSGD dropped, in the sum's old vectors.
    ai.clear();
    av.clear();
    let rest = rest.map(|d| StreamView::Dense(Cow::Owned(d)));
    rest.into_iter()
        .for_each(|d| append_partition(d, lo as u32, &mut ai, &mut av));
    out.result = SparseVec::new_unchecked(dim, result_i, result_v);
    out.dropped = SparseVec::new_unchecked(dim, ai, av);
    Ok(())
}

/// Partition `q`'s entries of `v` among `p`: the partition's start and
/// their positions in `v`.
fn partition_span<E: Element>(
    v: &SparseVec<E>,
    q: usize,
    p: usize,
) -> (u32, std::ops::Range<usize>) {
    let dim = v.dim();
    let (qlo, qlen) = (even_start(q, dim, p), even_len(q, dim, p));
    let a = v.indices().partition_point(|&i| (i as usize) < qlo);
    let b = v.indices().partition_point(|&i| (i as usize) < qlo + qlen);
    (qlo as u32, a..b)
}

/// The split phase: `P - 1` direct steps; at step `s` this rank sends
/// partition `r + s`, re-indexed, as a sparse stream to its owner and
/// receives its own partition from rank `r - s`. Returns the received
/// messages by step, in pooled buffers.
fn split_phase<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
) -> Result<Vec<Vec<u8>>> {
    let mut send = t.take_buffer();
    let got = split_phase_from(t, v, &mut send, None);
    t.give_buffer(send);
    got
}

/// [`split_phase`], its messages built in `send` and received into
/// buffers from `spare` (the last first; or the transport's pool).
fn split_phase_from<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    send: &mut Vec<u8>,
    mut spare: Option<&mut Vec<Vec<u8>>>,
) -> Result<Vec<Vec<u8>>> {
    let (p, r) = (t.size(), t.rank());
    let mut got: Vec<Vec<u8>> = Vec::with_capacity(p);
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let (qlo, span) = partition_span(v, to, p);
        send.clear();
        send.extend_from_slice(&sparse_header(span.len()));
        put_rebased(send, &v.indices()[span.clone()], qlo);
        send.extend_from_slice(&le_bytes(&v.values()[span]));
        let mut msg = match spare.as_deref_mut() {
            Some(s) => s.pop().unwrap_or_default(),
            None => t.take_buffer(),
        };
        t.exchange_into(to, send, from, &mut msg)?;
        got.push(msg);
    }
    Ok(got)
}

/// This rank's partition (`len` coordinates) from every rank, in rank
/// order, read in place: `own` (this rank's pairs, re-indexed) at `r`, and
/// from rank `q` the message that arrived at split step `(r - q) mod P`.
fn partition_parts<'a, E: Element>(
    got: &'a [Vec<u8>],
    own: (&'a [u32], &'a [E]),
    r: usize,
    len: usize,
) -> Result<Vec<PairsView<'a, E>>> {
    let p = got.len() + 1;
    (0..p)
        .map(|q| {
            if q == r {
                return Ok((Cow::Borrowed(own.0), Cow::Borrowed(own.1)));
            }
            match stream_view::<E>(&got[(r + p - q) % p - 1], len, "split message")? {
                StreamView::Sparse(pairs) => Ok(pairs),
                StreamView::Dense(_) => Err(Error::corrupt(
                    "split message",
                    "dense stream in the split phase",
                )),
            }
        })
        .collect()
}

/// The allgather block of this rank's partition (`len` coordinates) where
/// it is not the sparse sum itself: the stream of the sum formed again by
/// [`Stream::sum`] (past delta), the dense partition, or its QSGD encoding
/// (tag 2) with what quantization removed.
fn encode_block<E: Element>(
    phase: Phase,
    parts: &[PairsView<'_, E>],
    (ai, av): (&[u32], &[E]),
    len: usize,
    r: usize,
) -> Result<(Vec<u8>, Option<Vec<E>>)> {
    let dense = || {
        let mut d = vec![E::zero(); len];
        for (&i, &x) in ai.iter().zip(av.iter()) {
            d[i as usize] = x;
        }
        d
    };
    Ok(match phase {
        Phase::Sparse => {
            let mut acc = Stream::Sparse(SparseVec::zeros(len)?);
            for (i, x) in parts {
                let part = SparseVec::new_unchecked(len, i.to_vec(), x.to_vec());
                acc = acc.sum(&Stream::Sparse(part))?;
            }
            (encode_stream(&acc), None)
        }
        Phase::Dense(None) => (encode_stream(&Stream::Dense(dense())), None),
        Phase::Dense(Some(q)) => {
            let mut b = vec![2u8];
            // Levels are lowered where a remainder would round, so that
            // what is sent plus `dropped` is the partition sum bit for bit.
            let rest =
                Qsgd(q.with_seed(q.seed() ^ r as u64)).encode_with_remainder(&dense(), &mut b)?;
            (b, Some(rest))
        }
    })
}

/// Appends an allgathered partition starting at `qlo` to the result's
/// vectors (a dense one's non-zeros).
fn append_partition<E: Element>(
    view: StreamView<'_, E>,
    qlo: u32,
    result_i: &mut Vec<u32>,
    result_v: &mut Vec<E>,
) {
    match view {
        StreamView::Sparse((i, x)) => {
            result_i.extend(i.iter().map(|&i| i + qlo));
            result_v.extend_from_slice(&x);
        }
        StreamView::Dense(d) => push_nonzeros(&d, qlo, result_i, result_v),
    }
}

/// Appends the non-zeros of `d` (`x != 0`: negative zeros are left out),
/// shifted by `qlo`. A chunk whose bits are all zero is skipped whole, so
/// a mostly zero partition costs one pass of OR-ed words.
fn push_nonzeros<E: Element>(d: &[E], qlo: u32, result_i: &mut Vec<u32>, result_v: &mut Vec<E>) {
    // 256 to 1024 bytes a chunk, looked into by 16 to 64 bytes.
    const CHUNK: usize = 128;
    const PART: usize = 8;
    for (c, chunk) in d.chunks(CHUNK).enumerate() {
        if !any_bits(chunk) {
            continue;
        }
        for (s, part) in chunk.chunks(PART).enumerate() {
            if !any_bits(part) {
                continue;
            }
            let at = qlo + (c * CHUNK + s * PART) as u32;
            for (o, &x) in part.iter().enumerate() {
                if x != E::zero() {
                    result_i.push(at + o as u32);
                    result_v.push(x);
                }
            }
        }
    }
}

/// Whether any bit of `d` is set, OR-ed 8 bytes at a time.
#[inline]
fn any_bits<E: Element>(d: &[E]) -> bool {
    let bytes: &[u8] = bytemuck::cast_slice(d);
    let words = bytes.chunks_exact(8);
    let tail = words.remainder().iter().fold(0u8, |a, &b| a | b);
    let any = words.fold(0u64, |a, w| {
        a | u64::from_ne_bytes(w.try_into().expect("8 bytes"))
    });
    any != 0 || tail != 0
}

/// An allgathered partition of dimension `len`: a stream, or (tag 2) a
/// QSGD-encoded dense partition, read back dense.
fn block_view<E: Element>(b: &[u8], len: usize) -> Result<StreamView<'_, E>> {
    if b.first() != Some(&2) {
        return stream_view(b, len, "allgather block");
    }
    let mut rd = Reader::new(&b[1..], "qsgd partition");
    let vals: Vec<E> = Qsgd(QsgdParams::new(2, 1, 0)?).decode(&mut rd, len)?;
    rd.finish()?;
    Ok(StreamView::Dense(Cow::Owned(vals)))
}

// SparCML's formulas for the split-allgather family (sec. 5.3.2-5.3.3),
// and its lower bounds (Lemmas 5.1-5.2), which these algorithms meet: at
// full overlap SSAR_Split_allgather moves Lemma 5.1's `2 (P - 1) / P k`
// items, and DSAR's dense phase is Lemma 5.2's.

/// SparCML SSAR_Split_allgather (sec. 5.3.2): latency `L2 = (P - 1) + lg P`
/// rounds; between `2 (P - 1) / P k` and `P k` items, i.e.
/// `[4k (P - 1) / P, 2 P k]` words.
pub fn ssar_split_allgather(p: usize, k: usize) -> cost::Bounds {
    let r = p as f64 - 1.0 + cost::ceil_log2(p) as f64;
    cost::Bounds {
        lo: Cost::new(r, 4.0 * crate::profile::frac(p) * k as f64),
        hi: Cost::new(r, 2.0 * p as f64 * k as f64),
    }
}

/// SparCML Lemma 5.1: any sparse allreduce needs `lg P` rounds and
/// `(P - 1) k` items if the result has `kP` entries, `2 (P - 1) / P k` items
/// if it has `k`: returned as `[K = k, K = kP]` in words.
pub fn sparse_allreduce_lower_bound(p: usize, k: usize) -> cost::Bounds {
    let lg = cost::ceil_log2(p) as f64;
    cost::Bounds {
        lo: Cost::new(lg, 2.0 * 2.0 * crate::profile::frac(p) * k as f64),
        hi: Cost::new(lg, 2.0 * (p as f64 - 1.0) * k as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::dsar::{DsarFrame, dsar_allgather};
    use super::*;
    use crate::ThreadCluster;
    use rand::{RngCore, SeedableRng};

    /// Rank `r`'s input of call `c`: entries in every partition, with
    /// negative zeros, subnormals and values that cancel between ranks.
    fn input(dim: usize, r: usize, c: u64) -> SparseVec<f32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(c * 97 + r as u64);
        let idx: Vec<u32> = (0..dim as u32)
            .filter(|_| rng.next_u32() % 7 == 0)
            .collect();
        let val = idx
            .iter()
            .map(|&i| {
                let x = rng.next_u32();
                match (i + x) % 8 {
                    0 => -0.0,
                    1 => f32::from_bits(1 + x % 1000),
                    2 => (i % 5) as f32 * if r.is_multiple_of(2) { 1.0 } else { -1.0 },
                    _ => (x >> 8) as f32 / (1 << 20) as f32 - 8.0,
                }
            })
            .collect();
        SparseVec::new(dim, idx, val).expect("a valid input")
    }

    /// Issue 30: DSAR's path from a frame kept across calls gives what the
    /// split-allgather family's dense phase gives (results, dropped and
    /// traffic, bit for bit), call after call on changing inputs and
    /// dimensions, so that nothing a call wrote into the frame survives it.
    #[test]
    fn the_kept_frame_path_equals_the_dense_phase() {
        for p in 1..=5 {
            for q in [
                None,
                Some(QsgdParams::new(2, 7, 1).unwrap()),
                Some(QsgdParams::new(4, 64, 2).unwrap()),
                Some(QsgdParams::new(8, 512, 3).unwrap()),
            ] {
                let results = ThreadCluster::new(p).run(|t| {
                    let mut frame = DsarFrame::default();
                    for c in 0..5u64 {
                        let dim = [997, 997, 2048, 997, 5][c as usize];
                        let v = input(dim, t.rank(), c);
                        let mut fast = Reduced::default();
                        let start = t.traffic();
                        dsar_allgather(t, &v, q, &mut frame, &mut fast)??;
                        let mut slow = Reduced::default();
                        let mid = t.traffic();
                        let (phase, g) = (Phase::Dense(q), Gather::Bruck);
                        split_allgather(t, &v, phase, g, &mut slow)?;
                        let fast_traffic = mid.since(&start);
                        let slow_traffic = t.traffic().since(&mid);
                        let bits = |x: &SparseVec<f32>| {
                            let b: Vec<u32> = x.values().iter().map(|v| v.to_bits()).collect();
                            (x.dim(), x.indices().to_vec(), b)
                        };
                        assert_eq!(bits(&fast.result), bits(&slow.result), "P {p} call {c}");
                        assert_eq!(bits(&fast.dropped), bits(&slow.dropped), "P {p} call {c}");
                        assert_eq!(fast_traffic, slow_traffic, "P {p} call {c}");
                    }
                    Ok(())
                });
                results
                    .into_iter()
                    .for_each(|r| r.expect("the calls succeed"));
            }
        }
    }

    #[test]
    fn sparcml_by_hand() {
        // split allgather, P = 8, k = 100: 7 + 3 rounds; [4*100*7/8, 2*8*100].
        let sa = ssar_split_allgather(8, 100);
        assert_eq!(
            (sa.lo, sa.hi),
            (Cost::new(10.0, 350.0), Cost::new(10.0, 1600.0))
        );
        // DSAR, n = 8000: dense allgather 7000 words; + 200 worst case split.
        let ds = dsar_split_allgather(8, 8000, 100, None);
        assert_eq!((ds.lo.words, ds.hi.words), (7000.0, 7200.0));
        // 4-bit QSGD, buckets of 1000: 7000 * 4/32 + 7 = 882.
        assert_eq!(
            dsar_split_allgather(8, 8000, 100, Some((4, 1000))).lo.words,
            882.0
        );
        let lb = sparse_allreduce_lower_bound(4, 100);
        assert_eq!((lb.lo.words, lb.hi.words), (300.0, 600.0));
        assert_eq!(dsar_lower_bound(16, 500), Cost::new(4.0, 500.0));
        // At full overlap SSAR_Split_allgather moves Lemma 5.1's words.
        for p in [2, 3, 8, 17] {
            let (sa, lb) = (
                ssar_split_allgather(p, 60),
                sparse_allreduce_lower_bound(p, 60),
            );
            assert!(approx::relative_eq!(
                sa.lo.words,
                lb.lo.words,
                max_relative = 1e-12
            ));
        }
    }
}
