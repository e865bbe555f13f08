//! The point-to-point push/pull skeleton with one server per rank, shared by
//! Zen's Balanced Parallelism and the OmniReduce-style block baseline.

use crate::Transport;
use crate::entry::Reduced;
use crate::frame::{PairsView, sum_parts, take_parts};
use sparse_core::encoding::Encoding;
use sparse_core::{Element, Error, Result, SparseVec};
use std::borrow::Cow;

/// One push/pull scheme: which server owns an index, and how the pushed
/// pieces and the pulled partition results are encoded.
pub(crate) trait Scheme<E: Element> {
    fn owner(&self, idx: u32) -> usize;
    fn push(&self) -> Box<dyn Encoding<E> + '_>;
    fn pull(&self, server: usize) -> Result<Box<dyn Encoding<E> + '_>>;
    /// What the pull encoding gives back of a partition's sum
    /// (`decode(encode(v))`): the owner reads its own partition from its
    /// sum so, instead of decoding the message it sends.
    fn pull_keeps(&self) -> Keeps;
}

/// What a pull encoding gives back of the entries it encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keeps {
    /// Every entry as it is (Zen's hash bitmap with raw values).
    Every,
    /// The entries whose value is not zero (`x != 0`: OmniReduce's blocks
    /// with raw values).
    NonZero,
}

/// A `SparseVec` with no allocation, to leave in place of one taken.
fn empty<E: Element>() -> SparseVec<E> {
    SparseVec::new_unchecked(0, Vec::new(), Vec::new())
}

/// The memory of [`push_pull_into`], kept across calls by the algorithm so
/// that a warm call allocates nothing that grows with the data: this
/// rank's pieces, the received parts, the served sum and the messages.
#[derive(Debug)]
pub(crate) struct PushPull<E: Element> {
    /// This rank's entries owned by each server, one piece per server (the
    /// caller fills them before [`push_pull_into`]).
    pub(crate) pieces: Vec<SparseVec<E>>,
    /// Received pieces (push), then received partitions (pull), by rank.
    parts: Vec<(Vec<u32>, Vec<E>)>,
    /// The partition this rank serves, summed.
    mine: SparseVec<E>,
    /// The vectors the merges alternate with.
    scratch: (Vec<u32>, Vec<E>),
    /// The pushed message being encoded.
    send: Vec<u8>,
    /// The pulled message this rank sends to every other.
    pull: Vec<u8>,
}

impl<E: Element> Default for PushPull<E> {
    fn default() -> Self {
        Self {
            pieces: Vec::new(),
            parts: Vec::new(),
            mine: empty(),
            scratch: (Vec::new(), Vec::new()),
            send: Vec::new(),
            pull: Vec::new(),
        }
    }
}

impl<E: Element> PushPull<E> {
    /// `p` pieces, each emptied (their allocations kept) with dimension
    /// `dim`, for the caller to fill ([`PushPull::take_piece`]).
    pub(crate) fn clear_pieces(&mut self, p: usize, dim: usize) {
        self.pieces.resize_with(p, empty);
        for piece in &mut self.pieces {
            let (i, x) = take_parts(piece);
            *piece = SparseVec::new_unchecked(dim, i, x);
        }
    }
    /// Piece `s`'s vectors to fill directly, and their dimension.
    pub(crate) fn take_piece(&mut self, s: usize) -> (usize, Vec<u32>, Vec<E>) {
        std::mem::replace(&mut self.pieces[s], empty()).into_parts()
    }
    /// Puts back a piece taken with [`PushPull::take_piece`].
    pub(crate) fn put_piece(&mut self, s: usize, (dim, idx, val): (usize, Vec<u32>, Vec<E>)) {
        self.pieces[s] = SparseVec::new_unchecked(dim, idx, val);
    }
}

/// The entries of `v` by owner into `bufs.pieces`, one piece per server of
/// `p`, each in index order.
pub(crate) fn split_by_owner<E: Element, S: Scheme<E>>(
    v: &SparseVec<E>,
    scheme: &S,
    p: usize,
    bufs: &mut PushPull<E>,
) {
    bufs.clear_pieces(p, v.dim());
    let mut taken: Vec<(usize, Vec<u32>, Vec<E>)> = (0..p).map(|s| bufs.take_piece(s)).collect();
    for (i, x) in v.iter() {
        let s = scheme.owner(i);
        taken[s].1.push(i);
        taken[s].2.push(x);
    }
    for (s, piece) in taken.into_iter().enumerate() {
        bufs.put_piece(s, piece);
    }
}

/// Push: in `P - 1` direct steps every rank sends server `s` its entries
/// owned by `s` (`bufs.pieces[s]`); servers sum them in rank order. Pull:
/// in `P - 1` direct steps every server sends its partition result to every
/// rank. Lossless; each partition is summed once, so every rank holds the
/// same result, written into `out` (its allocations reused, as are
/// `bufs`' and the transport's buffers).
pub(crate) fn push_pull_into<T: Transport + ?Sized, E: Element, S: Scheme<E>>(
    t: &mut T,
    dim: usize,
    scheme: &S,
    bufs: &mut PushPull<E>,
    out: &mut Reduced<E>,
) -> Result<()> {
    let (p, r) = (t.size(), t.rank());
    let push = scheme.push();
    bufs.parts.resize_with(p, Default::default);
    let mut recv = t.take_buffer();
    let check_dim = |got: usize, what: &'static str| {
        if got == dim {
            Ok(())
        } else {
            Err(Error::corrupt(
                what,
                format!("dimension {got}, expected {dim}"),
            ))
        }
    };
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        bufs.send.clear();
        push.encode_into(&bufs.pieces[to], &mut bufs.send)?;
        t.exchange_into(to, &bufs.send, from, &mut recv)?;
        let (pi, pv) = &mut bufs.parts[from];
        check_dim(push.decode_into(&recv, pi, pv)?, "push message")?;
        if pi.iter().any(|&i| scheme.owner(i) != r) {
            return Err(Error::corrupt(
                "push message",
                format!("rank {from} pushed an index owned by another server"),
            ));
        }
    }
    // Sum in rank order: rank 0's piece first.
    let (mut mi, mut mv) = take_parts(&mut bufs.mine);
    {
        let views: Vec<PairsView<'_, E>> = (0..p)
            .map(|q| {
                let (i, x) = if q == r {
                    (bufs.pieces[r].indices(), bufs.pieces[r].values())
                } else {
                    (&bufs.parts[q].0[..], &bufs.parts[q].1[..])
                };
                (Cow::Borrowed(i), Cow::Borrowed(x))
            })
            .collect();
        let (si, sv) = &mut bufs.scratch;
        sum_parts(&views, dim, (&mut mi, &mut mv), (si, sv));
    }
    bufs.mine = SparseVec::new_unchecked(dim, mi, mv);
    bufs.pull.clear();
    scheme.pull(r)?.encode_into(&bufs.mine, &mut bufs.pull)?;
    for s in 1..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        t.exchange_into(to, &bufs.pull, from, &mut recv)?;
        let (pi, pv) = &mut bufs.parts[from];
        check_dim(
            scheme.pull(from)?.decode_into(&recv, pi, pv)?,
            "pull message",
        )?;
    }
    // The owner reads its own partition through the pull encoding too, so
    // that every rank sees the same entries (the block encoding, say, does
    // not keep explicit zeros); where the encoding keeps every entry, that
    // is its sum as it is.
    if scheme.pull_keeps() == Keeps::NonZero {
        let (pi, pv) = &mut bufs.parts[r];
        pi.clear();
        pv.clear();
        for (i, x) in bufs.mine.iter().filter(|&(_, x)| x != E::zero()) {
            pi.push(i);
            pv.push(x);
        }
    }
    let (mut ai, mut av) = take_parts(&mut out.result);
    {
        let views: Vec<PairsView<'_, E>> = (0..p)
            .map(|q| {
                let (i, x) = if q == r && scheme.pull_keeps() == Keeps::Every {
                    (bufs.mine.indices(), bufs.mine.values())
                } else {
                    (&bufs.parts[q].0[..], &bufs.parts[q].1[..])
                };
                (Cow::Borrowed(i), Cow::Borrowed(x))
            })
            .collect();
        let (si, sv) = &mut bufs.scratch;
        sum_parts(&views, dim, (&mut ai, &mut av), (si, sv));
    }
    t.give_buffer(recv);
    out.result = SparseVec::new_unchecked(dim, ai, av);
    let (di, dv) = take_parts(&mut out.dropped);
    out.dropped = SparseVec::new_unchecked(dim, di, dv);
    Ok(())
}
