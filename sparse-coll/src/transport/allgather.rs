//! The Bruck allgather (Bruck et al.; SparDL sec. 2): the collective the
//! entry agreement ([`super::agree`]) rides on, so it lives with the
//! transports (as the ring, their default dense allreduce, does); public as
//! `sparse_coll::dense::bruck_allgather`. Also the [`Gathered`] blocks
//! every allgather of this crate returns, read in place from the received
//! frames.

use super::Transport;
use sparse_core::{Error, Result};
use std::ops::Range;

/// Where the `count` blocks of a frame (each block behind its 4-byte length,
/// as [`Gathered::frame_into`] writes them) lie in `bytes`, which they must fill exactly.
pub(crate) fn frame_spans(bytes: &[u8], count: usize) -> Result<Vec<Range<usize>>> {
    let mut out = Vec::with_capacity(count.min(bytes.len() / 4));
    let mut at = 0;
    for _ in 0..count {
        let len = bytes
            .get(at..at + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
            .ok_or_else(|| Error::corrupt("allgather frame", "truncated length"))?;
        if bytes.len() - at - 4 < len {
            return Err(Error::corrupt("allgather frame", "truncated block"));
        }
        out.push(at + 4..at + 4 + len);
        at += 4 + len;
    }
    if at != bytes.len() {
        return Err(Error::corrupt("allgather frame", "trailing bytes"));
    }
    Ok(out)
}

/// Bruck allgather of one byte block per rank, of any lengths: `ceil(lg P)`
/// rounds for any `P`; at step `i` a rank sends the `min(2^i, P - 2^i)`
/// blocks it holds to rank `r - 2^i` and receives as many from `r + 2^i`.
/// Each block travels with a 4-byte length, so a rank receives
/// `sum over other ranks of (4 + len)` bytes. Returns the blocks by rank.
///
/// # Errors
/// Transport errors; [`Error::Corrupt`] for a malformed frame.
pub fn bruck_allgather<T: Transport + ?Sized>(t: &mut T, block: &[u8]) -> Result<Vec<Vec<u8>>> {
    super::guard(t, |t| {
        let own = [block];
        let g = gather_bruck(t, &own)?;
        let blocks = (0..t.size())
            .map(|q| match g.block(q) {
                Some(b) => b.to_vec(),
                None => block.to_vec(),
            })
            .collect();
        g.release(t);
        Ok(blocks)
    })
}

/// The blocks of an allgather ([`gather_bruck`],
/// `dense::gather_recursive_doubling`), by rank: the
/// others' blocks as spans of the received frames, which came from the
/// transport's buffer pool and go back to it with [`Gathered::release`].
/// This rank's own block is the caller's.
pub(crate) struct Gathered<'a> {
    /// This rank's block, as the parts it is the concatenation of.
    pub(crate) own: &'a [&'a [u8]],
    pub(crate) msgs: Vec<Vec<u8>>,
    /// By rank: the source (0 own, `i + 1` for `msgs[i]`) and the span.
    pub(crate) spans: Vec<(usize, Range<usize>)>,
}

impl Gathered<'_> {
    /// Rank `q`'s block; `None` for this rank's own, which is the
    /// caller's.
    pub(crate) fn block(&self, q: usize) -> Option<&[u8]> {
        match &self.spans[q] {
            (0, _) => None,
            (src, span) => Some(&self.msgs[src - 1][span.clone()]),
        }
    }
    /// Appends block `i` of `spans` (in holding order while Bruck's gather
    /// runs, by rank in the recursive doubling's and after) behind its
    /// 4-byte length: one block of a frame.
    pub(crate) fn frame_into(&self, i: usize, out: &mut Vec<u8>) {
        let own;
        let parts: &[&[u8]] = match self.block(i) {
            Some(b) => {
                own = [b];
                &own
            }
            None => self.own,
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        out.extend_from_slice(&(len as u32).to_le_bytes());
        parts.iter().for_each(|p| out.extend_from_slice(p));
    }
    /// Hands the received frames back to the transport's pool.
    pub(crate) fn release<T: Transport + ?Sized>(self, t: &mut T) {
        self.msgs.into_iter().for_each(|m| t.give_buffer(m));
    }
    /// Puts the received frames in `spare`, the first step's last, for
    /// [`gather_bruck_framed`] to receive into again.
    pub(crate) fn release_into(self, spare: &mut Vec<Vec<u8>>) {
        spare.extend(self.msgs.into_iter().rev());
    }
}

/// [`bruck_allgather`] of this rank's block `own` (the concatenation of
/// its parts, so a vector's indices and values need not be copied into one
/// buffer first), with the same frames on the wire and so the same
/// traffic; frames are built and received in the transport's pooled
/// buffers and read in place: no per-block copy and, once warm, no
/// allocation.
///
/// # Errors
/// Transport errors; [`Error::Corrupt`] for a malformed frame.
pub(crate) fn gather_bruck<'a, T: Transport + ?Sized>(
    t: &mut T,
    own: &'a [&'a [u8]],
) -> Result<Gathered<'a>> {
    let mut send = t.take_buffer();
    let g = gather_bruck_from(t, own, None, &mut send, None);
    t.give_buffer(send);
    g
}

/// [`gather_bruck`] with the caller's buffers, kept across calls outside
/// the transport's pool: `framed` is this rank's block behind its 4-byte
/// length (the bytes [`Gathered::frame_into`] writes for `own` alone),
/// sent as it is in the first step instead of copied into a frame; later
/// steps' frames are built in `send`; each step receives into a buffer
/// from `spare` (the last first), and [`Gathered::release_into`] puts the
/// received frames back there. Same frames on the wire.
///
/// # Errors
/// As [`gather_bruck`].
pub(crate) fn gather_bruck_framed<'a, T: Transport + ?Sized>(
    t: &mut T,
    own: &'a [&'a [u8]],
    framed: &[u8],
    send: &mut Vec<u8>,
    spare: &mut Vec<Vec<u8>>,
) -> Result<Gathered<'a>> {
    gather_bruck_from(t, own, Some(framed), send, Some(spare))
}

/// [`gather_bruck`]'s steps, receiving into buffers from `spare` (or the
/// transport's pool) and building frames in `send`.
fn gather_bruck_from<'a, T: Transport + ?Sized>(
    t: &mut T,
    own: &'a [&'a [u8]],
    framed: Option<&[u8]>,
    send: &mut Vec<u8>,
    mut spare: Option<&mut Vec<Vec<u8>>>,
) -> Result<Gathered<'a>> {
    let (p, r) = (t.size(), t.rank());
    let mut g = Gathered {
        own,
        msgs: Vec::new(),
        spans: vec![(0, 0..0)],
    };
    let mut dist = 1;
    while dist < p {
        let count = dist.min(p - dist);
        let frame = match framed {
            // The first step's frame is this rank's block alone.
            Some(f) if dist == 1 => f,
            _ => {
                send.clear();
                for i in 0..count {
                    g.frame_into(i, send);
                }
                &send[..]
            }
        };
        let mut got = match spare.as_deref_mut() {
            Some(s) => s.pop().unwrap_or_default(),
            None => t.take_buffer(),
        };
        t.exchange_into((r + p - dist) % p, frame, (r + dist) % p, &mut got)?;
        let src = g.msgs.len() + 1;
        g.spans.extend(
            frame_spans(&got, count)?
                .into_iter()
                .map(|span| (src, span)),
        );
        g.msgs.push(got);
        dist <<= 1;
    }
    // spans[i] is rank (r + i) % p's block.
    g.spans.rotate_right(r);
    Ok(g)
}
