//! Dense baselines: ring, recursive doubling and Rabenseifner allreduce,
//! and Bruck allgather, for any number of ranks. Each runs inside
//! [`crate::guard`]: a rank that fails part way abandons the transport,
//! so its peers fail too instead of waiting.
//!
//! Non-powers of two are handled as MPICH does (Thakur, Rabenseifner and
//! Gropp): with `p'` the largest power of two not above `P` and
//! `rem = P - p'`, each even rank below `2 rem` first sends its vector to the
//! next odd rank and sits out; the `p'` remaining ranks run the algorithm;
//! the odd ranks send the result back. Every rank ends with a bitwise
//! identical result: each sum is formed once and then copied, or formed as
//! `a + b` and `b + a`, which IEEE addition makes equal.

use crate::Transport;
use crate::bytes::{add_le_into, copy_le_into, le_bytes, le_elements};
pub use crate::transport::allgather::bruck_allgather;
use crate::transport::allgather::frame_spans;
pub(crate) use crate::transport::allgather::{Gathered, gather_bruck, gather_bruck_framed};
pub use crate::transport::ring::{ring_allreduce, ring_allreduce_into};
use sparse_core::stats::even_start;
use sparse_core::{Element, Result};
use std::borrow::Cow;
/// Elements from bytes; the length must be a multiple of the element size.
///
/// # Errors
/// [`sparse_core::Error::Corrupt`] otherwise.
pub fn from_bytes<E: Element>(b: &[u8], expected: usize) -> Result<Vec<E>> {
    le_elements(b, expected).map(Cow::into_owned)
}

/// The fold rule: ranks below `2 rem` take part, even ones handing over
/// (`Some(true)`), odd ones receiving (`Some(false)`).
fn role_of(rank: usize, rem: usize) -> Option<bool> {
    (rank < 2 * rem).then_some(rank.is_multiple_of(2))
}

/// MPICH's fold of `P` ranks onto `p'`, the largest power of two not above
/// `P`: each even rank below `2 rem` (`rem = P - p'`) hands its data to the
/// next odd rank and sits out. `newrank` is this rank's number among the
/// `p'` (None for a rank that sits out); `real` maps a number back.
pub(crate) struct Fold {
    pub(crate) pp: usize,
    pub(crate) rem: usize,
    pub(crate) newrank: Option<usize>,
}

impl Fold {
    pub(crate) fn new<T: Transport + ?Sized>(t: &T) -> Self {
        let p = t.size();
        let pp = 1usize << (usize::BITS - 1 - p.leading_zeros());
        let rem = p - pp;
        let r = t.rank();
        let newrank = match role_of(r, rem) {
            Some(true) => None,
            Some(false) => Some(r / 2),
            None => Some(r - rem),
        };
        Self { pp, rem, newrank }
    }
    pub(crate) fn real(&self, nr: usize) -> usize {
        if nr < self.rem {
            nr * 2 + 1
        } else {
            nr + self.rem
        }
    }
    /// Whether this rank takes part in the fold steps, and as which side:
    /// `Some(true)` hands its data over and sits out, `Some(false)`
    /// receives it, `None` is untouched.
    pub(crate) fn role(&self, rank: usize) -> Option<bool> {
        role_of(rank, self.rem)
    }
    /// The extra ranks hand their vectors to their odd partners.
    fn fold_in<T: Transport + ?Sized, E: Element>(&self, t: &mut T, buf: &mut [E]) -> Result<()> {
        let r = t.rank();
        match self.role(r) {
            Some(true) => t.send(r + 1, &le_bytes(buf)),
            Some(false) => add_le_into(buf, &t.recv(r - 1)?),
            None => Ok(()),
        }
    }
    /// The odd partners hand the result back.
    fn fold_out<T: Transport + ?Sized, E: Element>(&self, t: &mut T, buf: &mut [E]) -> Result<()> {
        let r = t.rank();
        match self.role(r) {
            Some(true) => copy_le_into(buf, &t.recv(r + 1)?),
            Some(false) => t.send(r - 1, &le_bytes(buf)),
            None => Ok(()),
        }
    }
}

/// The frame of the fold-based allreduces: copy the input, fold the extra
/// ranks in, run `core` on the `p'` remaining ranks (with this rank's
/// number among them), hand the result back out.
fn folded<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    x: &[E],
    core: impl FnOnce(&mut T, &Fold, usize, &mut [E]) -> Result<()>,
) -> Result<Vec<E>> {
    let mut buf = x.to_vec();
    if t.size() == 1 {
        return Ok(buf);
    }
    let fold = Fold::new(t);
    fold.fold_in(t, &mut buf)?;
    if let Some(nr) = fold.newrank {
        core(t, &fold, nr, &mut buf)?;
    }
    fold.fold_out(t, &mut buf)?;
    Ok(buf)
}

/// Recursive-doubling allreduce (MPICH): `lg p'` exchanges of the whole
/// vector among `p'` ranks, plus the fold for non-powers of two.
///
/// # Errors
/// Transport errors; [`sparse_core::Error::Corrupt`] if a peer sends a wrong length.
pub fn recursive_doubling_allreduce<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    x: &[E],
) -> Result<Vec<E>> {
    crate::transport::guard(t, |t| {
        folded(t, x, |t, fold, nr, buf| {
            let mut mask = 1;
            while mask < fold.pp {
                let partner = fold.real(nr ^ mask);
                let got = t.exchange(partner, &le_bytes(buf), partner)?;
                add_le_into(buf, &got)?;
                mask <<= 1;
            }
            Ok(())
        })
    })
}

/// Rabenseifner's allreduce (MPICH): recursive-halving reduce-scatter over
/// `p'` even blocks, then recursive-doubling allgather, plus the fold:
/// `2 lg p'` rounds and `2 (p' - 1) / p' n` elements each way when `p'`
/// divides `n`.
///
/// # Errors
/// Transport errors; [`sparse_core::Error::Corrupt`] if a peer sends a wrong length.
pub fn rabenseifner_allreduce<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    x: &[E],
) -> Result<Vec<E>> {
    crate::transport::guard(t, |t| {
        folded(t, x, |t, fold, nr, buf| {
            let (n, pp) = (buf.len(), fold.pp);
            let span = |lo: usize, hi: usize| {
                even_start(lo, n, pp)..if hi == pp { n } else { even_start(hi, n, pp) }
            };
            // Reduce-scatter: halve the block range [lo, hi) each step.
            let (mut lo, mut hi) = (0usize, pp);
            let mut mask = pp / 2;
            while mask > 0 {
                let partner = fold.real(nr ^ mask);
                let mid = lo + (hi - lo) / 2;
                let (keep, give) = if nr & mask == 0 {
                    ((lo, mid), (mid, hi))
                } else {
                    ((mid, hi), (lo, mid))
                };
                let got = t.exchange(partner, &le_bytes(&buf[span(give.0, give.1)]), partner)?;
                add_le_into(&mut buf[span(keep.0, keep.1)], &got)?;
                (lo, hi) = keep;
                mask /= 2;
            }
            // Allgather: double the range back.
            let mut mask = 1;
            while mask < pp {
                let partner = fold.real(nr ^ mask);
                let width = hi - lo;
                let other = if nr & mask == 0 {
                    (hi, hi + width)
                } else {
                    (lo - width, lo)
                };
                let got = t.exchange(partner, &le_bytes(&buf[span(lo, hi)]), partner)?;
                copy_le_into(&mut buf[span(other.0, other.1)], &got)?;
                (lo, hi) = (lo.min(other.0), hi.max(other.1));
                mask <<= 1;
            }
            Ok(())
        })
    })
}

/// Recursive-doubling allgather of one byte block per rank, of any lengths
/// (as MPICH's `MPI_Allgatherv` for a power of two): `lg P` exchanges in
/// which partners swap every block they hold, each with a 4-byte length.
/// Other `P` use MPICH's fold: each even rank below `2 rem` hands its block
/// to the next odd rank (one round), the `p'` remaining ranks run recursive
/// doubling, and the odd ranks send all `P` blocks back (one round). This is
/// the extra cost SparDL charges TopkA, TopkDSA and Ok-Topk with on
/// non-powers of two; [`bruck_allgather`] avoids it. Returns the blocks by
/// rank.
///
/// # Errors
/// Transport errors; [`sparse_core::Error::Corrupt`] for a malformed frame.
pub fn recursive_doubling_allgather<T: Transport + ?Sized>(
    t: &mut T,
    block: &[u8],
) -> Result<Vec<Vec<u8>>> {
    crate::transport::guard(t, |t| {
        let own = [block];
        let g = gather_recursive_doubling(t, &own)?;
        let blocks = (0..t.size())
            .map(|q| g.block(q).unwrap_or(block).to_vec())
            .collect();
        g.release(t);
        Ok(blocks)
    })
}

/// [`recursive_doubling_allgather`] of this rank's block `own` (the
/// concatenation of these parts), sending the same messages, with the
/// received frames read in place: in buffers from the transport's pool,
/// handed back by [`Gathered::release`].
///
/// # Errors
/// As [`recursive_doubling_allgather`].
// Over 80 lines: MPICH's fold, the doubling steps and the fold's return
// share the frame bookkeeping of one `Gathered`; split, each part would
// take the whole state as arguments.
pub(crate) fn gather_recursive_doubling<'a, T: Transport + ?Sized>(
    t: &mut T,
    own: &'a [&'a [u8]],
) -> Result<Gathered<'a>> {
    let (p, r) = (t.size(), t.rank());
    // By rank, as the result is; (0, _) is this rank's own block.
    let mut g = Gathered {
        own,
        msgs: Vec::new(),
        spans: vec![(0, 0..0); p],
    };
    if p == 1 {
        return Ok(g);
    }
    let fold = Fold::new(t);
    // The ranks a number of the p' stands for, in increasing order.
    let reals = |nr: usize| {
        if nr < fold.rem {
            vec![2 * nr, 2 * nr + 1]
        } else {
            vec![nr + fold.rem]
        }
    };
    let mut send = t.take_buffer();
    // Keeps a received frame of the blocks of `ranks`.
    let keep = |g: &mut Gathered<'_>, got: Vec<u8>, ranks: &[usize]| -> Result<()> {
        let spans = frame_spans(&got, ranks.len())?;
        let src = g.msgs.len() + 1;
        for (&q, span) in ranks.iter().zip(spans) {
            g.spans[q] = (src, span);
        }
        g.msgs.push(got);
        Ok(())
    };
    let run = (|| {
        match fold.role(r) {
            Some(true) => {
                send.clear();
                own.iter().for_each(|b| send.extend_from_slice(b));
                t.send(r + 1, &send)?;
            }
            Some(false) => {
                // The folded rank's block, whole (not framed).
                let mut got = t.take_buffer();
                t.recv_into(r - 1, &mut got)?;
                g.spans[r - 1] = (g.msgs.len() + 1, 0..got.len());
                g.msgs.push(got);
            }
            None => {}
        }
        if let Some(nr) = fold.newrank {
            let mut mask = 1;
            while mask < fold.pp {
                let team = |x: usize| -> Vec<usize> {
                    let base = x & !(mask - 1);
                    (base..base + mask).flat_map(reals).collect()
                };
                let (mine, theirs) = (team(nr), team(nr ^ mask));
                let partner = fold.real(nr ^ mask);
                send.clear();
                mine.into_iter().for_each(|q| g.frame_into(q, &mut send));
                let mut got = t.take_buffer();
                t.exchange_into(partner, &send, partner, &mut got)?;
                keep(&mut g, got, &theirs)?;
                mask <<= 1;
            }
        }
        match fold.role(r) {
            Some(true) => {
                let mut got = t.take_buffer();
                t.recv_into(r + 1, &mut got)?;
                keep(&mut g, got, &(0..p).collect::<Vec<_>>())?;
                // This rank's own block stays the caller's.
                g.spans[r] = (0, 0..0);
            }
            Some(false) => {
                send.clear();
                (0..p).for_each(|q| g.frame_into(q, &mut send));
                t.send(r - 1, &send)?;
            }
            None => {}
        }
        Ok(())
    })();
    t.give_buffer(send);
    match run {
        Ok(()) => Ok(g),
        Err(e) => {
            g.release(t);
            Err(e)
        }
    }
}
