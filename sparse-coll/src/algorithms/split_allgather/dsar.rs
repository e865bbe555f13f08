//! DSAR's allgather from a frame kept across calls (issue 30): the
//! partition written into a zeroed frame and cleared after, QSGD's codes
//! included.

use super::{append_partition, partition_parts, partition_span, split_phase_from, stream_view};
use crate::Transport;
use crate::dense::{Gathered, gather_bruck_framed};
use crate::entry::Reduced;
use crate::frame::{sum_parts, take_parts};
use sparse_core::encoding::Reader;
use sparse_core::qsgd::QsgdParams;
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Error, Result, SparseVec};

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
