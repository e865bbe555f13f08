//! Fallible allocation of large buffers: a request the allocator refuses is
//! [`Error::OutOfMemory`], never an abort of the process (and so of every
//! rank of an MPI job).

use crate::{Error, Result};

/// An empty vector with room for `n` items.
///
/// # Errors
/// [`Error::OutOfMemory`] naming `what` if the allocator refuses.
pub fn try_with_capacity<T>(n: usize, what: &'static str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom::<T>(n, what))?;
    Ok(v)
}

/// `n` copies of `value`.
///
/// # Errors
/// [`Error::OutOfMemory`] naming `what` if the allocator refuses.
pub fn try_filled<T: Clone>(n: usize, value: T, what: &'static str) -> Result<Vec<T>> {
    let mut v = try_with_capacity(n, what)?;
    v.resize(n, value);
    Ok(v)
}

/// Checks that `bytes` could be allocated now, by reserving and releasing
/// them. A probe, not a promise: it turns a request far beyond the machine
/// into an error up front (before a collective starts, so that every rank
/// can be told), but memory taken by others between the probe and the use
/// can still fail the use.
///
/// # Errors
/// [`Error::OutOfMemory`] naming `what` if the allocator refuses.
pub fn probe(bytes: u64, what: &'static str) -> Result<()> {
    let n = usize::try_from(bytes).map_err(|_| Error::OutOfMemory { what, bytes })?;
    try_with_capacity::<u8>(n, what).map(drop)
}

fn oom<T>(n: usize, what: &'static str) -> Error {
    Error::OutOfMemory {
        what,
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_requests_are_errors() {
        assert!(matches!(
            try_with_capacity::<u64>(usize::MAX / 4, "huge"),
            Err(Error::OutOfMemory { what: "huge", .. })
        ));
        assert!(matches!(
            probe(u64::MAX, "probe"),
            Err(Error::OutOfMemory { .. })
        ));
        assert_eq!(try_filled(3, 7u8, "small").unwrap(), vec![7, 7, 7]);
        probe(1 << 20, "a mebibyte").unwrap();
    }
}
