//! Finite checks of device buffers: one reduction, and the slow path that
//! names the first non-finite element.

use super::{ReduceOps, SelectOps};
use crate::{Element, Error, Result};

/// Checks that every element of a device buffer is finite with one
/// reduction on the backend ([`ReduceOps::max_abs`](super::ReduceOps::max_abs): a NaN fails it, an
/// infinity is its result), so a buffer that passes never leaves the
/// device; only a failing one is looked into ([`first_non_finite`]).
///
/// # Errors
/// [`Error::NonFinite`](crate::Error::NonFinite) with the index of the first element that is NaN
/// or infinite, as [`check_finite`](crate::checks::check_finite) names it on the host; the backend's
/// errors.
pub fn check_finite_buffer<B, E>(b: &B, x: &B::Buffer<E>) -> Result<()>
where
    B: ReduceOps<E> + SelectOps<E> + ?Sized,
    E: Element,
{
    match b.max_abs(x) {
        Ok(m) if m.is_finite() => Ok(()),
        Ok(_) => Err(first_non_finite(b, x)),
        Err(e) => Err(resolve_non_finite(b, x, e)),
    }
}

/// [`check_finite_buffer`] of every buffer of `xs`, in order, with the
/// reductions of all of them answered together
/// ([`ReduceOps::finite_each`]: one round trip on `backend-cuda`); only
/// the first buffer that is not finite is looked into, and its error is
/// [`check_finite_buffer`]'s, so the result is the calls' in order.
///
/// # Errors
/// As [`check_finite_buffer`] for the first buffer that fails it;
/// [`Error::Device`] where the backend's answers disagree (a buffer
/// reported not finite that its own check then passes).
pub fn check_finite_buffers<B, E>(b: &B, xs: &[&B::Buffer<E>]) -> Result<()>
where
    B: ReduceOps<E> + SelectOps<E> + ?Sized,
    E: Element,
{
    let finite = b.finite_each(xs)?;
    let Some(i) = finite.iter().position(|f| !f) else {
        return Ok(());
    };
    check_finite_buffer(b, xs[i])?;
    Err(Error::Device {
        backend: "finite check",
        detail: format!(
            "buffer {i} of {} was reported not finite, and its own check passed it: \
             the backend's reductions disagree",
            xs.len()
        ),
    })
}

/// The [`Error::NonFinite`](crate::Error::NonFinite) naming the first non-finite element of a
/// buffer known to hold one (the slow path of [`check_finite_buffer`]):
/// the backends' NaN check names the first NaN
/// ([`SelectOps::compact_above`](super::SelectOps::compact_above) refuses it), else the compaction of the
/// elements above the largest finite magnitude names the first infinity,
/// so only those indices are read back.
pub fn first_non_finite<B, E>(b: &B, x: &B::Buffer<E>) -> Error
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    match first_infinite(b, x) {
        Ok(Some(index)) => Error::NonFinite { index },
        Ok(None) => Error::Device {
            backend: b.name(),
            detail: "a non-finite value was reported that the buffer does not hold".into(),
        },
        Err(e) => e,
    }
}

/// The first element of `x` above the largest finite magnitude, from
/// the compaction of those elements alone (a NaN is the backend's error).
fn first_infinite<B, E>(b: &B, x: &B::Buffer<E>) -> Result<Option<usize>>
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    let s = b.compact_above(x, E::max_value())?;
    Ok(b.download(&s.indices)?.first().map(|&i| i as usize))
}

/// The error to report for `e`, raised while reading `x`: a
/// [`Error::NonFinite`](crate::Error::NonFinite) from a backend's NaN check names the first NaN,
/// and an infinity before it is the first non-finite element (as
/// [`check_finite`](crate::checks::check_finite) names it on the host), looked for in the prefix on
/// this error path only; any other error is `e`. Selectors wrap their
/// result in it ([`resolve_non_finite_in`]) so that every entry point
/// names the same index.
pub fn resolve_non_finite<B, E>(b: &B, x: &B::Buffer<E>, e: Error) -> Error
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    let Error::NonFinite { index } = e else {
        return e;
    };
    if index == 0 {
        return e;
    }
    let before = b
        .upload(&(0..index as u32).collect::<Vec<u32>>())
        .and_then(|i| b.gather(x, &i))
        .and_then(|prefix| first_infinite(b, &prefix));
    match before {
        Ok(first) => Error::NonFinite {
            index: first.unwrap_or(index),
        },
        Err(e) => e,
    }
}

/// `r` with its error passed through [`resolve_non_finite`].
///
/// # Errors
/// `r`'s error, resolved.
pub fn resolve_non_finite_in<B, E, T>(b: &B, x: &B::Buffer<E>, r: Result<T>) -> Result<T>
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    r.map_err(|e| resolve_non_finite(b, x, e))
}
