//! The agreement round: every rank learns every rank's view of a call
//! (its fields, its readiness) in one Bruck allgather, so that a call that
//! some rank cannot make, or that ranks make differently, fails on every
//! rank alike instead of hanging ([`agree`], [`agree_or_fail`]). Every
//! collective's entry round (`crate::wire::enter`) is one; so is the MPI
//! transport's agreement on its dense allreduce's length, which is why it
//! lives with the transports.

use super::Transport;
use super::allgather::bruck_allgather;
use sparse_core::{Error, Result};

/// The names behind the ids this process made (`crate::wire::entry_id`), so that a
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
pub(crate) const MAX_ERROR_TEXT: usize = 1024;

/// `s` cut to at most [`MAX_ERROR_TEXT`] bytes, at a character boundary.
pub(crate) fn bounded_text(s: &str) -> &str {
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
