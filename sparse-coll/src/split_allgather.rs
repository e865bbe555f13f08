//! SparCML's SSAR_Split_allgather and DSAR_Split_allgather (sec. 5.3.2-3).

use crate::Transport;
use crate::algorithm::{Defaults, Params, Registered, SparseAllreduce};
use crate::dense::{bruck_allgather, recursive_doubling_allgather};
use crate::plan::{Profile, bytes_cost};
use crate::sparse::{
    Id, PairsView, Reduced, decode_stream, encode_stream, enter, gather_bruck, le_bytes, le_u32s,
    pairs_view, take_parts,
};
use sparse_core::cost::{self, Cost};
use sparse_core::encoding::{Qsgd, Reader, ValueCodec};
use sparse_core::qsgd::QsgdParams;
use sparse_core::sparse::merge_sum_into;
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Error, Result, SparseVec, Stream};
use std::borrow::Cow;

/// The entries of `v` in `lo..lo + len`, re-indexed from 0.
fn slice<E: Element>(v: &SparseVec<E>, lo: usize, len: usize) -> SparseVec<E> {
    let (_, idx, val) = v.restrict(lo, len).into_parts();
    SparseVec::new_unchecked(len, idx.iter().map(|&i| i - lo as u32).collect(), val)
}

/// Sparse entries re-indexed by `+ lo` into dimension `dim`.
fn shift<E: Element>(v: &SparseVec<E>, lo: usize, dim: usize) -> SparseVec<E> {
    SparseVec::new_unchecked(
        dim,
        v.indices().iter().map(|&i| i + lo as u32).collect(),
        v.values().to_vec(),
    )
}

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

pub(crate) fn split_allgather<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    phase: Phase,
    gather: Gather,
    id: Id,
) -> Result<Reduced<E>> {
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
    let start = enter(t, id, v, &[("quantization", qbits)], local)?;
    let (p, r) = (t.size(), t.rank());
    let (lo, len) = (even_start(r, dim, p), even_len(r, dim, p));
    // Split phase: P - 1 direct steps; at step s send partition (r + s) to
    // its owner and receive this rank's partition from rank r - s.
    let mut parts: Vec<Option<SparseVec<E>>> = vec![None; p];
    parts[r] = Some(slice(v, lo, len));
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let mine = Stream::Sparse(slice(v, even_start(to, dim, p), even_len(to, dim, p)));
        let got = t.exchange(to, &encode_stream(&mine), from)?;
        parts[from] = Some(match decode_stream::<E>(&got, len)? {
            Stream::Sparse(s) => s,
            Stream::Dense(_) => {
                return Err(Error::corrupt(
                    "split message",
                    "dense stream in the split phase",
                ));
            }
        });
    }
    // Reduce this rank's partition, contributions in rank order.
    let mut acc = Stream::Sparse(SparseVec::zeros(len)?);
    for part in parts.into_iter().flatten() {
        acc = acc.sum(&Stream::Sparse(part))?;
    }
    // Encode the partition for the allgather; keep what quantization loses.
    let mut dropped = SparseVec::zeros(dim)?;
    let block = match phase {
        Phase::Sparse => encode_stream(&acc),
        Phase::Dense(None) => encode_stream(&Stream::Dense(acc.to_dense())),
        Phase::Dense(Some(q)) => {
            let exact = acc.to_dense();
            let mut out = vec![2u8];
            // Levels are lowered where a remainder would round, so that
            // what is sent plus `dropped` is the partition sum bit for bit.
            let rest =
                Qsgd(q.with_seed(q.seed() ^ r as u64)).encode_with_remainder(&exact, &mut out)?;
            dropped = shift(&SparseVec::from_dense(&rest)?, lo, dim);
            out
        }
    };
    let blocks = match gather {
        Gather::Bruck => bruck_allgather(t, &block)?,
        Gather::RecursiveDoubling => recursive_doubling_allgather(t, &block)?,
    };
    let mut result_idx = Vec::new();
    let mut result_val = Vec::new();
    for (q, b) in blocks.iter().enumerate() {
        let (qlo, qlen) = (even_start(q, dim, p), even_len(q, dim, p));
        let part: SparseVec<E> = if b.first() == Some(&2) {
            let mut rd = Reader::new(&b[1..], "qsgd partition");
            let vals: Vec<E> = Qsgd(QsgdParams::new(2, 1, 0)?).decode(&mut rd, qlen)?;
            rd.finish()?;
            SparseVec::from_dense(&vals)?
        } else {
            match decode_stream::<E>(b, qlen)? {
                Stream::Sparse(s) => s,
                Stream::Dense(d) => SparseVec::from_dense(&d)?,
            }
        };
        result_idx.extend(part.indices().iter().map(|&i| i + qlo as u32));
        result_val.extend_from_slice(part.values());
    }
    let result = SparseVec::new(dim, result_idx, result_val)
        .map_err(|e| Error::corrupt("allgather block", e))?;
    Ok(Reduced {
        result,
        dropped,
        traffic: t.traffic().since(&start),
    })
}

/// The bytes DSAR holds at its peak for a result of dimension `dim`: the
/// received dense partitions (`dim` values) and the result built from them
/// (an index and a value per coordinate), plus this rank's own partition
/// twice (the sum and its encoding).
fn dense_phase_bytes<E: Element>(dim: usize, p: usize) -> u64 {
    let (dim, e) = (dim as u64, E::BYTES as u64);
    dim * (2 * e + 4) + 2 * dim.div_ceil(p.max(1) as u64) * e
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
    split_allgather(t, v, Phase::Sparse, Gather::Bruck, Id::SsarSplitAllgather)
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
    split_allgather(
        t,
        v,
        Phase::Dense(qsgd),
        Gather::Bruck,
        Id::DsarSplitAllgather,
    )
}

/// [`ssar_split_allgather`] as a [`SparseAllreduce`] (registry name
/// `ssar_split_allgather`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SsarSplitAllgather;

impl<E: Element> SparseAllreduce<E> for SsarSplitAllgather {
    fn name(&self) -> String {
        "ssar_split_allgather".into()
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
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        ssar_split_allgather(t, v)
    }
    fn allreduce_into(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        split_allgather_into(t, v, false, Gather::Bruck, Id::SsarSplitAllgather, out)
    }
}

impl<E: Element> Registered<E> for SsarSplitAllgather {
    const NAME: &'static str = "ssar_split_allgather";
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
            "dsar_qsgd".into()
        } else {
            "dsar_split_allgather".into()
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
            None => 1.0 + vb * len,
            Some(q) => {
                let scales = (len / q.bucket() as f64).ceil();
                let words = (len * q.bits() as f64 / 32.0).ceil();
                6.0 + vb * scales + 4.0 * words
            }
        };
        let bytes = prof.split_phase_bytes() + prof.others() * (5.0 + block);
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
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        let q = self.qsgd.map(|q| {
            let mut mix = sparse_core::SplitMix64(q.seed() ^ self.calls.rotate_left(32));
            q.with_seed(mix.next_u64())
        });
        self.calls += 1;
        dsar_split_allgather(t, v, q)
    }
    fn allreduce_into(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        if self.qsgd.is_some() {
            *out = self.allreduce(t, v)?;
            return Ok(());
        }
        self.calls += 1;
        split_allgather_into(t, v, true, Gather::Bruck, Id::DsarSplitAllgather, out)
    }
}

impl<E: Element> Registered<E> for DsarSplitAllgather {
    const NAME: &'static str = "dsar_split_allgather";
    const PARAMS: &'static str = "qsgd (bits: 2, 4 or 8; none by default), bucket (512), seed";
    const HELP: &'static str =
        "SparCML's split phase, then dense partitions allgathered; lossless without qsgd";
    fn build(params: &mut Params, _: Defaults) -> Result<Self> {
        let bits = params.take("qsgd")?;
        Ok(Self::new(Self::qsgd_from(params, bits)?))
    }
}

/// The registry entry `dsar_qsgd`: DSAR with QSGD in the dense phase
/// (`bits` 4 by default).
pub(crate) fn dsar_qsgd<E: Element>(params: &mut Params) -> Result<Box<dyn SparseAllreduce<E>>> {
    let bits = params.take("bits")?.unwrap_or(4);
    Ok(Box::new(DsarSplitAllgather::new(
        DsarSplitAllgather::qsgd_from(params, Some(bits))?,
    )))
}

/// A received partition: sparse pairs (indices relative to the
/// partition) or dense values.
enum PartView<'b, E: Element> {
    Sparse(Cow<'b, [u32]>, Cow<'b, [E]>),
    Dense(Cow<'b, [E]>),
}

/// Reads a stream block ([`encode_stream`]'s layout) of dimension `len`
/// in place.
fn stream_view<'b, E: Element>(
    b: &'b [u8],
    len: usize,
    what: &'static str,
) -> Result<PartView<'b, E>> {
    let corrupt = |d: &str| Error::corrupt(what, d);
    match b.first() {
        Some(0) => {
            let nnz = b
                .get(1..5)
                .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
                .ok_or_else(|| corrupt("truncated"))?;
            let (i, x) = pairs_view(&b[5..], nnz, len, what)?;
            Ok(PartView::Sparse(i, x))
        }
        Some(1) => {
            if b.len() != 1 + len * E::BYTES {
                return Err(corrupt("dense length"));
            }
            let body = &b[1..];
            Ok(PartView::Dense(
                match bytemuck::try_cast_slice::<u8, E>(body) {
                    Ok(s) if cfg!(target_endian = "little") => Cow::Borrowed(s),
                    _ => Cow::Owned(body.chunks_exact(E::BYTES).map(E::read_le).collect()),
                },
            ))
        }
        _ => Err(corrupt("bad tag")),
    }
}

/// The split-allgather family without QSGD into `out`, reusing its
/// allocations and the transport's buffer pool: the same messages, the
/// same traffic and the same bits as [`split_allgather`], with the
/// partition messages written from the input and read in place. Where the
/// partition sum would turn dense past delta in the sparse phase, the sum
/// is formed again by [`Stream::sum`], so the wire and the result stay
/// exactly [`split_allgather`]'s.
pub(crate) fn split_allgather_into<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    dense_phase: bool,
    gather: Gather,
    id: Id,
    out: &mut Reduced<E>,
) -> Result<()> {
    let dim = v.dim();
    let local = if dense_phase {
        sparse_core::alloc::probe(dense_phase_bytes::<E>(dim, t.size()), "DSAR's dense result")
    } else {
        Ok(())
    };
    let start = enter(t, id, v, &[("quantization", 0)], local)?;
    let (p, r) = (t.size(), t.rank());
    let len = even_len(r, dim, p);
    let range_of = |q: usize| {
        let (qlo, qlen) = (even_start(q, dim, p), even_len(q, dim, p));
        let a = v.indices().partition_point(|&i| (i as usize) < qlo);
        let b = v.indices().partition_point(|&i| (i as usize) < qlo + qlen);
        (qlo as u32, a..b)
    };
    // Split phase: the entries of partition `to`, re-indexed, as a sparse
    // stream written straight from the input.
    let mut send = t.take_buffer();
    let mut got: Vec<Vec<u8>> = Vec::with_capacity(p);
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let (qlo, span) = range_of(to);
        send.clear();
        send.push(0);
        send.extend_from_slice(&(span.len() as u32).to_le_bytes());
        for &i in &v.indices()[span.clone()] {
            send.extend_from_slice(&(i - qlo).to_le_bytes());
        }
        send.extend_from_slice(&le_bytes(&v.values()[span]));
        let mut msg = t.take_buffer();
        t.exchange_into(to, &send, from, &mut msg)?;
        got.push(msg);
    }
    // This rank's partition from every rank, in rank order.
    let (qlo, span) = range_of(r);
    let own_idx: Vec<u32> = v.indices()[span.clone()].iter().map(|&i| i - qlo).collect();
    let mut parts: Vec<PairsView<'_, E>> = Vec::with_capacity(p);
    for q in 0..p {
        if q == r {
            parts.push((
                Cow::Borrowed(&own_idx),
                Cow::Borrowed(&v.values()[span.clone()]),
            ));
            continue;
        }
        // The message from rank q arrived at step (r - q) mod P.
        match stream_view::<E>(&got[(r + p - q) % p - 1], len, "split message")? {
            PartView::Sparse(i, x) => parts.push((i, x)),
            PartView::Dense(_) => {
                return Err(Error::corrupt(
                    "split message",
                    "dense stream in the split phase",
                ));
            }
        }
    }
    let (mut ai, mut av) = take_parts(&mut out.result);
    let (mut bi, mut bv) = take_parts(&mut out.dropped);
    for (i, x) in &parts {
        merge_sum_into((&ai, &av), (i, x), &mut bi, &mut bv);
        std::mem::swap(&mut ai, &mut bi);
        std::mem::swap(&mut av, &mut bv);
    }
    // The partition's block for the allgather.
    let sparse_sum = !dense_phase && ai.len() <= Stream::<E>::delta(len);
    let mut block = t.take_buffer();
    block.clear();
    let header;
    let (hi, hv) = (le_u32s(&ai), le_bytes(&av));
    let own: [&[u8]; 3] = if sparse_sum {
        let mut h = [0u8; 5];
        h[1..].copy_from_slice(&(ai.len() as u32).to_le_bytes());
        header = h;
        [&header[..], &hi[..], &hv[..]]
    } else {
        let sum = if dense_phase {
            let mut d = vec![E::zero(); len];
            for (&i, &x) in ai.iter().zip(av.iter()) {
                d[i as usize] = x;
            }
            Stream::Dense(d)
        } else {
            // Past delta: the stream's own sum, which turns dense on the
            // way exactly as split_allgather's does.
            let mut acc = Stream::Sparse(SparseVec::zeros(len)?);
            for (i, x) in &parts {
                let part = SparseVec::new_unchecked(len, i.to_vec(), x.to_vec());
                acc = acc.sum(&Stream::Sparse(part))?;
            }
            acc
        };
        block = encode_stream(&sum);
        header = [0; 5];
        [&block[..], &header[..0], &header[..0]]
    };
    let own_len: usize = own.iter().map(|b| b.len()).sum();
    let mut result_i = bi;
    let mut result_v = bv;
    result_i.clear();
    result_v.clear();
    let mut append = |view: PartView<'_, E>, qlo: usize| match view {
        PartView::Sparse(i, x) => {
            result_i.extend(i.iter().map(|&i| i + qlo as u32));
            result_v.extend_from_slice(&x);
        }
        PartView::Dense(d) => {
            for (i, &x) in d.iter().enumerate() {
                if x != E::zero() {
                    result_i.push((qlo + i) as u32);
                    result_v.push(x);
                }
            }
        }
    };
    let qstart = |q: usize| even_start(q, dim, p);
    match gather {
        Gather::Bruck => {
            let g = gather_bruck(t, &own)?;
            for q in 0..p {
                let view = if q == r {
                    own_view(&own, sparse_sum, &ai, &av, len)?
                } else {
                    stream_view::<E>(g.block(q), even_len(q, dim, p), "allgather block")?
                };
                append(view, qstart(q));
            }
            g.release(t);
        }
        Gather::RecursiveDoubling => {
            let mut flat = Vec::with_capacity(own_len);
            own.iter().for_each(|b| flat.extend_from_slice(b));
            let blocks = recursive_doubling_allgather(t, &flat)?;
            for (q, b) in blocks.iter().enumerate() {
                let view = if q == r {
                    own_view(&own, sparse_sum, &ai, &av, len)?
                } else {
                    stream_view::<E>(b, even_len(q, dim, p), "allgather block")?
                };
                append(view, qstart(q));
            }
        }
    }
    drop(parts);
    got.into_iter().for_each(|m| t.give_buffer(m));
    t.give_buffer(send);
    if sparse_sum {
        t.give_buffer(block);
    }
    ai.clear();
    av.clear();
    out.result = SparseVec::new_unchecked(dim, result_i, result_v);
    out.dropped = SparseVec::new_unchecked(dim, ai, av);
    out.traffic = t.traffic().since(&start);
    Ok(())
}

/// This rank's own partition as the others read it: the sparse sum itself,
/// or its dense block read back (zeros dropped, as a receiver drops them).
fn own_view<'b, E: Element>(
    own: &[&'b [u8]; 3],
    sparse_sum: bool,
    ai: &'b [u32],
    av: &'b [E],
    len: usize,
) -> Result<PartView<'b, E>> {
    if sparse_sum {
        Ok(PartView::Sparse(Cow::Borrowed(ai), Cow::Borrowed(av)))
    } else {
        stream_view(own[0], len, "allgather block")
    }
}
