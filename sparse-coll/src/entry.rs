//! The sparse-allreduce contract ([`Reduced`]) and the entry round every
//! collective starts with: the agreement of all ranks on the call
//! ([`crate::agree_or_fail`], from `transport/agree.rs`) on the
//! algorithm's identifier ([`entry_id`]), the input and the parameters,
//! whose errors reach every rank alike, and the [`Entered`] only it
//! makes.

use crate::transport::agree::{agree_or_fail, remember};
use crate::{Traffic, Transport};
use sparse_core::{Element, Result, SparseVec};

/// The outcome of a sparse allreduce on one rank.
///
/// - `result` is bitwise identical on every rank;
/// - lossless algorithms return the exact sum and an empty `dropped`;
/// - lossy ones return in `dropped` what this rank must keep (add back to its
///   residual), so that the sum over ranks of the inputs equals `result`
///   plus the sum over ranks of `dropped`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduced<E> {
    /// The reduced vector, identical on every rank.
    pub result: SparseVec<E>,
    /// What this rank keeps as residual.
    pub dropped: SparseVec<E>,
    /// This rank's traffic in the algorithm's body (the entry round
    /// excluded): what the papers' formulas count. Set by
    /// [`crate::SparseAllreduce::allreduce_into`], not by the body.
    pub traffic: Traffic,
    /// This rank's traffic in the call's entry round (its agreement on the
    /// call), set by [`crate::SparseAllreduce::allreduce_into`]: `traffic`
    /// plus `entry` ([`Reduced::total`]) is what the transport counted
    /// during the call. Of calls entered together
    /// ([`crate::allreduce_jointly`]) one carries the joint round and the
    /// others none: their totals add up to what the transport counted.
    pub entry: Traffic,
}

impl<E> Reduced<E> {
    /// Everything the call moved on this rank: the body's traffic and the
    /// entry round's, which together are what the transport counted.
    pub fn total(&self) -> Traffic {
        self.traffic.plus(&self.entry)
    }
    /// Records a call's traffic from the transport's counts `before` its
    /// entry round, at `entered` (after it) and `after` its body: what
    /// [`crate::SparseAllreduce::allreduce_into`] does for every body, so
    /// that no body counts its own.
    pub(crate) fn account(&mut self, before: Traffic, entered: Entered, after: Traffic) {
        self.traffic = after.since(&entered.start);
        self.entry = entered.start.since(&before);
    }
}

impl<E: Element> Default for Reduced<E> {
    /// An empty outcome (dimension 0, no traffic): the starting point of a
    /// `Reduced` kept across [`crate::SparseAllreduce::allreduce_into`]
    /// calls.
    fn default() -> Self {
        Self {
            result: SparseVec::new_unchecked(0, Vec::new(), Vec::new()),
            dropped: SparseVec::new_unchecked(0, Vec::new(), Vec::new()),
            traffic: Traffic::default(),
            entry: Traffic::default(),
        }
    }
}

/// What only an entry round makes ([`crate::wire::enter`]): the proof
/// that every rank passed it, which a collective's body
/// ([`crate::SparseAllreduce::body`]) takes, and the traffic before the
/// body, from which the body counts its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entered {
    start: Traffic,
}

impl Entered {
    /// The traffic before the body: subtract it with [`Traffic::since`].
    pub fn start(&self) -> Traffic {
        self.start
    }
    /// The proof for a body that starts now, once its entry was agreed
    /// (by its own round or a joint one): the traffic from here on is
    /// the body's.
    pub(crate) fn now<T: Transport + ?Sized>(t: &T) -> Self {
        Self { start: t.traffic() }
    }
}

/// The identifier the entry round compares for the algorithm `name`
/// (FNV-1a of the name, its top bit set): derived from the name, so an
/// algorithm's file, a user's included, needs no number of its own; the
/// built-in ones' are checked distinct by a test.
pub fn entry_id(name: &str) -> u64 {
    let id = sparse_core::hash::fnv1a(name.bytes()) | 1 << 63;
    remember(id, name);
    id
}

/// The entry of every sparse allreduce: checks the input `v` (one O(nnz)
/// pass: a vector built with `SparseVec::new_unchecked` from bad parts is
/// caught here; its error comes before `local`'s), then that its values
/// are finite (a NaN or an infinity is [`sparse_core::Error::NonFinite`] on this rank
/// and [`sparse_core::Error::PeerError`] on the others, with the transport usable: one
/// behaviour for every collective, whatever its body would do with it:
/// QSGD cannot quantize it, a sum would spread it), and combines that with
/// `local` (the algorithm's own checks and allocations made before the
/// call), then [`agree_or_fail`] on the
/// algorithm (its [`entry_id`]), the dimension, the element type and the
/// algorithm's `extra` parameters, in that order. Returns the [`Entered`]
/// its body takes.
pub(crate) fn enter<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    name: &str,
    v: &SparseVec<E>,
    extra: &[(&'static str, u64)],
    local: Result<()>,
) -> Result<Entered> {
    let a = admit(name, v, extra, local);
    agree_or_fail(t, &a.fields, a.local)?;
    Ok(Entered::now(t))
}

/// The local half of a call's entry round ([`crate::SparseAllreduce::admit`]):
/// the fields every rank must agree on (the algorithm's
/// [`entry_id`], the dimension, the element type, the algorithm's
/// parameters) and this rank's readiness, with the input checked, made
/// without communicating. [`crate::wire::admit`] makes one; an entry round
/// agrees on it: the call's own ([`Admission::enter`]), or one round for
/// several calls ([`crate::allreduce_jointly`]).
#[derive(Debug)]
pub struct Admission {
    pub(crate) fields: Vec<(&'static str, u64)>,
    pub(crate) local: Result<()>,
}

impl Admission {
    /// The fields the entry round compares, in order.
    pub fn fields(&self) -> &[(&'static str, u64)] {
        &self.fields
    }
    /// This rank's readiness: the input's check and the algorithm's own.
    pub fn local(&self) -> &Result<()> {
        &self.local
    }
    /// The same admission with this rank not ready: `e` in place of its
    /// readiness, so that the call fails at its entry on every rank (this
    /// one with `e`, the others with an [`sparse_core::Error::PeerError`]
    /// naming it) and leaves the transport usable. A composite collective
    /// whose rank learned of a failure elsewhere fails its part's call so.
    #[must_use]
    pub fn failing(self, e: sparse_core::Error) -> Self {
        Self {
            local: Err(e),
            ..self
        }
    }
    /// The call's own entry round: [`agree_or_fail`] on the fields with
    /// this rank's readiness. Returns the [`Entered`] the body takes.
    ///
    /// # Errors
    /// This rank's error; [`sparse_core::Error::PeerError`];
    /// [`sparse_core::Error::Disagreement`]; transport errors.
    pub fn enter(self, t: &mut dyn Transport) -> Result<Entered> {
        agree_or_fail(t, &self.fields, self.local)?;
        Ok(Entered::now(t))
    }
}

/// The admission of a call to the algorithm `name` (see [`enter`]):
/// checks the input `v` (one O(nnz) pass) and that its values are finite,
/// combined with `local`, and lists the fields in the order [`enter`]
/// agrees on them.
pub(crate) fn admit<E: Element>(
    name: &str,
    v: &SparseVec<E>,
    extra: &[(&'static str, u64)],
    local: Result<()>,
) -> Admission {
    let mut fields = vec![
        ("algorithm", entry_id(name)),
        ("dimension", v.dim() as u64),
        ("element", E::CODE as u64),
    ];
    fields.extend_from_slice(extra);
    let finite = sparse_core::backend::check_finite(v.values());
    Admission {
        fields,
        local: v.check().and(finite).and(local),
    }
}
