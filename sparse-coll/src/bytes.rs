//! Little-endian bytes of elements and indices, the one byte order of
//! every message: the leaf every other module reads and writes through.
//! `le_bytes` and `le_u32s` are public as `sparse_coll::wire::le_bytes`
//! and `sparse_coll::wire::le_u32s`.

use sparse_core::{Element, Error, Result};
use std::borrow::Cow;

/// The little-endian bytes of elements (borrowed on little-endian hosts,
/// converted on others): the one byte order of every message.
pub fn le_bytes<E: Element>(x: &[E]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(x))
    } else {
        let mut out = Vec::with_capacity(x.len() * E::BYTES);
        x.iter().for_each(|v| v.write_le(&mut out));
        Cow::Owned(out)
    }
}

/// The little-endian bytes of indices, as [`le_bytes`].
pub fn le_u32s(x: &[u32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(x))
    } else {
        Cow::Owned(x.iter().flat_map(|i| i.to_le_bytes()).collect())
    }
}

/// The elements of little-endian bytes `b` (a multiple of `E::BYTES`
/// long), as [`le_bytes`] wrote them: borrowed where the host is
/// little-endian and `b` is aligned for `E` (the usual case for a received
/// message: no copy), decoded otherwise.
pub(crate) fn from_le<E: Element>(b: &[u8]) -> Cow<'_, [E]> {
    match bytemuck::try_cast_slice::<u8, E>(b) {
        Ok(x) if cfg!(target_endian = "little") => Cow::Borrowed(x),
        _ => Cow::Owned(b.chunks_exact(E::BYTES).map(E::read_le).collect()),
    }
}

/// The indices of little-endian bytes `b`, as [`from_le`].
pub(crate) fn from_le_u32s(b: &[u8]) -> Cow<'_, [u32]> {
    match bytemuck::try_cast_slice::<u8, u32>(b) {
        Ok(x) if cfg!(target_endian = "little") => Cow::Borrowed(x),
        _ => Cow::Owned(
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        ),
    }
}

/// The `expected` little-endian elements of `b`, read in place where the
/// host is little-endian and `b` is aligned for `E` (a received message
/// always is, in practice), so no copy of the message is made.
///
/// # Errors
/// [`Error::Corrupt`] if `b` does not hold `expected` elements.
pub(crate) fn le_elements<E: Element>(b: &[u8], expected: usize) -> Result<Cow<'_, [E]>> {
    if b.len() != expected * E::BYTES {
        return Err(Error::corrupt(
            "dense message",
            format!(
                "{} bytes, expected {} elements of {}",
                b.len(),
                expected,
                E::NAME
            ),
        ));
    }
    Ok(from_le(b))
}

/// `acc[i] += y_i` for the little-endian elements `y` of `b`.
///
/// # Errors
/// [`Error::Corrupt`] if `b` does not hold `acc.len()` elements.
pub(crate) fn add_le_into<E: Element>(acc: &mut [E], b: &[u8]) -> Result<()> {
    add_into(acc, &le_elements(b, acc.len())?);
    Ok(())
}

/// `dst[i] = y_i` for the little-endian elements of `b`.
///
/// # Errors
/// [`Error::Corrupt`] if `b` does not hold `dst.len()` elements.
pub(crate) fn copy_le_into<E: Element>(dst: &mut [E], b: &[u8]) -> Result<()> {
    dst.copy_from_slice(&le_elements(b, dst.len())?);
    Ok(())
}

pub(crate) fn add_into<E: Element>(acc: &mut [E], other: &[E]) {
    for (a, &b) in acc.iter_mut().zip(other) {
        *a = *a + b;
    }
}
