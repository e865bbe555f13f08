//! Spar-Reduce-Scatter (SparDL Sec. 3.1): the reduce-scatter of sparse
//! blocks with bags, for any number of workers, that SparDL and both its
//! SAG variants start with.

use super::{Layout, Mem, empty};
use crate::Transport;
use crate::failure::Failure;
use crate::frame::{put_block, put_block_parts, take_block_view};
use crate::scratch::{add_into, copy_into};
use sparse_core::topk::split_topk_into;
use sparse_core::{Element, Error, Result, SparseVec, abs_key};

/// Spar-Reduce-Scatter (Sec. 3.1) on `t` (a whole world or a team): leaves
/// this worker's block `t.rank()` summed over the workers, not yet cut to
/// its share, in `mem.blocks[t.rank()]`; every cut entry is added to
/// `dropped`.
///
/// Worker `w` keeps block `w` (the preservation bag) and puts the blocks at
/// circular offsets `2^(b-1) .. 2^b` into sending bag `b`, `b = 1 ..= l`,
/// `l = ceil(lg m)` (the last bag holds `m - 2^(l-1)` blocks). At step `i`
/// it sends bag `l - i + 1` to `w + 2^(l-i)` and receives the same bag of
/// `w - 2^(l-i)`, whose blocks it still holds (Thm. 3.1), and adds them in.
/// Every block is cut to its share right before it is sent. Raw values
/// are written straight from the blocks and received blocks are added
/// from the message in place; the blocks live in `mem`, so that a warm
/// call reuses their allocations.
///
/// With a lossy codec, a block the codec cannot carry (a sum that
/// overflowed) fails this worker's local work: it notes the error in
/// `failure` and from then on sends failure frames in place of its bags,
/// as does every worker that receives one ([`Failure`]); the blocks are
/// then no result.
pub(super) fn spar_reduce_scatter<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    lay: &Layout<E>,
    dropped: &mut SparseVec<E>,
    mem: &mut Mem<E>,
    failure: &mut Failure,
) -> Result<()> {
    let (p, w, dim) = (t.size(), t.rank(), lay.dim);
    let raw = lay.values.is_raw();
    let Mem {
        blocks,
        kept,
        cut,
        tmp,
        keys,
        msg,
        ..
    } = mem;
    // Received messages come from the transport's pool and go back to it,
    // as the thread transport passes buffers from rank to rank.
    let mut got = t.take_buffer();
    blocks.truncate(p);
    blocks.resize_with(p, || empty(dim));
    for (j, block) in blocks.iter_mut().enumerate() {
        let (lo, len) = lay.span(j);
        let span = v.span(lo, len);
        copy_into(block, dim, &v.indices()[span.clone()], &v.values()[span]);
    }
    let l = usize::BITS - (p - 1).leading_zeros();
    for i in 1..=l {
        let dist = 1usize << (l - i);
        let bag = dist..(2 * dist).min(p);
        msg.clear();
        for d in bag.clone() {
            let j = (w + d) % p;
            let share = lay.share(j);
            let block = &blocks[j];
            if !raw {
                let split = || {
                    let (kept, cut) = block.split_topk(share);
                    Ok((lay.values.pack(&kept)?, cut))
                };
                // What the codec cannot carry exactly stays here too.
                let Some((packed, cut)) = failure.attempt(w, split) else {
                    break;
                };
                *dropped = dropped.merge_sum(&cut)?.merge_sum(packed.rest())?;
                packed.put(msg);
            } else if block.nnz() <= share {
                put_block(msg, block);
            } else {
                split_topk_into(
                    (block.indices(), block.values()),
                    share,
                    abs_key,
                    (&mut kept.idx, &mut kept.val),
                    (&mut cut.idx, &mut cut.val),
                    keys,
                );
                put_block_parts(msg, &kept.idx, &kept.val);
                add_into(dropped, (&cut.idx, &cut.val), tmp);
            }
        }
        if failure.failed() {
            *msg = failure.frame();
        }
        t.exchange_into((w + dist) % p, msg, (w + p - dist) % p, &mut got)?;
        if !raw && (failure.note(&got, p)? || failure.failed()) {
            continue;
        }
        let mut rest: &[u8] = &got;
        for d in 0..bag.len() {
            let j = (w + d) % p;
            let (lo, len) = lay.span(j);
            if raw {
                let (i, x) = take_block_view::<E>(&mut rest, dim, lo, len, "spardl block")?;
                add_into(&mut blocks[j], (&i, &x), tmp);
            } else {
                let part = lay.values.take(&mut rest, dim, lo, len, "spardl block")?;
                blocks[j] = blocks[j].merge_sum(&part)?;
            }
        }
        if !rest.is_empty() {
            return Err(Error::corrupt("spardl bag", "trailing bytes"));
        }
    }
    t.give_buffer(got);
    Ok(())
}
