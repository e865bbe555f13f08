//! Several sparse allreduces with one entry round for all of them
//! ([`allreduce_jointly`]): what a training step with a collective per
//! layer (or per bucket) calls, so that it pays one agreement, not one a
//! call. Each call alone starts with its own round (`ceil(lg P)`
//! latencies of a Bruck allgather), which a step of 161 layers at 1,024
//! ranks would pay 161 times.

use crate::entry::{Admission, Entered, Reduced};
use crate::transport::agree::{agree, agree_or_fail};
use crate::{SparseAllreduce, Transport};
use sparse_core::{Element, Error, Result, SparseVec};

/// One call of [`allreduce_jointly`]: the algorithm, this rank's input and
/// the outcome the call writes (kept across steps, as
/// [`SparseAllreduce::allreduce_into`]'s).
pub struct JointCall<'a, E: Element> {
    /// The algorithm (its state advances as in a call of its own).
    pub alg: &'a mut dyn SparseAllreduce<E>,
    /// This rank's input.
    pub v: &'a SparseVec<E>,
    /// The outcome: contents replaced; where the call fails it holds no
    /// valid result.
    pub out: &'a mut Reduced<E>,
}

impl<'a, E: Element> JointCall<'a, E> {
    /// The calls of boxed algorithms on their inputs, each into its
    /// outcome (by position; as many as the shortest of the three).
    pub fn zip(
        algs: &'a mut [Box<dyn SparseAllreduce<E>>],
        ins: &'a [SparseVec<E>],
        outs: &'a mut [Reduced<E>],
    ) -> Vec<Self> {
        algs.iter_mut()
            .zip(ins)
            .zip(outs)
            .map(|((alg, v), out)| JointCall {
                alg: alg.as_mut(),
                v,
                out,
            })
            .collect()
    }
}

/// Runs `calls` in order, as [`SparseAllreduce::allreduce_into`] one after
/// the other would, with one entry round for them all: every call that
/// admits itself ([`SparseAllreduce::admit`]: every built-in algorithm
/// but the [`crate::Auto`] planner on a profiling call) is checked and
/// agreed in that round, then their bodies run in order; a call that does
/// not admit itself makes its own entry round when its turn comes. Every
/// rank calls it with the same algorithms in the same order, each with its
/// own inputs.
///
/// The joint round compares the number of calls, the number admitted and
/// one word for all their fields and positions (FNV-1a over each call's
/// position, whether it was admitted, and its fields): three words (32
/// bytes a rank with the status word) whatever the number of calls, so
/// that calls admitted at other positions on other ranks, or with other
/// fields, fail on every rank; only where that word differs
/// do the ranks (all of them, as all see it) exchange every field to name
/// the one that differs ([`Error::Disagreement`] about it). Any call's
/// error in its admission (an invalid or non-finite input, the
/// algorithm's own check) reaches every rank in that round, before any
/// body runs: this rank's first error, [`Error::PeerError`] on the
/// others, and the transport stays usable. Each body runs as in a call of
/// its own ([`SparseAllreduce::guarded_body`]): one that fails abandons
/// the transport (or, where every rank failed alike at the same point,
/// [`SparseAllreduce::agreed_body`], leaves it usable), and the calls
/// after it do not run.
///
/// The results equal those of the calls made one by one, bit for bit
/// (the bodies are the same); the rounds are one plus every body's (plus
/// the own entry rounds of calls not admitted) where the calls one by one
/// take one more a call. Each call's `out.traffic` is its body's; the
/// joint round's traffic is in the first admitted call's `out.entry` (the
/// others' is zero; where none was admitted, added to the first call's),
/// so the calls' [`Reduced::total`]s add up to what the transport counted
/// (with no calls at all, the round is made and counted in none). A hash
/// collision of two different sets of fields would pass the round, where
/// separate rounds compare every field: FNV-1a of 64 bits, not an
/// adversary's defence.
///
/// # Errors
/// As [`SparseAllreduce::allreduce_into`]; every rank returns one when any
/// rank fails.
pub fn allreduce_jointly<E: Element>(
    t: &mut dyn Transport,
    calls: &mut [JointCall<'_, E>],
) -> Result<()> {
    let before = t.traffic();
    let admitted: Vec<Option<Admission>> =
        calls.iter_mut().map(|c| c.alg.admit(&*t, c.v)).collect();
    enter_jointly(t, &admitted)?;
    let mut entry = Some(t.traffic().since(&before));
    for (c, a) in calls.iter_mut().zip(&admitted) {
        if a.is_none() {
            c.alg.allreduce_into(t, c.v, c.out)?;
            continue;
        }
        let entered = Entered::now(t);
        c.alg.guarded_body(t, c.v, entered, c.out)?;
        c.out.traffic = t.traffic().since(&entered.start());
        c.out.entry = entry.take().unwrap_or_default();
    }
    // No call admitted (every one entered alone): the joint round's
    // traffic goes to the first call's entry.
    if let (Some(round), Some(first)) = (entry, calls.first_mut()) {
        first.out.entry = first.out.entry.plus(&round);
    }
    Ok(())
}

/// The joint entry round of `admitted` (`None`: a call that enters on
/// its own): the counts and one word for every call's position, admission
/// and fields, with this rank's first admission error; where the word
/// differs, every admitted call's fields exchanged to name the one that
/// differs.
fn enter_jointly(t: &mut dyn Transport, admitted: &[Option<Admission>]) -> Result<()> {
    let mut joined = admitted.iter().flatten();
    let fields: Vec<(&'static str, u64)> = joined
        .clone()
        .flat_map(|a| a.fields().iter().copied())
        .collect();
    let local = joined
        .find_map(|a| a.local().as_ref().err().cloned())
        .map_or(Ok(()), Err);
    // Each call's position, whether it was admitted and its field count
    // go into the word too, so that calls admitted at other positions, or
    // whose fields only run together alike (one call's last field
    // another's first), hash apart.
    let words = admitted.iter().enumerate().flat_map(|(i, a)| {
        let fields = a.as_ref().map_or(&[][..], Admission::fields);
        [i as u64, u64::from(a.is_some()), fields.len() as u64]
            .into_iter()
            .chain(fields.iter().map(|(_, v)| *v))
    });
    let digest = sparse_core::hash::fnv1a(words.flat_map(u64::to_le_bytes));
    let summary = [
        ("calls", admitted.len() as u64),
        ("calls admitted", admitted.iter().flatten().count() as u64),
        ("calls' fields", digest),
    ];
    match agree_or_fail(t, &summary, local) {
        Err(Error::Disagreement {
            what: "calls' fields",
            ..
        }) => {
            // Every rank saw the word differ (the counts agreed), so every
            // rank exchanges its fields here, and the first that differs
            // (or is missing) is named.
            agree(t, &fields)?;
            Err(Error::Disagreement {
                what: "calls' fields",
                detail: "the ranks' calls hash differently".into(),
            })
        }
        other => other,
    }
}
