//! The sparse-allreduce contract ([`Reduced`]) and the entry round every
//! collective starts with: the agreement of all ranks on the call
//! ([`agree`], [`agree_or_fail`]), whose errors reach every rank alike, and
//! the [`Entered`] only it makes.

use crate::dense::bruck_allgather;
use crate::{Traffic, Transport};
use sparse_core::{Element, Error, Result, SparseVec};

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
    /// excluded): what the papers' formulas count.
    pub traffic: Traffic,
    /// This rank's traffic in the call's entry round (its agreement on the
    /// call), set by [`crate::SparseAllreduce::allreduce_into`]: `traffic`
    /// plus `entry` ([`Reduced::total`]) is what the transport counted
    /// during the call.
    pub entry: Traffic,
}

impl<E> Reduced<E> {
    /// Everything the call moved on this rank: the body's traffic and the
    /// entry round's, which together are what the transport counted.
    pub fn total(&self) -> Traffic {
        self.traffic.plus(&self.entry)
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

/// The names behind the ids this process made ([`entry_id`]), so that a
/// disagreement prints `rank 0: topk_a, rank 1: spardl`, not two
/// numbers. A rank knows the names it built or registered (every
/// [`crate::Registry`] registers its entries' names); a value it never
/// made prints as a number.
fn names() -> &'static std::sync::Mutex<std::collections::HashMap<u64, String>> {
    static NAMES: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u64, String>>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(Default::default)
}

pub(crate) fn remember(id: u64, name: &str) {
    if let Ok(mut m) = names().lock()
        && !m.contains_key(&id)
    {
        m.insert(id, name.to_string());
    }
}

/// A field's value as a disagreement prints it: the name behind an id
/// this process made, else the number.
fn describe(value: Option<u64>) -> String {
    match value {
        None => "(missing)".into(),
        Some(v) => names()
            .lock()
            .ok()
            .and_then(|m| m.get(&v).cloned())
            .unwrap_or_else(|| v.to_string()),
    }
}

/// Checks that every rank calls the same collective with the same
/// parameters (`fields`: name and value). Every rank learns every rank's
/// values (a Bruck allgather of a few bytes), so all ranks return the same
/// [`Error::Disagreement`] instead of some hanging in mismatched steps.
///
/// # Errors
/// [`Error::Disagreement`]; transport errors.
pub fn agree<T: Transport + ?Sized>(t: &mut T, fields: &[(&'static str, u64)]) -> Result<()> {
    agree_or_fail(t, fields, Ok(()))
}

/// [`agree`], with this rank's own readiness: a rank that cannot take part
/// (`local` is an error: an invalid input, a refused allocation, bad
/// parameters) says so in the same round, and then every rank returns an
/// error: the failing rank its own, the others [`Error::PeerError`] naming
/// the lowest failing rank, the kind of failure and its error's text (its
/// first 1,024 bytes, told in a second round that only a failure costs).
/// So an error on one rank reaches every rank as an error, never as a hang.
///
/// # Errors
/// `local`'s error; [`Error::PeerError`]; [`Error::Disagreement`];
/// transport errors.
pub fn agree_or_fail<T: Transport + ?Sized>(
    t: &mut T,
    fields: &[(&'static str, u64)],
    local: Result<()>,
) -> Result<()> {
    agree_sharing(t, fields, local, &[]).map(drop)
}

/// [`agree_or_fail`] that also carries `shared`, words every rank may give
/// differently (the same number of them on every rank), in the same round:
/// returns every rank's words, by rank, once the ranks agree.
pub(crate) fn agree_sharing<T: Transport + ?Sized>(
    t: &mut T,
    fields: &[(&'static str, u64)],
    local: Result<()>,
    shared: &[u64],
) -> Result<Vec<Vec<u64>>> {
    let status = local.as_ref().err().map_or(0, failure_code);
    let mut mine = status.to_le_bytes().to_vec();
    mine.extend(fields.iter().flat_map(|(_, v)| v.to_le_bytes()));
    mine.extend(shared.iter().flat_map(|v| v.to_le_bytes()));
    let all = bruck_allgather(t, &mine)?;
    let word = |b: &[u8], i: usize| {
        b.get(8 * i..8 * i + 8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
    };
    let failed = all.iter().enumerate().find_map(|(r, b)| match word(b, 0) {
        Some(0) => None,
        code => Some((r, code.unwrap_or(u64::MAX))),
    });
    // Well-formed entry messages reach every rank the same (the allgather
    // forwards them unchanged), so every rank fails here alike and the
    // transport stays usable; a malformed one may have reached only some
    // ranks, and the others may go on: then this rank abandons.
    let well_formed = all.iter().all(|b| b.len() >= 8 && b.len() % 8 == 0);
    // Every rank knows who failed; in a second round each failing rank
    // tells what (at most `MAX_ERROR_TEXT` bytes), so that every rank's
    // error names what went wrong.
    let text = match failed {
        Some((rank, _)) if well_formed => {
            let said = local.as_ref().err().map(Error::to_string);
            let mine = said
                .as_deref()
                .map_or(&[][..], |s| bounded_text(s).as_bytes());
            let all = bruck_allgather(t, mine)?;
            all.get(rank)
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(MAX_ERROR_TEXT)]).into_owned())
                .unwrap_or_default()
        }
        _ => String::new(),
    };
    let mut fail = |e: Error| {
        if !well_formed {
            t.abandon();
        }
        Err(e)
    };
    if let Some((rank, code)) = failed {
        if let Err(e) = local {
            return fail(e);
        }
        let detail = if text.is_empty() {
            failure_text(code).into()
        } else {
            format!("{}: {text}", failure_text(code))
        };
        return fail(Error::PeerError { rank, detail });
    }
    for (i, (name, _)) in fields.iter().enumerate() {
        let values: Vec<Option<u64>> = all.iter().map(|b| word(b, i + 1)).collect();
        if values.iter().any(|v| *v != values[0]) {
            let detail = values
                .iter()
                .enumerate()
                .map(|(r, v)| format!("rank {r}: {}", describe(*v)))
                .collect::<Vec<_>>()
                .join(", ");
            return fail(Error::Disagreement { what: name, detail });
        }
    }
    if all.iter().any(|b| b.len() != mine.len()) {
        return fail(Error::Disagreement {
            what: "parameter count",
            detail: format!("{:?}", all.iter().map(Vec::len).collect::<Vec<_>>()),
        });
    }
    let first = 1 + fields.len();
    Ok(all
        .iter()
        .map(|b| {
            (first..first + shared.len())
                .map(|i| word(b, i).expect("every message has mine's length"))
                .collect()
        })
        .collect())
}

/// The most bytes of a failing rank's error text that reach the others.
const MAX_ERROR_TEXT: usize = 1024;

/// `s` cut to at most [`MAX_ERROR_TEXT`] bytes, at a character boundary.
fn bounded_text(s: &str) -> &str {
    let mut end = s.len().min(MAX_ERROR_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The kind of a rank's failure as it travels in the entry round.
fn failure_code(e: &Error) -> u64 {
    match e {
        Error::IndexOutOfRange { .. }
        | Error::NotStrictlyIncreasing { .. }
        | Error::LengthMismatch { .. }
        | Error::DimensionTooLarge { .. } => 1,
        Error::OutOfMemory { .. } => 2,
        Error::InvalidParameter { .. } => 3,
        Error::NonFinite { .. } => 5,
        _ => 4,
    }
}

fn failure_text(code: u64) -> &'static str {
    match code {
        1 => {
            "its input is invalid (unsorted, duplicate or out-of-range indices, or a length that does not fit)"
        }
        2 => "out of memory",
        3 => "invalid parameters",
        4 => "an error before the collective started",
        5 => "its input holds a NaN or an infinity",
        _ => "a malformed entry message",
    }
}

/// The entry of every sparse allreduce: checks the input `v` (one O(nnz)
/// pass: a vector built with `SparseVec::new_unchecked` from bad parts is
/// caught here; its error comes before `local`'s), then that its values
/// are finite (a NaN or an infinity is [`Error::NonFinite`] on this rank
/// and [`Error::PeerError`] on the others, with the transport usable: one
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
    let mut fields = vec![
        ("algorithm", entry_id(name)),
        ("dimension", v.dim() as u64),
        ("element", E::CODE as u64),
    ];
    fields.extend_from_slice(extra);
    let finite = sparse_core::backend::check_finite(v.values());
    agree_or_fail(t, &fields, v.check().and(finite).and(local))?;
    Ok(Entered { start: t.traffic() })
}
