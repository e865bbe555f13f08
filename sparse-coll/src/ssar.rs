//! SparCML's SSAR_Recursive_double (sec. 5.3.1).

use crate::Transport;
use crate::sparse::{Reduced, agree, decode_stream, encode_stream, stream_to_sparse};
use sparse_core::{Element, Result, SparseVec, Stream};

/// SSAR_Recursive_double: in round `t` ranks `2^(t-1)` apart exchange their
/// partial sums as sparse streams and add them (`lg P` rounds for a power
/// of two). A stream switches to dense past SparCML's delta, so a result
/// that fills in is never larger on the wire than dense. Non-powers of two
/// fold as MPICH does (each extra rank hands its stream to an odd partner
/// and gets the result back). Partners add `a + b` and `b + a`: equal in
/// IEEE arithmetic, so every rank holds a bitwise identical result.
/// Lossless.
///
/// Bytes: each message is a 1-byte tag, `nnz: u32` and the pairs; between
/// `k lg P` pairs (indices fully overlap) and `(P - 1) k` (disjoint) for
/// the busiest rank, SparCML's bounds.
///
/// # Errors
/// [`sparse_core::Error::Disagreement`] if ranks pass different dimensions;
/// transport errors; [`sparse_core::Error::Corrupt`] for malformed messages.
pub fn ssar_recursive_double<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
) -> Result<Reduced<E>> {
    let dim = v.dim();
    agree(
        t,
        &[
            ("algorithm", 2),
            ("dimension", dim as u64),
            ("element", E::CODE as u64),
        ],
    )?;
    let start = t.traffic();
    let (p, r) = (t.size(), t.rank());
    let pp = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let rem = p - pp;
    let mut acc = Stream::from_sparse(v.clone());
    let newrank = if r < 2 * rem {
        (r % 2 == 1).then_some(r / 2)
    } else {
        Some(r - rem)
    };
    let real = |nr: usize| if nr < rem { nr * 2 + 1 } else { nr + rem };
    if r < 2 * rem {
        if r % 2 == 0 {
            t.send(r + 1, &encode_stream(&acc))?;
        } else {
            acc = acc.sum(&decode_stream(&t.recv(r - 1)?, dim)?)?;
        }
    }
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < pp {
            let partner = real(nr ^ mask);
            let got = decode_stream(&t.exchange(partner, &encode_stream(&acc), partner)?, dim)?;
            acc = acc.sum(&got)?;
            mask <<= 1;
        }
    }
    if r < 2 * rem {
        if r % 2 == 1 {
            t.send(r - 1, &encode_stream(&acc))?;
        } else {
            acc = decode_stream(&t.recv(r + 1)?, dim)?;
        }
    }
    Ok(Reduced {
        result: stream_to_sparse(acc)?,
        dropped: SparseVec::zeros(dim)?,
        traffic: t.traffic().since(&start),
    })
}
