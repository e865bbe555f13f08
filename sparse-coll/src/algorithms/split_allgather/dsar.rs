//! DSAR_Split_allgather: its type, its trait impls and registry names,
//! its formulas, and its allgather from a frame kept across calls (the
//! partition written into a zeroed frame and cleared after, QSGD's codes
//! included). The split phase it shares with SSAR is in the parent.

use super::{
    Phase, append_partition, partition_parts, partition_span, split_admit_probing, split_bytes,
    split_phase_from, split_rounds, stream_view,
};
use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::dense::{Gathered, gather_bruck_framed};
use crate::entry::Admission;
use crate::entry::Reduced;
use crate::frame::{sum_parts, take_parts};
use crate::profile::{Profile, bytes_cost};
use crate::{Entered, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::encoding::Reader;
use sparse_core::qsgd::QsgdParams;
use sparse_core::state::{Scope, State};
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Error, Result, SparseVec};

/// DSAR_Split_allgather's registry name (with QSGD too: the quantization
/// is a parameter the ranks agree on).
const DSAR_NAME: &str = "dsar_split_allgather";

/// DSAR_Split_allgather: the split phase of [`SsarSplitAllgather`](super::SsarSplitAllgather), then
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
/// With its call counter: the QSGD seed of a call mixes the configured
/// seed, the call number and the rank, so that no two calls (or ranks)
/// repeat the same random draws. Registry names `dsar_split_allgather`
/// and, with QSGD, `dsar_qsgd`.
///
/// # Errors
/// [`Error::Disagreement`], transport errors, [`Error::Corrupt`]. With
/// QSGD, a partition sum that is not finite (the inputs' sum overflowed:
/// QSGD cannot scale it) fails on every rank, its owner with
/// [`Error::Unencodable`] and the others with [`Error::PeerError`], and
/// leaves the transport usable, as an entry round's failure does.
///
/// Once warm (a call at the same dimension, `P` and element type
/// succeeded), a call
/// allocates nothing that grows with the data: this rank's allgather
/// frame (zero between calls but for its header, so that a call writes
/// and clears only its partition's entries) and the buffers its messages
/// are built and received in are kept here across calls, about `n E`
/// bytes (`n E / 8` and less with QSGD), and the result is built in
/// `out`'s vectors ([`SparseAllreduce::allreduce_into`]); the probe above
/// is then skipped, as the frame it asks about is held. The result's
/// vectors are the caller's: `allreduce_into` reuses them, while a caller
/// that passes a fresh `Reduced` at each call (`allreduce`) has them
/// allocated by the body, unprobed.
#[derive(Debug, Clone)]
pub struct DsarSplitAllgather {
    qsgd: Option<QsgdParams>,
    calls: u64,
    frame: DsarFrame,
    /// The dimension, `P` and element code of the last call that
    /// succeeded.
    warm: Option<(usize, usize, u8)>,
}

/// Equal where the parameters and the call count are: the frame kept
/// across calls is a cache, not part of the value.
impl PartialEq for DsarSplitAllgather {
    fn eq(&self, other: &Self) -> bool {
        (self.qsgd, self.calls) == (other.qsgd, other.calls)
    }
}

impl DsarSplitAllgather {
    /// DSAR, its dense phase QSGD-quantized with `qsgd`.
    pub fn new(qsgd: Option<QsgdParams>) -> Self {
        Self {
            qsgd,
            calls: 0,
            frame: DsarFrame::default(),
            warm: None,
        }
    }
    /// The QSGD parameters.
    pub fn qsgd(&self) -> Option<QsgdParams> {
        self.qsgd
    }
    /// QSGD of `bits` bits (none without), with a name's `bucket` and
    /// `seed` (defaults 512 and a fixed seed). The bits come from one
    /// spelling per name (`qsgd=` for `dsar_split_allgather`, `bits=` for
    /// `dsar_qsgd`): the other is left in `params`, so the registry rejects
    /// it as unknown instead of dropping it; without QSGD `bucket` and
    /// `seed` are left there too.
    fn qsgd_from(params: &mut Params, bits: Option<u32>) -> Result<Option<QsgdParams>> {
        let Some(bits) = bits else {
            return Ok(None);
        };
        let bucket = params.take("bucket")?.unwrap_or(512);
        let seed = params.take("seed")?.unwrap_or(0x95d);
        Ok(Some(QsgdParams::new(bits, bucket, seed)?))
    }
}

impl<E: Element> SparseAllreduce<E> for DsarSplitAllgather {
    /// Restarts the call count that seeds QSGD's draws.
    fn reset(&mut self) {
        self.calls = 0;
    }
    /// The call count that seeds QSGD's draws, advanced alike on every
    /// rank ([`Scope::Shared`]).
    fn save_state(&self) -> Result<State> {
        let mut s = State::new("sparse_coll::DsarSplitAllgather", 1);
        s.put_u64("calls", Scope::Shared, self.calls);
        Ok(s)
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect("sparse_coll::DsarSplitAllgather", 1)?;
        // Dropped by a reshard where it was a part whose layout depends on
        // the rank count (the hierarchical allreduce's): a first call's.
        self.calls = s.local_u64("calls", 0)?;
        Ok(())
    }
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
        Some(prof.within(dsar_split_allgather(
            prof.p,
            prof.n,
            prof.k_avg(),
            self.qsgd.map(|q| (q.bits(), q.bucket())),
        )))
    }
    /// The call counter counts calls that entered the round.
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        self.calls = self.calls.wrapping_add(1);
        let probe = self.warm != Some((v.dim(), t.size(), E::CODE));
        Some(split_admit_probing(
            t,
            v,
            Phase::Dense(self.qsgd),
            DSAR_NAME,
            probe,
        ))
    }
    /// The inner error: a partition sum that QSGD cannot scale, its
    /// owner's [`Error::Unencodable`] and the others' [`Error::PeerError`]
    /// (every rank took part in every message, so the next call works,
    /// alone or joint).
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let call = self.calls - 1;
        let q = self.qsgd.map(|q| {
            let mut mix = sparse_core::SplitMix64(q.seed() ^ call.rotate_left(32));
            q.with_seed(mix.next_u64())
        });
        self.warm = None;
        if let Err(e) = dsar_allgather(t, v, q, &mut self.frame, out)? {
            return Ok(Err(e));
        }
        self.warm = Some((v.dim(), t.size(), E::CODE));
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for DsarSplitAllgather {
    /// `P - 1` direct steps, then a Bruck allgather.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(p as u64 - 1 + u64::from(cost::ceil_log2(p)))
    }
    /// Without QSGD: the split phase's pieces, then the dense partitions.
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        self.qsgd.is_none().then(|| split_bytes(ins, r, true))
    }
}

impl<E: Element> Registered<E> for DsarSplitAllgather {
    const NAME: &'static str = DSAR_NAME;
    const LOSSLESS: bool = true;
    const STATEFUL: bool = true;
    const WARM: bool = true;
    const PLANNED: bool = true;
    const PARAMS: &'static str = "qsgd (bits: 2, 4 or 8; none by default), bucket (512), seed";
    const HELP: &'static str =
        "SparCML's split phase, then dense partitions allgathered; lossless without qsgd";
    fn build(params: &mut Params, _: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
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
        let facts = crate::Facts {
            stateful: true,
            warm: true,
            ..crate::Facts::default()
        };
        r.register_with(
            DSAR_QSGD_NAME,
            "bits (2, 4 or 8; default 4), bucket (512), seed",
            "DSAR with QSGD-quantized dense partitions; lossy, the quantization error in dropped",
            facts,
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

/// The bytes DSAR holds at its peak for a result of dimension `dim`: the
/// received dense partitions (`dim` values) and the result built from them
/// (an index and a value per coordinate), plus this rank's own partition
/// twice (the sum and its encoding).
pub(super) fn dense_phase_bytes<E: Element>(dim: usize, p: usize) -> u64 {
    // Saturating: a dimension past what any machine holds is a refused
    // probe (the input check names it), not an overflow.
    let (dim, e) = (dim as u64, E::BYTES as u64);
    dim.saturating_mul(2 * e + 4)
        .saturating_add(dim.div_ceil(p.max(1) as u64).saturating_mul(2 * e))
}

/// The shape of a [`DsarFrame`]: element bytes, partition length, and
/// QSGD's bits and bucket (none: a dense stream).
type FrameShape = (usize, usize, Option<(u32, usize)>);

/// This rank's allgather frame, kept by DSAR across calls: the block's
/// 4-byte length, then the block (a dense stream, or tag 2 and a QSGD
/// values section), zero between calls wherever entries go (the values, or
/// the code words), so that a call writes only its entries and clears only
/// those: no pass over the partition and no fresh pages.
#[derive(Debug, Clone, Default)]
pub(super) struct DsarFrame {
    bytes: Vec<u8>,
    /// The split phase's send buffer, and this rank's own indices in its
    /// partition (re-indexed): kept here rather than taken from the
    /// transport's pool, which keeps a few of its largest buffers only.
    send: Vec<u8>,
    own: Vec<u32>,
    /// The buffers the split phase and the allgather receive into, kept
    /// from one call to the next (the thread transport swaps in the
    /// sender's and pools these).
    split_spare: Vec<Vec<u8>>,
    gather_spare: Vec<Vec<u8>>,
    /// The shape `bytes` is zero-filled for; `None` while a call has
    /// entries written (or failed with them there): built afresh then.
    shape: Option<FrameShape>,
}

/// Bytes of a dense stream's header, and of a QSGD block's before its
/// scales (tag 2, `bits: u8`, `bucket: u32`).
const DENSE_AT: usize = 4;
const QSGD_AT: usize = 6;

impl DsarFrame {
    /// Where the entries go in `bytes`: the values (dense) or the scales
    /// and code words (QSGD), for a partition of `len` coordinates.
    fn regions<E: Element>(q: Option<QsgdParams>, len: usize) -> (usize, usize, usize) {
        match q {
            None => (4 + DENSE_AT, 0, len * E::BYTES),
            Some(q) => (4 + QSGD_AT, q.buckets(len) * E::BYTES, q.words(len) * 4),
        }
    }

    /// The frame of `len` coordinates holding the entries `(ai, av)`:
    /// written from the zeroed frame kept (built afresh where the shape
    /// changed), as [`encode_block`] would encode the dense partition.
    fn write<E: Element>(
        &mut self,
        q: Option<QsgdParams>,
        len: usize,
        (ai, av): (&[u32], &[E]),
    ) -> Result<()> {
        let shape = (E::BYTES, len, q.map(|q| (q.bits(), q.bucket())));
        let (at, scales, words) = Self::regions::<E>(q, len);
        if self.shape.take() != Some(shape) {
            let total = at + scales + words;
            self.bytes.clear();
            self.bytes
                .try_reserve_exact(total)
                .map_err(|_| Error::OutOfMemory {
                    what: "DSAR's allgather frame",
                    bytes: total as u64,
                })?;
            self.bytes.resize(total, 0);
            self.bytes[..4].copy_from_slice(&((total - 4) as u32).to_le_bytes());
            match q {
                None => self.bytes[4] = 1,
                Some(q) => {
                    self.bytes[4] = 2;
                    self.bytes[5] = q.bits() as u8;
                    self.bytes[6..10].copy_from_slice(&(q.bucket() as u32).to_le_bytes());
                }
            }
        }
        let body = &mut self.bytes[at..];
        match q {
            None => {
                for (&i, &x) in ai.iter().zip(av) {
                    let o = i as usize * E::BYTES;
                    body[o..o + E::BYTES]
                        .copy_from_slice(&x.to_bits_u64().to_le_bytes()[..E::BYTES]);
                }
                Ok(())
            }
            Some(q) => {
                let (sc, wo) = body.split_at_mut(scales);
                sparse_core::qsgd::quantize_sparse_exact_into((ai, av), len, &q, sc, wo)
            }
        }
    }

    /// Zeroes again what [`DsarFrame::write`] wrote for the entries at
    /// `ai` (the scales are all written by every call).
    fn clear<E: Element>(&mut self, q: Option<QsgdParams>, len: usize, ai: &[u32]) {
        let (at, scales, _) = Self::regions::<E>(q, len);
        let body = &mut self.bytes[at..];
        match q {
            None => ai.iter().for_each(|&i| {
                let o = i as usize * E::BYTES;
                body[o..o + E::BYTES].fill(0);
            }),
            Some(q) => ai.iter().for_each(|&i| {
                let o = scales + i as usize * q.bits() as usize / 32 * 4;
                body[o..o + 4].fill(0);
            }),
        }
        self.shape = Some((E::BYTES, len, q.map(|q| (q.bits(), q.bucket()))));
    }
}

/// DSAR after [`super::split_admit`]: [`super::split_allgather`]'s dense phase with the
/// same messages and results, bit for bit, without a pass over the dense
/// partition on this rank: the split phase and the sum as there, then this
/// rank's block written into `frame` from the sum's entries and sent from
/// it, its share of the result (and, with QSGD, of `dropped`) taken from
/// those entries, and the others' blocks read in place, their non-zeros
/// found by skipping zero words.
///
/// A partition sum that QSGD cannot scale (not finite: the inputs' sum
/// overflowed) is an agreed failure: its owner sends a failure block in
/// the allgather instead of its partition, every rank completes the
/// allgather, and every rank returns the inner error (the owner its own
/// [`Error::Unencodable`], the others [`Error::PeerError`] naming the
/// lowest such owner) with no message left unread, so that the transport
/// stays usable; the frame is zero again.
///
/// # Errors
/// The outer error: transport errors, [`Error::Corrupt`],
/// [`Error::OutOfMemory`] (after which peers may wait: the caller abandons
/// the transport).
pub(super) fn dsar_allgather<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    q: Option<QsgdParams>,
    frame: &mut DsarFrame,
    out: &mut Reduced<E>,
) -> Result<Result<()>> {
    let dim = v.dim();
    let (p, r) = (t.size(), t.rank());
    let (lo, len) = (even_start(r, dim, p), even_len(r, dim, p));
    let got = split_phase_from(t, v, &mut frame.send, Some(&mut frame.split_spare))?;
    let (qlo, span) = partition_span(v, r, p);
    frame.own.clear();
    frame
        .own
        .extend(v.indices()[span.clone()].iter().map(|&i| i - qlo));
    let own = (&frame.own[..], &v.values()[span]);
    let parts = partition_parts(&got, own, r, len)?;
    let (mut ai, mut av) = take_parts(&mut out.result);
    let (mut result_i, mut result_v) = take_parts(&mut out.dropped);
    sum_parts(
        &parts,
        len,
        (&mut ai, &mut av),
        (&mut result_i, &mut result_v),
    );
    drop(parts);
    frame.split_spare.extend(got.into_iter().rev());
    // This rank's QSGD draws, as `encode_block` seeds them.
    let q = q.map(|q| q.with_seed(q.seed() ^ r as u64));
    // A partition sum QSGD cannot scale (not finite: the inputs' sum
    // overflowed) travels as a failure block instead, so that every rank
    // still completes the allgather and learns of it.
    let failed = match frame.write(q, len, (&ai, &av)) {
        Ok(()) => None,
        Err(Error::NonFinite { index }) => Some((lo + index) as u64),
        Err(e) => return Err(e),
    };
    let failure = failed.map(failure_frame);
    let framed: &[u8] = failure.as_deref().unwrap_or(&frame.bytes);
    let own_block = [&framed[4..]];
    let g = gather_bruck_framed(
        t,
        &own_block,
        framed,
        &mut frame.send,
        &mut frame.gather_spare,
    )?;
    let agreed = match failed {
        Some(i) => Some(own_failure(i)),
        None => peer_failure(&g, p)?,
    };
    if let Some(e) = agreed {
        g.release_into(&mut frame.gather_spare);
        if failed.is_none() {
            frame.clear::<E>(q, len, &ai);
        }
        return Ok(Err(e));
    }
    let (_, scales, _) = DsarFrame::regions::<E>(q, len);
    for from in 0..p {
        let Some(b) = g.block(from) else {
            // This rank's partition: the sum's non-zeros, or what its
            // codes decode to (the rest of each entry kept in `av`).
            match q {
                None => push_sparse_nonzeros(&ai, &av, lo as u32, &mut result_i, &mut result_v),
                Some(q) => {
                    let (sc, words) = frame.bytes[4 + QSGD_AT..].split_at(scales);
                    let sent = (q, sc, words);
                    push_own_codes(
                        sent,
                        (&ai, &mut av),
                        lo as u32,
                        (&mut result_i, &mut result_v),
                    );
                }
            }
            continue;
        };
        let (qlo, qlen) = (even_start(from, dim, p) as u32, even_len(from, dim, p));
        if b.first() == Some(&2) {
            let mut rd = Reader::new(&b[1..], "qsgd partition");
            sparse_core::qsgd::decode_nonzeros::<E>(&mut rd, qlen, |j, x| {
                result_i.push(qlo + j as u32);
                result_v.push(x);
            })?;
            rd.finish()?;
        } else {
            append_partition(
                stream_view(b, qlen, "allgather block")?,
                qlo,
                &mut result_i,
                &mut result_v,
            );
        }
    }
    g.release_into(&mut frame.gather_spare);
    frame.clear::<E>(q, len, &ai);
    // This rank's share of what QSGD dropped: the entries' non-zero rests.
    keep_rests(q.is_some(), (&mut ai, &mut av), lo as u32);
    out.result = SparseVec::new_unchecked(dim, result_i, result_v);
    out.dropped = SparseVec::new_unchecked(dim, ai, av);
    Ok(Ok(()))
}

/// Keeps in `(ai, av)` the entries whose rest is not zero, shifted by
/// `lo` (none without QSGD: nothing was dropped).
fn keep_rests<E: Element>(quantized: bool, (ai, av): (&mut Vec<u32>, &mut Vec<E>), lo: u32) {
    let mut kept = 0;
    if quantized {
        for k in 0..ai.len() {
            if av[k] != E::zero() {
                (ai[kept], av[kept]) = (ai[k] + lo, av[k]);
                kept += 1;
            }
        }
    }
    ai.truncate(kept);
    av.truncate(kept);
}

/// This rank's QSGD partition (`q`, its scales and code words as sent):
/// what the codes of its entries `(ai, av)` decode to, non-zeros appended
/// shifted by `lo`, and each entry's rest left in `av`.
fn push_own_codes<E: Element>(
    (q, sc, words): (QsgdParams, &[u8], &[u8]),
    (ai, av): (&[u32], &mut [E]),
    lo: u32,
    (result_i, result_v): (&mut Vec<u32>, &mut Vec<E>),
) {
    for (&i, x) in ai.iter().zip(av.iter_mut()) {
        let b = i as usize / q.bucket() * E::BYTES;
        let scale = E::read_le(&sc[b..b + E::BYTES]);
        let code = sparse_core::qsgd::code_at(words, i as usize, q.bits());
        let sent = sparse_core::qsgd::decode_code(code, scale, q.levels(), q.bits());
        if sent != E::zero() {
            result_i.push(lo + i);
            result_v.push(sent);
        }
        *x = *x - sent;
    }
}

/// The tag of a failure block: this rank's partition sum is not finite at
/// the index that follows (`u64`), and QSGD cannot scale it.
const FAILED: u8 = 3;

/// The allgather frame of a failure block for index `i`: its 4-byte
/// length, [`FAILED`], the index.
fn failure_frame(i: u64) -> Vec<u8> {
    let mut f = 9u32.to_le_bytes().to_vec();
    f.push(FAILED);
    f.extend_from_slice(&i.to_le_bytes());
    f
}

/// What QSGD cannot do, and what to do instead.
const NOT_FINITE: &str = "QSGD cannot scale a value that is not finite: scale the inputs \
                          down, or use a lossless collective (dsar_split_allgather), whose \
                          sum is infinite there";

/// This rank's own error where its partition sum is not finite at `i`.
fn own_failure(i: u64) -> Error {
    Error::Unencodable {
        codec: "qsgd",
        reason: format!(
            "the ranks' inputs sum to a value that is not finite at index {i} (past the \
             element type's largest): {NOT_FINITE}"
        ),
    }
}

/// The lowest rank whose gathered block is a failure block, as this
/// rank's [`Error::PeerError`]; `None` where no peer failed.
///
/// # Errors
/// [`Error::Corrupt`] for a failure block of another length.
fn peer_failure(g: &Gathered<'_>, p: usize) -> Result<Option<Error>> {
    for q in 0..p {
        let Some(b) = g.block(q).filter(|b| b.first() == Some(&FAILED)) else {
            continue;
        };
        let i = b
            .get(1..)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| {
                Error::corrupt("dsar failure block", format!("{} bytes, not 9", b.len()))
            })?;
        return Ok(Some(Error::PeerError {
            rank: q,
            detail: format!(
                "the ranks' inputs sum to a value that is not finite at index {i}, in rank \
                 {q}'s partition: {NOT_FINITE}"
            ),
        }));
    }
    Ok(None)
}

/// Appends the pairs whose value is not zero, shifted by `qlo`: what
/// [`push_nonzeros`] finds in their dense partition.
fn push_sparse_nonzeros<E: Element>(
    ai: &[u32],
    av: &[E],
    qlo: u32,
    result_i: &mut Vec<u32>,
    result_v: &mut Vec<E>,
) {
    for (&i, &x) in ai.iter().zip(av) {
        if x != E::zero() {
            result_i.push(qlo + i);
            result_v.push(x);
        }
    }
}

// SparCML's formulas for DSAR (sec. 5.3.3, Lemma 5.2), which its dense
// phase meets.

/// SparCML DSAR_Split_allgather (sec. 5.3.3): the split phase as in
/// SSAR_Split_allgather (`P - 1` rounds, 0 to `k` items), then a dense
/// allgather of the `n / P` partitions (`lg P` rounds, `(P - 1) / P n`
/// values). With QSGD at `bits` bits in the dense phase, each value costs
/// `bits / 32` words plus one scale word per bucket of `bucket` values.
pub fn dsar_split_allgather(
    p: usize,
    n: usize,
    k: usize,
    qsgd: Option<(u32, usize)>,
) -> cost::Bounds {
    let r = p as f64 - 1.0 + cost::ceil_log2(p) as f64;
    let dense = crate::profile::frac(p) * n as f64;
    let dense_words = match qsgd {
        None => dense,
        Some((bits, bucket)) => dense * bits as f64 / 32.0 + dense / bucket as f64,
    };
    cost::Bounds {
        lo: Cost::new(r, dense_words),
        hi: Cost::new(r, dense_words + 2.0 * k as f64),
    }
}

/// SparCML Lemma 5.2: a dynamic sparse allreduce (result of `delta` or more
/// entries, dense) needs `lg P` rounds and `delta` dense words.
pub fn dsar_lower_bound(p: usize, delta: usize) -> Cost {
    Cost::new(cost::ceil_log2(p) as f64, delta as f64)
}
