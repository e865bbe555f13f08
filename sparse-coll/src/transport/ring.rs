//! The ring allreduce (Patarasuk and Yuan), the default dense allreduce
//! of every [`Transport`] ([`Transport::allreduce_sum_f32_into`]); public
//! as `sparse_coll::dense::ring_allreduce`.

use super::Transport;
use crate::bytes::{add_le_into, copy_le_into, le_bytes};
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Element, Result};

/// Ring allreduce (Patarasuk and Yuan): a reduce-scatter and an allgather of
/// `P - 1` steps each over `P` even chunks: `2 (P - 1)` rounds, each rank
/// sends and receives `2 (P - 1) / P n` elements when `P` divides `n`.
///
/// # Errors
/// Transport errors; [`sparse_core::Error::Corrupt`] if a peer sends a wrong length.
pub fn ring_allreduce<T: Transport + ?Sized, E: Element>(t: &mut T, x: &[E]) -> Result<Vec<E>> {
    let mut out = Vec::new();
    ring_allreduce_into(t, x, &mut out)?;
    Ok(out)
}

/// [`ring_allreduce`] into `out` (its contents replaced, its allocation
/// reused), receiving into a buffer of the transport's pool
/// ([`Transport::take_buffer`]): called again on vectors of the same
/// length it allocates nothing.
///
/// # Errors
/// As [`ring_allreduce`].
pub fn ring_allreduce_into<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    x: &[E],
    out: &mut Vec<E>,
) -> Result<()> {
    super::guard(t, |t| {
        let (p, r, n) = (t.size(), t.rank(), x.len());
        out.clear();
        out.extend_from_slice(x);
        if p == 1 {
            return Ok(());
        }
        let buf = &mut out[..];
        let chunk = |c: usize| even_start(c, n, p)..even_start(c, n, p) + even_len(c, n, p);
        let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
        let mut got = t.take_buffer();
        let mut steps = || -> Result<()> {
            for s in 0..p - 1 {
                let (send_c, recv_c) = ((r + p - s) % p, (r + 2 * p - s - 1) % p);
                t.exchange_into(next, &le_bytes(&buf[chunk(send_c)]), prev, &mut got)?;
                add_le_into(&mut buf[chunk(recv_c)], &got)?;
            }
            for s in 0..p - 1 {
                let (send_c, recv_c) = ((r + 1 + p - s) % p, (r + p - s) % p);
                t.exchange_into(next, &le_bytes(&buf[chunk(send_c)]), prev, &mut got)?;
                copy_le_into(&mut buf[chunk(recv_c)], &got)?;
            }
            Ok(())
        };
        let done = steps();
        t.give_buffer(got);
        done
    })
}
