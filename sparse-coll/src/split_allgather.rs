//! SparCML's SSAR_Split_allgather and DSAR_Split_allgather (sec. 5.3.2-3).

use crate::Transport;
use crate::algorithm::{Defaults, Params, Registered, SparseAllreduce};
use crate::dense::{gather_bruck, gather_recursive_doubling};
use crate::plan::{Profile, bytes_cost};
use crate::sparse::{
    PairsView, Reduced, StreamView, encode_stream, enter, from_le_u32s, into_new, le_bytes,
    le_u32s, put_rebased, sparse_header, stream_view, sum_parts, take_parts,
};
use sparse_core::cost::{self, Cost};
use sparse_core::encoding::{Qsgd, Reader, ValueCodec};
use sparse_core::qsgd::QsgdParams;
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Error, Result, SparseVec, Stream};
use std::borrow::Cow;

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

/// The bytes DSAR holds at its peak for a result of dimension `dim`: the
/// received dense partitions (`dim` values) and the result built from them
/// (an index and a value per coordinate), plus this rank's own partition
/// twice (the sum and its encoding).
fn dense_phase_bytes<E: Element>(dim: usize, p: usize) -> u64 {
    // Saturating: a dimension past what any machine holds is a refused
    // probe (the input check names it), not an overflow.
    let (dim, e) = (dim as u64, E::BYTES as u64);
    dim.saturating_mul(2 * e + 4)
        .saturating_add(dim.div_ceil(p.max(1) as u64).saturating_mul(2 * e))
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
/// # Errors
/// [`Error::Disagreement`], transport errors, [`Error::Corrupt`].
pub fn ssar_split_allgather<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
) -> Result<Reduced<E>> {
    into_new(|out| ssar_split_allgather_into(t, v, out))
}

/// [`ssar_split_allgather`] into `out`, reusing its allocations.
fn ssar_split_allgather_into<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    crate::transport::guard(t, |t| {
        split_allgather(t, v, Phase::Sparse, Gather::Bruck, SSAR_NAME, out)
    })
}

/// DSAR_Split_allgather: the split phase of [`ssar_split_allgather`], then
/// the partitions travel dense (`n / P` values each), as SparCML does when
/// the result is expected past delta. With `qsgd`, the dense phase is
/// QSGD-quantized (SparCML sec. 6): lossy, and each owner returns in
/// `dropped` exactly what quantization removed from its partition, so that
/// the inputs sum to `result` plus all `dropped`.
///
/// Memory per rank: the dense result, `n (2 E + 4) + 2 E ceil(n / P)` bytes
/// (`E` the element's bytes), probed before the call: where the allocator
/// refuses it every rank returns [`Error::OutOfMemory`] (its own) or
/// [`Error::PeerError`], instead of the process aborting.
///
/// # Errors
/// [`Error::Disagreement`], transport errors, [`Error::Corrupt`].
pub fn dsar_split_allgather<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    qsgd: Option<QsgdParams>,
) -> Result<Reduced<E>> {
    crate::transport::guard(t, |t| {
        into_new(|out| split_allgather(t, v, Phase::Dense(qsgd), Gather::Bruck, DSAR_NAME, out))
    })
}

/// [`topk_dsa`](crate::topk_dsa): the split phase, then a
/// recursive-doubling allgather of the partitions as sparse streams.
pub(crate) fn topk_dsa_into<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    crate::transport::guard(t, |t| {
        split_allgather(
            t,
            v,
            Phase::Sparse,
            Gather::RecursiveDoubling,
            crate::topk_dsa::NAME,
            out,
        )
    })
}

/// [`ssar_split_allgather`] as a [`SparseAllreduce`] (registry name
/// `ssar_split_allgather`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SsarSplitAllgather;

/// SSAR_Split_allgather's registry name, from which the entry id derives.
const SSAR_NAME: &str = "ssar_split_allgather";
/// DSAR_Split_allgather's (with QSGD too: the quantization is a parameter
/// the ranks agree on).
const DSAR_NAME: &str = "dsar_split_allgather";

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
        Some(prof.within(cost::ssar_split_allgather(prof.p, prof.k_avg())))
    }
    /// `P - 1` direct steps, then a Bruck allgather.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(p as u64 - 1 + u64::from(cost::ceil_log2(p)))
    }
    /// The split phase's pieces, then the partitions' stream blocks.
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        Some(split_bytes(ins, r, false))
    }
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        ssar_split_allgather(t, v)
    }
    fn allreduce_into(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        ssar_split_allgather_into(t, v, out)
    }
}

impl<E: Element> Registered<E> for SsarSplitAllgather {
    const NAME: &'static str = SSAR_NAME;
    const PLANNED: bool = true;
    const PARAMS: &'static str = "";
    const HELP: &'static str =
        "SparCML's split phase, then a Bruck allgather of sparse streams; lossless";
    fn build(_: &mut Params, _: Defaults) -> Result<Self> {
        Ok(Self)
    }
}

/// [`dsar_split_allgather`] as a [`SparseAllreduce`] (registry names
/// `dsar_split_allgather` and, with QSGD, `dsar_qsgd`), with its call
/// counter: the QSGD seed of a call mixes the configured seed, the call
/// number and the rank, so that no two calls (or ranks) repeat the same
/// random draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DsarSplitAllgather {
    qsgd: Option<QsgdParams>,
    calls: u64,
}

impl DsarSplitAllgather {
    /// DSAR, its dense phase QSGD-quantized with `qsgd`.
    pub fn new(qsgd: Option<QsgdParams>) -> Self {
        Self { qsgd, calls: 0 }
    }
    /// The QSGD parameters.
    pub fn qsgd(&self) -> Option<QsgdParams> {
        self.qsgd
    }
    /// QSGD from a name's `bits`, `bucket` and `seed` (defaults 4, 512, a
    /// fixed seed).
    fn qsgd_from(params: &mut Params, bits: Option<u32>) -> Result<Option<QsgdParams>> {
        let bits = match bits.or(params.take("bits")?) {
            None => return Ok(None),
            Some(b) => b,
        };
        let bucket = params.take("bucket")?.unwrap_or(512);
        let seed = params.take("seed")?.unwrap_or(0x95d);
        Ok(Some(QsgdParams::new(bits, bucket, seed)?))
    }
}

impl<E: Element> SparseAllreduce<E> for DsarSplitAllgather {
    fn name(&self) -> String {
        if self.qsgd.is_some() {
            DSAR_QSGD_NAME.into()
        } else {
            DSAR_NAME.into()
        }
    }
    fn params(&self) -> String {
        self.qsgd.map_or(String::new(), |q| {
            format!("bits={},bucket={},seed={}", q.bits(), q.bucket(), q.seed())
        })
    }
    fn lossless(&self) -> bool {
        self.qsgd.is_none()
    }
    /// The split phase, then every other partition dense (or its QSGD
    /// section), in `(P - 1) + ceil(lg P)` rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let len = (prof.n as f64 / prof.p as f64).ceil();
        let vb = prof.value_bytes as f64;
        let block = match self.qsgd {
            None => 4.0 + vb * len,
            Some(q) => {
                let scales = (len / q.bucket() as f64).ceil();
                let words = (len * q.bits() as f64 / 32.0).ceil();
                6.0 + vb * scales + 4.0 * words
            }
        };
        // Each block behind its 4-byte frame length.
        let bytes = prof.split_phase_bytes() + prof.others() * (4.0 + block);
        bytes_cost(split_rounds(prof.p), bytes)
    }
    /// SparCML's bounds at the input's overlap.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(prof.within(cost::dsar_split_allgather(
            prof.p,
            prof.n,
            prof.k_avg(),
            self.qsgd.map(|q| (q.bits(), q.bucket())),
        )))
    }
    /// `P - 1` direct steps, then a Bruck allgather.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(p as u64 - 1 + u64::from(cost::ceil_log2(p)))
    }
    /// Without QSGD: the split phase's pieces, then the dense partitions.
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        self.qsgd.is_none().then(|| split_bytes(ins, r, true))
    }
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        into_new(|out| self.allreduce_into(t, v, out))
    }
    fn allreduce_into(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        crate::transport::guard(t, |t| {
            let q = self.qsgd.map(|q| {
                let mut mix = sparse_core::SplitMix64(q.seed() ^ self.calls.rotate_left(32));
                q.with_seed(mix.next_u64())
            });
            self.calls += 1;
            split_allgather(t, v, Phase::Dense(q), Gather::Bruck, DSAR_NAME, out)
        })
    }
}

impl<E: Element> Registered<E> for DsarSplitAllgather {
    const NAME: &'static str = DSAR_NAME;
    const PLANNED: bool = true;
    const PARAMS: &'static str = "qsgd (bits: 2, 4 or 8; none by default), bucket (512), seed";
    const HELP: &'static str =
        "SparCML's split phase, then dense partitions allgathered; lossless without qsgd";
    fn build(params: &mut Params, _: Defaults) -> Result<Self> {
        let bits = params.take("qsgd")?;
        Ok(Self::new(Self::qsgd_from(params, bits)?))
    }
}

/// The registry name of DSAR with QSGD.
const DSAR_QSGD_NAME: &str = "dsar_qsgd";

impl DsarSplitAllgather {
    /// Registers `dsar_qsgd`: DSAR with QSGD in the dense phase (`bits` 4
    /// by default), a second name of the same algorithm.
    pub(crate) fn register_qsgd<E: Element>(r: &mut crate::Registry<E>) {
        r.register(
            DSAR_QSGD_NAME,
            "bits (2, 4 or 8; default 4), bucket (512), seed",
            "DSAR with QSGD-quantized dense partitions; lossy, the quantization error in dropped",
            |params, _| {
                let bits = params.take("bits")?.unwrap_or(4);
                Ok(Box::new(DsarSplitAllgather::new(
                    DsarSplitAllgather::qsgd_from(params, Some(bits))?,
                )))
            },
        )
        .expect("a free name");
    }
}

/// The split-allgather family, into `out` (its allocations reused, as
/// the transport's buffer pool is): the split phase writes each owner's
/// entries straight from the input, received pairs are read in place, and
/// each owner sums its partition in rank order
/// ([`sparse_core::sparse::merge_sum_into`]). In the sparse phase a sum
/// past delta is formed again by [`Stream::sum`], which turns dense on the
/// way as SparCML's stream does, so that what travels is the stream's.
fn split_allgather<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    phase: Phase,
    gather: Gather,
    name: &str,
    out: &mut Reduced<E>,
) -> Result<()> {
    let dim = v.dim();
    let qbits = match phase {
        Phase::Dense(Some(q)) => q.bits() as u64 | (q.bucket() as u64) << 8,
        _ => 0,
    };
    // The dense phase holds the whole result densely: probe for it before
    // the call, so that a refused allocation is an error on every rank.
    let local = match phase {
        Phase::Dense(_) => {
            sparse_core::alloc::probe(dense_phase_bytes::<E>(dim, t.size()), "DSAR's dense result")
        }
        Phase::Sparse => Ok(()),
    };
    let start = enter(t, name, v, &[("quantization", qbits)], local)?;
    let (p, r) = (t.size(), t.rank());
    let (lo, len) = (even_start(r, dim, p), even_len(r, dim, p));
    // Partition q's entries of the input: its start and their positions.
    let range_of = |q: usize| {
        let (qlo, qlen) = (even_start(q, dim, p), even_len(q, dim, p));
        let a = v.indices().partition_point(|&i| (i as usize) < qlo);
        let b = v.indices().partition_point(|&i| (i as usize) < qlo + qlen);
        (qlo as u32, a..b)
    };
    // Split phase: P - 1 direct steps; at step s send partition (r + s),
    // re-indexed, as a sparse stream to its owner and receive this rank's
    // partition from rank r - s.
    let mut send = t.take_buffer();
    let mut got: Vec<Vec<u8>> = Vec::with_capacity(p);
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let (qlo, span) = range_of(to);
        send.clear();
        send.extend_from_slice(&sparse_header(span.len()));
        put_rebased(&mut send, &v.indices()[span.clone()], qlo);
        send.extend_from_slice(&le_bytes(&v.values()[span]));
        let mut msg = t.take_buffer();
        t.exchange_into(to, &send, from, &mut msg)?;
        got.push(msg);
    }
    t.give_buffer(send);
    // This rank's partition from every rank, in rank order; the message
    // from rank q arrived at step (r - q) mod P.
    let (qlo, span) = range_of(r);
    // This rank's own pairs, re-indexed in a pooled buffer and read from it
    // as the received ones are.
    let mut own_buf = t.take_buffer();
    own_buf.clear();
    put_rebased(&mut own_buf, &v.indices()[span.clone()], qlo);
    let own_idx = from_le_u32s(&own_buf);
    let mut parts: Vec<PairsView<'_, E>> = Vec::with_capacity(p);
    for q in 0..p {
        if q == r {
            parts.push((
                Cow::Borrowed(&own_idx[..]),
                Cow::Borrowed(&v.values()[span.clone()]),
            ));
            continue;
        }
        match stream_view::<E>(&got[(r + p - q) % p - 1], len, "split message")? {
            StreamView::Sparse(pairs) => parts.push(pairs),
            StreamView::Dense(_) => {
                return Err(Error::corrupt(
                    "split message",
                    "dense stream in the split phase",
                ));
            }
        }
    }
    // The sum, alternating between the result's and dropped's vectors.
    let (mut ai, mut av) = take_parts(&mut out.result);
    let (mut bi, mut bv) = take_parts(&mut out.dropped);
    sum_parts(&parts, (&mut ai, &mut av), (&mut bi, &mut bv));
    // The partition's block for the allgather: the sparse sum itself as a
    // stream, written from its vectors; or a block encoded here.
    let sparse_sum = phase == Phase::Sparse && ai.len() <= Stream::<E>::delta(len);
    let header = sparse_header(ai.len());
    // What QSGD removes from the partition (dense, this rank's share of
    // `dropped`).
    let mut rest: Option<Vec<E>> = None;
    let block = if sparse_sum {
        Vec::new()
    } else {
        let dense = || {
            let mut d = vec![E::zero(); len];
            for (&i, &x) in ai.iter().zip(av.iter()) {
                d[i as usize] = x;
            }
            d
        };
        match phase {
            Phase::Sparse => {
                let mut acc = Stream::Sparse(SparseVec::zeros(len)?);
                for (i, x) in &parts {
                    let part = SparseVec::new_unchecked(len, i.to_vec(), x.to_vec());
                    acc = acc.sum(&Stream::Sparse(part))?;
                }
                encode_stream(&acc)
            }
            Phase::Dense(None) => encode_stream(&Stream::Dense(dense())),
            Phase::Dense(Some(q)) => {
                let mut b = vec![2u8];
                // Levels are lowered where a remainder would round, so that
                // what is sent plus `dropped` is the partition sum bit for
                // bit.
                rest = Some(
                    Qsgd(q.with_seed(q.seed() ^ r as u64))
                        .encode_with_remainder(&dense(), &mut b)?,
                );
                b
            }
        }
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
        let qlo = even_start(q, dim, p) as u32;
        let view = match b {
            None if sparse_sum => {
                StreamView::Sparse((Cow::Borrowed(&ai[..]), Cow::Borrowed(&av[..])))
            }
            None => block_view(&block, len)?,
            Some(b) => block_view(b, even_len(q, dim, p))?,
        };
        match view {
            StreamView::Sparse((i, x)) => {
                result_i.extend(i.iter().map(|&i| i + qlo));
                result_v.extend_from_slice(&x);
            }
            StreamView::Dense(d) => {
                for (i, &x) in d.iter().enumerate() {
                    if x != E::zero() {
                        result_i.push(qlo + i as u32);
                        result_v.push(x);
                    }
                }
            }
        }
        Ok(())
    };
    match gather {
        Gather::Bruck => {
            let g = gather_bruck(t, &own)?;
            for q in 0..p {
                append(q, g.block(q))?;
            }
            g.release(t);
        }
        Gather::RecursiveDoubling => {
            let g = gather_recursive_doubling(t, &own)?;
            for q in 0..p {
                append(q, g.block(q))?;
            }
            g.release(t);
        }
    }
    // This rank's share of what QSGD dropped, in the sum's old vectors.
    ai.clear();
    av.clear();
    for (i, &x) in rest.iter().flatten().enumerate() {
        if x != E::zero() {
            ai.push((lo + i) as u32);
            av.push(x);
        }
    }
    out.result = SparseVec::new_unchecked(dim, result_i, result_v);
    out.dropped = SparseVec::new_unchecked(dim, ai, av);
    out.traffic = t.traffic().since(&start);
    Ok(())
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
