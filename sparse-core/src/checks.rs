//! Host-side argument checks shared by the backends, the codecs and the
//! collectives: lengths, `k`, segment offsets and finite values. No
//! backend type is involved, so every module may use them without a cycle.

use crate::{Element, Error, Result};

/// Checks segment offsets (increasing from 0 to `len`) and per-segment `ks`.
///
/// # Errors
/// [`Error::InvalidParameter`] or [`Error::KOutOfRange`].
pub fn check_segments(offsets: &[usize], ks: &[usize], len: usize) -> Result<()> {
    if offsets.first() != Some(&0)
        || offsets.last() != Some(&len)
        || offsets.windows(2).any(|w| w[1] < w[0])
    {
        return Err(Error::invalid(
            "offsets",
            format!("must increase from 0 to {len}"),
        ));
    }
    if ks.len() + 1 != offsets.len() {
        return Err(Error::invalid(
            "ks",
            format!("{} ks for {} segments", ks.len(), offsets.len() - 1),
        ));
    }
    for (j, &k) in ks.iter().enumerate() {
        check_k(k, offsets[j + 1] - offsets[j])?;
    }
    Ok(())
}

/// Checks that two lengths that must agree do.
///
/// # Errors
/// [`Error::LengthMismatch`] naming `what`.
pub fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}

/// Checks that every value of `x` is finite.
///
/// # Errors
/// [`Error::NonFinite`] with the index of the first NaN or infinity.
pub fn check_finite<E: Element>(x: &[E]) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(Error::NonFinite { index }),
        None => Ok(()),
    }
}

///
/// # Errors
/// [`Error::KOutOfRange`].
pub fn check_k(k: usize, len: usize) -> Result<()> {
    if k > len {
        Err(Error::KOutOfRange { k, len })
    } else {
        Ok(())
    }
}
