//! Failures agreed inside a call's body: a rank whose local work fails
//! part way through a collective of several steps (a lossy codec that
//! cannot carry a partial sum that overflowed, say) sends a failure frame
//! in place of each message it has left to send, and a rank that receives
//! one relays it in its own later messages. Every rank still sends and
//! receives every message of the call, so the call fails on every rank
//! with nothing left unread and the transport usable: the next call works.
//!
//! A frame carries the lowest failing rank its sender knows of and that
//! rank's error text, so where the call's messages reach every rank from
//! every rank (an allreduce's do, by the end), every rank ends knowing the
//! same lowest failing rank. As in the entry round
//! ([`crate::agree_or_fail`]), a rank that failed returns its own error and
//! the others [`Error::PeerError`] naming the lowest failing rank.
//!
//! The frame's hash tells a corrupted message from a frame; it is no
//! authentication: a peer that forges a frame is as able to forge data.

use crate::transport::agree::{MAX_ERROR_TEXT, bounded_text};
use sparse_core::hash::fnv1a;
use sparse_core::{Error, Result};

/// The first four bytes of a failure frame. A message of the formats that
/// carry one (a codec's packed block, whose first word is a pair count;
/// a sparse stream, whose first byte is a tag of 0 or 1 and the next three
/// zero) that begins so would be at least 16 GiB long (`u32::MAX` pairs)
/// or is malformed, so a short message that begins so is a failure frame.
const MARK: [u8; 4] = [0xff; 4];

/// Bytes before a frame's text: the mark, the rank, the text's length.
const HEAD: usize = 12;

/// Bytes after a frame's text: the FNV-1a hash of everything before it,
/// so that a corrupted message is not taken for a frame (a rank that took
/// one for a failure would fail alone, its transport kept).
const TAIL: usize = 8;

/// What a rank knows of a call's failure so far.
#[derive(Debug, Default)]
pub(crate) struct Failure {
    /// The lowest failing rank known and its error's text.
    lowest: Option<(usize, String)>,
    /// This rank's own error, where its local work failed.
    own: Option<Error>,
}

impl Failure {
    /// Whether this rank knows of a failure (its own or a peer's): its
    /// later messages are then [`Failure::frame`]s.
    pub(crate) fn failed(&self) -> bool {
        self.lowest.is_some()
    }

    /// This rank's (`rank`'s) local work failed with `e`; the first such
    /// error is kept.
    pub(crate) fn fail(&mut self, rank: usize, e: Error) {
        if self.own.is_some() {
            return;
        }
        self.peer(rank, format!("failed part way through the call: {e}"));
        self.own = Some(e);
    }

    /// Rank `rank` failed, as `text` says (cut to [`MAX_ERROR_TEXT`]
    /// bytes): noted where it is the lowest known.
    pub(crate) fn peer(&mut self, rank: usize, text: String) {
        if self.lowest.as_ref().is_none_or(|(r, _)| rank < *r) {
            self.lowest = Some((rank, bounded_text(&text).to_string()));
        }
    }

    /// This rank's own error, where its local work failed (kept; see
    /// [`Failure::outcome`]).
    pub(crate) fn own(&self) -> Option<&Error> {
        self.own.as_ref()
    }

    /// `work`, local work that may fail, run only while no failure is
    /// known: its value, or `None` where a failure was known already or
    /// `work` failed (its error kept as this rank's, named `rank`).
    pub(crate) fn attempt<R>(
        &mut self,
        rank: usize,
        work: impl FnOnce() -> Result<R>,
    ) -> Option<R> {
        if self.failed() {
            return None;
        }
        match work() {
            Ok(x) => Some(x),
            Err(e) => {
                self.fail(rank, e);
                None
            }
        }
    }

    /// The outcome of an entry round that carried this rank's failure
    /// ([`crate::Admission::failing`]): `Ok` where it failed, as it must,
    /// alike on every rank; the round's transport error; an error where
    /// it passed.
    pub(crate) fn failed_entry<R>(round: Result<R>) -> Result<()> {
        match round {
            Err(e) if Self::is_agreed(&e) => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Err(Error::invalid(
                "entry",
                "an entry round carrying a failure succeeded",
            )),
        }
    }

    /// What this rank knows, as an error to hand on (a part's entry round
    /// carries it, [`crate::Admission::failing`]): its own error's text or
    /// the lowest failing rank's, as an [`Error::PeerError`] naming that
    /// rank; `None` where it knows of no failure.
    pub(crate) fn error(&self) -> Option<Error> {
        self.lowest.as_ref().map(|(rank, detail)| Error::PeerError {
            rank: *rank,
            detail: detail.clone(),
        })
    }

    /// The frame this rank sends in place of a message once it failed:
    /// the lowest failing rank it knows and that rank's text.
    pub(crate) fn frame(&self) -> Vec<u8> {
        let (rank, text) = self.lowest.as_ref().map_or((0, ""), |(r, s)| (*r, s));
        let text = text.as_bytes();
        let mut out = Vec::with_capacity(HEAD + text.len() + TAIL);
        out.extend_from_slice(&MARK);
        out.extend_from_slice(&(rank as u32).to_le_bytes());
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text);
        let hash = fnv1a(out.iter().copied());
        out.extend_from_slice(&hash.to_le_bytes());
        out
    }

    /// Whether a received message `b` of a call on `p` ranks is a failure
    /// frame; if it is, what it says is noted.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a frame that names no rank of `p`, whose
    /// text is not of its length or whose hash is wrong.
    pub(crate) fn note(&mut self, b: &[u8], p: usize) -> Result<bool> {
        // A frame's text is at most `MAX_ERROR_TEXT` bytes (`Failure::peer`).
        if b.len() < HEAD + TAIL || b.len() > HEAD + MAX_ERROR_TEXT + TAIL || b[..4] != MARK {
            return Ok(false);
        }
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
        let (rank, len) = (word(4), word(8));
        let body = b.len() - TAIL;
        let hash = u64::from_le_bytes(b[body..].try_into().expect("8 bytes"));
        let right = hash == fnv1a(b[..body].iter().copied());
        if rank >= p || len != body - HEAD || !right {
            return Err(Error::corrupt(
                "failure frame",
                format!(
                    "rank {rank} of {p}, {len} bytes of text in {}, hash {}",
                    body - HEAD,
                    if right { "right" } else { "wrong" }
                ),
            ));
        }
        self.peer(rank, String::from_utf8_lossy(&b[HEAD..body]).into_owned());
        Ok(true)
    }

    /// Whether `e`, returned by a collective's call, is one that every rank
    /// of the call reached alike with the transport usable (an entry
    /// round's refusal, an agreed failure of a body), rather than a
    /// transport's own failure (a timeout, a lost or panicked peer, a
    /// corrupt message, an injected fault), after which peers may still
    /// wait on this rank.
    pub(crate) fn is_agreed(e: &Error) -> bool {
        !matches!(
            e,
            Error::Timeout { .. }
                | Error::PeerFailed { .. }
                | Error::Injected { .. }
                | Error::NoSuchRank { .. }
                | Error::Panicked { .. }
                | Error::Transport { .. }
                | Error::Corrupt { .. }
        )
    }

    /// The call's outcome on this rank once every message is in: `Ok`
    /// where no failure is known; this rank's own error where it failed;
    /// else [`Error::PeerError`] naming the lowest failing rank.
    pub(crate) fn outcome(self) -> Result<()> {
        match (self.own, self.lowest) {
            (Some(e), _) => Err(e),
            (None, Some((rank, detail))) => Err(Error::PeerError { rank, detail }),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_says_the_lowest_rank_and_its_text() {
        let mut a = Failure::default();
        assert!(!a.failed());
        a.fail(3, Error::NonFinite { index: 7 });
        let mut b = Failure::default();
        assert!(b.note(&a.frame(), 4).unwrap());
        assert!(b.failed());
        // A higher rank's frame does not replace the lower one.
        let mut c = Failure::default();
        c.fail(2, Error::invalid("x", "y"));
        let mut d = Failure::default();
        assert!(d.note(&c.frame(), 4).unwrap());
        assert!(d.note(&b.frame(), 4).unwrap());
        match d.outcome() {
            Err(Error::PeerError { rank: 2, detail }) => {
                assert!(
                    detail.starts_with("failed part way through the call: "),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
        match b.outcome() {
            Err(Error::PeerError { rank: 3, detail }) => {
                assert!(detail.contains("index 7"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // A rank that failed itself returns its own error.
        c.note(&a.frame(), 4).unwrap();
        assert!(matches!(c.outcome(), Err(Error::InvalidParameter { .. })));
        assert!(Failure::default().outcome().is_ok());
    }

    #[test]
    fn other_messages_are_not_frames_and_bad_frames_are_corrupt() {
        let mut f = Failure::default();
        // A sparse stream's header, a codec block of 3 pairs, nothing.
        assert!(!f.note(&[0, 0, 0, 0, 3, 0, 0, 0], 2).unwrap());
        assert!(!f.note(&[3, 0, 0, 0, 1, 0, 0, 0, 9, 9, 9, 9], 2).unwrap());
        assert!(!f.note(&[], 2).unwrap());
        assert!(!f.failed());
        let mut a = Failure::default();
        a.fail(1, Error::NonFinite { index: 0 });
        let frame = a.frame();
        assert!(matches!(f.note(&frame, 1), Err(Error::Corrupt { .. })));
        let mut short = frame.clone();
        short.remove(HEAD);
        assert!(matches!(f.note(&short, 2), Err(Error::Corrupt { .. })));
        // Any byte changed after the mark: corrupt, never a frame.
        for i in 4..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 0x10;
            assert!(
                matches!(f.note(&bad, 2), Err(Error::Corrupt { .. })),
                "byte {i}"
            );
        }
        assert!(!f.failed());
        // A long message that begins with the mark is not a frame.
        let mut long = frame;
        long.resize(HEAD + MAX_ERROR_TEXT + TAIL + 1, 0);
        assert!(!f.note(&long, 2).unwrap());
        // Text is cut to its bound.
        let mut big = Failure::default();
        big.fail(0, Error::invalid("x", "é".repeat(2000)));
        let frame = big.frame();
        assert!(frame.len() <= HEAD + MAX_ERROR_TEXT + TAIL);
        let mut g = Failure::default();
        assert!(g.note(&frame, 1).unwrap());
    }
}
