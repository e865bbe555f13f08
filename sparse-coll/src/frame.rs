//! The wire formats of sparse messages: pairs, blocks and streams, read in
//! place where the host and the buffer allow.

use crate::bytes::{from_le, from_le_u32s, le_bytes, le_u32s};
use sparse_core::{Element, Error, Result, SparseVec, Stream};
use std::borrow::Cow;

/// The entries of `v` for which `pick(index, value)` holds, and the rest,
/// each in index order. `pick` is called twice per entry (a count sizes
/// both sides exactly, then a pass without branches fills them), so it
/// must answer from its arguments alone.
pub fn split_where<E: Element>(
    v: &SparseVec<E>,
    pick: impl Fn(u32, E) -> bool,
) -> (SparseVec<E>, SparseVec<E>) {
    let (mut ai, mut av, mut bi, mut bv) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    split_where_into(v, pick, (&mut ai, &mut av), (&mut bi, &mut bv));
    (
        SparseVec::new_unchecked(v.dim(), ai, av),
        SparseVec::new_unchecked(v.dim(), bi, bv),
    )
}

/// [`split_where`] into `yes` and `no` (contents replaced, allocations
/// reused).
pub(crate) fn split_where_into<E: Element>(
    v: &SparseVec<E>,
    pick: impl Fn(u32, E) -> bool,
    (ai, av): (&mut Vec<u32>, &mut Vec<E>),
    (bi, bv): (&mut Vec<u32>, &mut Vec<E>),
) {
    let n = v.nnz();
    let yes = v.iter().filter(|&(i, x)| pick(i, x)).count();
    // Exact sizes plus one spare slot on each side: every entry is written
    // to both and the cursor of its side advances (no branch on `pick`).
    for (i, x, len) in [
        (&mut *ai, &mut *av, yes + 1),
        (&mut *bi, &mut *bv, n - yes + 1),
    ] {
        i.clear();
        i.resize(len, 0);
        x.clear();
        x.resize(len, E::zero());
    }
    let (mut a, mut b) = (0usize, 0usize);
    for (i, x) in v.iter() {
        let take = pick(i, x);
        ai[a] = i;
        av[a] = x;
        bi[b] = i;
        bv[b] = x;
        a += usize::from(take);
        b += usize::from(!take);
    }
    for (i, x, len) in [(ai, av, yes), (bi, bv, n - yes)] {
        i.truncate(len);
        x.truncate(len);
    }
}

/// Appends the pairs of `v` as they travel in every sparse message: its
/// `u32` indices, then its values.
pub fn put_pairs<E: Element>(out: &mut Vec<u8>, v: &SparseVec<E>) {
    out.extend_from_slice(&le_u32s(v.indices()));
    out.extend_from_slice(&le_bytes(v.values()));
}

/// Reads `nnz` pairs written by [`put_pairs`] from exactly `b` into a
/// validated sparse vector of dimension `dim`.
///
/// # Errors
/// [`Error::Corrupt`] (naming `what`) for a wrong length, unsorted or
/// out-of-range indices.
pub fn read_pairs<E: Element>(
    b: &[u8],
    nnz: usize,
    dim: usize,
    what: &'static str,
) -> Result<SparseVec<E>> {
    let (idx, val) = pairs_parts::<E>(b, nnz, what)?;
    SparseVec::new(dim, idx.into_owned(), val.into_owned()).map_err(|e| Error::corrupt(what, e))
}

/// Appends one block: `nnz: u32`, then the pairs.
pub fn put_block<E: Element>(out: &mut Vec<u8>, v: &SparseVec<E>) {
    put_block_parts(out, v.indices(), v.values());
}

/// [`put_block`] of the pairs `(idx, val)`.
pub(crate) fn put_block_parts<E: Element>(out: &mut Vec<u8>, idx: &[u32], val: &[E]) {
    out.reserve(4 + idx.len() * (4 + E::BYTES));
    out.extend_from_slice(&(idx.len() as u32).to_le_bytes());
    out.extend_from_slice(&le_u32s(idx));
    out.extend_from_slice(&le_bytes(val));
}

/// Reads one `nnz: u32, indices, values` block whose indices must lie in
/// `lo..lo + len`.
///
/// # Errors
/// [`Error::Corrupt`] (naming `what`) for a truncated block, a count that
/// overflows, unsorted indices or an index outside the block.
pub fn take_block<E: Element>(
    b: &mut &[u8],
    dim: usize,
    lo: usize,
    len: usize,
    what: &'static str,
) -> Result<SparseVec<E>> {
    let (idx, val) = take_block_view::<E>(b, dim, lo, len, what)?;
    Ok(SparseVec::new_unchecked(
        dim,
        idx.into_owned(),
        val.into_owned(),
    ))
}

/// [`take_block`] read in place ([`pairs_view`]): the block's pairs,
/// validated (strictly increasing indices inside `lo..lo + len`, below
/// `dim`), borrowed from `b` where the host allows.
///
/// # Errors
/// [`Error::Corrupt`] (naming `what`) for a truncated block, a count that
/// overflows, unsorted indices or an index outside the block.
pub(crate) fn take_block_view<'b, E: Element>(
    b: &mut &'b [u8],
    dim: usize,
    lo: usize,
    len: usize,
    what: &'static str,
) -> Result<PairsView<'b, E>> {
    let corrupt = |d: &str| Error::corrupt(what, d);
    let nnz = u32::from_le_bytes(
        b.get(..4)
            .ok_or_else(|| corrupt("truncated"))?
            .try_into()
            .expect("4 bytes"),
    ) as usize;
    let need = 4 + nnz
        .checked_mul(4 + E::BYTES)
        .ok_or_else(|| corrupt("nnz overflow"))?;
    if b.len() < need {
        return Err(corrupt("truncated pairs"));
    }
    let whole: &'b [u8] = b;
    let part = pairs_view::<E>(&whole[4..need], nnz, dim, what)?;
    *b = &whole[need..];
    let (first, last) = (part.0.first(), part.0.last());
    if first.is_some_and(|&i| (i as usize) < lo) || last.is_some_and(|&i| i as usize >= lo + len) {
        return Err(corrupt("index outside its block"));
    }
    Ok(part)
}

/// Bytes of a sparse stream on the wire: a tag byte (0 sparse, 1 dense)
/// and three zero bytes, then for a sparse stream `nnz: u32`, the indices
/// and the values; for a dense one the `dim` values. The header keeps the
/// pairs and values 4-byte aligned wherever the message lies aligned (a
/// receive buffer, a block behind a frame's 4-byte length), so that
/// receivers read them in place rather than copy them out.
pub fn encode_stream<E: Element>(s: &Stream<E>) -> Vec<u8> {
    let mut out = Vec::with_capacity(SPARSE_HEADER + s.payload_bytes());
    match s {
        Stream::Sparse(v) => put_sparse_stream(&mut out, v.indices(), v.values()),
        Stream::Dense(d) => put_dense_stream(&mut out, d),
    }
    out
}

/// Bytes before a sparse stream's pairs: tag, padding, `nnz`.
pub(crate) const SPARSE_HEADER: usize = 8;
/// Bytes before a dense stream's values: tag, padding.
const DENSE_HEADER: usize = 4;

/// The header of a sparse stream of `nnz` pairs, as [`encode_stream`]
/// writes it.
pub(crate) fn sparse_header(nnz: usize) -> [u8; SPARSE_HEADER] {
    let mut h = [0u8; SPARSE_HEADER];
    h[4..].copy_from_slice(&(nnz as u32).to_le_bytes());
    h
}

/// Appends a sparse stream of these pairs as [`encode_stream`] writes it.
pub(crate) fn put_sparse_stream<E: Element>(out: &mut Vec<u8>, indices: &[u32], values: &[E]) {
    out.extend_from_slice(&sparse_header(indices.len()));
    out.extend_from_slice(&le_u32s(indices));
    out.extend_from_slice(&le_bytes(values));
}

/// Appends a dense stream of these values as [`encode_stream`] writes it.
pub(crate) fn put_dense_stream<E: Element>(out: &mut Vec<u8>, values: &[E]) {
    out.extend_from_slice(&[1, 0, 0, 0]);
    out.extend_from_slice(&le_bytes(values));
}

/// Decodes [`encode_stream`]'s bytes for dimension `dim`.
///
/// # Errors
/// [`Error::Corrupt`] for anything else.
pub fn decode_stream<E: Element>(b: &[u8], dim: usize) -> Result<Stream<E>> {
    const WHAT: &str = "stream message";
    Ok(match stream_parts(b, dim, WHAT)? {
        StreamView::Sparse((idx, val)) => Stream::Sparse(
            SparseVec::new(dim, idx.into_owned(), val.into_owned())
                .map_err(|e| Error::corrupt(WHAT, e))?,
        ),
        StreamView::Dense(d) => Stream::Dense(d.into_owned()),
    })
}

/// A stream as a sparse vector (dense streams keep their non-zeros).
///
/// # Errors
/// [`Error::DimensionTooLarge`] (not for valid streams).
pub fn stream_to_sparse<E: Element>(s: Stream<E>) -> Result<SparseVec<E>> {
    match s {
        Stream::Sparse(v) => Ok(v),
        Stream::Dense(d) => SparseVec::from_dense(&d),
    }
}

/// Sparse pairs read in place where possible: indices and values.
pub(crate) type PairsView<'b, E> = (Cow<'b, [u32]>, Cow<'b, [E]>);

/// Parts up to which [`sum_parts`] merges pairwise.
const PAIRWISE_PARTS: usize = 8;

/// The sum of `parts` in their order (rank order) into `sum`, whose
/// contents are replaced; every index below `dim`. Each index's values are
/// added in part order, starting from the first part that holds it (no
/// `0 +`), as merging the parts one after the other
/// ([`merge_sum_into`](sparse_core::sparse::merge_sum_into)) adds them: the
/// result is that sum bit for bit, however it is computed.
///
/// Up to [`PAIRWISE_PARTS`] parts are merged one after the other, with
/// `scratch` as the vectors the merges alternate with. More parts would
/// make that `O(P K)` for `K` entries in all (a thousand ranks'
/// allgather), so they are summed in `O(K log P)` or `O(K + dim / 32)`:
/// where the dimension is at most twice the entries (so that the
/// accumulator takes no more memory than the parts), into a dense
/// accumulator (`scratch`'s values, `dim` long, and a bitmap of the
/// touched coordinates in its indices); else by a heap merge of the parts.
/// `scratch` is left empty; both pairs of vectors keep their allocations.
pub(crate) fn sum_parts<E: Element>(
    parts: &[PairsView<'_, E>],
    dim: usize,
    sum: (&mut Vec<u32>, &mut Vec<E>),
    scratch: (&mut Vec<u32>, &mut Vec<E>),
) {
    use sparse_core::sparse::merge_sum_into;
    let ((ai, av), (bi, bv)) = (sum, scratch);
    ai.clear();
    av.clear();
    let total: usize = parts.iter().map(|p| p.0.len()).sum();
    match parts {
        [] => {}
        [only] => {
            ai.extend_from_slice(&only.0);
            av.extend_from_slice(&only.1);
        }
        _ if parts.len() > PAIRWISE_PARTS && dim <= total.saturating_mul(2) => {
            sum_dense(parts, dim, (ai, av), (bi, bv));
        }
        _ if parts.len() > PAIRWISE_PARTS => sum_heap(parts, total, (ai, av)),
        [first, second, rest @ ..] => {
            merge_sum_into((&first.0, &first.1), (&second.0, &second.1), ai, av);
            for (i, x) in rest {
                merge_sum_into((ai, av), (i, x), bi, bv);
                std::mem::swap(ai, bi);
                std::mem::swap(av, bv);
            }
        }
    }
    bi.clear();
    bv.clear();
}

/// [`sum_parts`] through a dense accumulator `acc` of `dim` values and a
/// bitmap `seen` of the coordinates written (32 per word).
fn sum_dense<E: Element>(
    parts: &[PairsView<'_, E>],
    dim: usize,
    (ai, av): (&mut Vec<u32>, &mut Vec<E>),
    (seen, acc): (&mut Vec<u32>, &mut Vec<E>),
) {
    seen.clear();
    seen.resize(dim.div_ceil(32), 0);
    acc.clear();
    acc.resize(dim, E::zero());
    for (is, vs) in parts {
        for (&i, &x) in is.iter().zip(vs.iter()) {
            let (w, bit) = (i as usize / 32, 1u32 << (i % 32));
            let slot = &mut acc[i as usize];
            // The first value is taken as it is (0 + -0 would be +0).
            *slot = if seen[w] & bit == 0 { x } else { *slot + x };
            seen[w] |= bit;
        }
    }
    for (w, &word) in seen.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let i = w * 32 + bits.trailing_zeros() as usize;
            ai.push(i as u32);
            av.push(acc[i]);
            bits &= bits - 1;
        }
    }
}

/// [`sum_parts`] by a heap merge: the parts' next indices in a heap keyed
/// by (index, part), so each index's values come out in part order.
fn sum_heap<E: Element>(
    parts: &[PairsView<'_, E>],
    total: usize,
    (ai, av): (&mut Vec<u32>, &mut Vec<E>),
) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    ai.reserve(total);
    av.reserve(total);
    let mut at = vec![0usize; parts.len()];
    let mut heap: BinaryHeap<Reverse<(u32, usize)>> = parts
        .iter()
        .enumerate()
        .filter_map(|(q, p)| p.0.first().map(|&i| Reverse((i, q))))
        .collect();
    while let Some(Reverse((i, q))) = heap.pop() {
        let x = parts[q].1[at[q]];
        if ai.last() == Some(&i) {
            let last = av.len() - 1;
            av[last] = av[last] + x;
        } else {
            ai.push(i);
            av.push(x);
        }
        at[q] += 1;
        if let Some(&next) = parts[q].0.get(at[q]) {
            heap.push(Reverse((next, q)));
        }
    }
}

/// The sum of `vs` in their order ([`sum_parts`]: `O(K log P)` or
/// `O(K + dim / 32)` for many parts, not `P` merges of a growing sum).
pub(crate) fn sum_all<'a, E: Element>(
    vs: impl Iterator<Item = &'a SparseVec<E>>,
    dim: usize,
) -> SparseVec<E> {
    let views: Vec<PairsView<'_, E>> = vs
        .map(|v| (Cow::Borrowed(v.indices()), Cow::Borrowed(v.values())))
        .collect();
    let (mut ai, mut av, mut bi, mut bv) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    sum_parts(&views, dim, (&mut ai, &mut av), (&mut bi, &mut bv));
    SparseVec::new_unchecked(dim, ai, av)
}

/// Appends `indices`, each less `base`, as [`le_u32s`] writes indices:
/// the re-indexed pairs of a partition starting at `base`.
///
/// # Panics
/// If an index is below `base`.
pub(crate) fn put_rebased(out: &mut Vec<u8>, indices: &[u32], base: u32) {
    assert!(
        indices.first().is_none_or(|&i| i >= base),
        "put_rebased: an index below the base"
    );
    let at = out.len();
    out.resize(at + 4 * indices.len(), 0);
    for (w, &i) in out[at..].chunks_exact_mut(4).zip(indices) {
        w.copy_from_slice(&(i - base).to_le_bytes());
    }
}

/// The `nnz` pairs [`put_pairs`] wrote into exactly `b`, read as
/// [`from_le`] reads, not validated.
fn pairs_parts<'b, E: Element>(
    b: &'b [u8],
    nnz: usize,
    what: &'static str,
) -> Result<PairsView<'b, E>> {
    if nnz.checked_mul(4 + E::BYTES) != Some(b.len()) {
        return Err(Error::corrupt(
            what,
            format!("{} bytes for {nnz} pairs", b.len()),
        ));
    }
    let (idx, val) = b.split_at(4 * nnz);
    Ok((from_le_u32s(idx), from_le(val)))
}

/// [`read_pairs`] without building a vector: the pairs of `b` read in
/// place where possible ([`from_le`]), the indices validated (strictly
/// increasing, below `dim`).
///
/// # Errors
/// [`Error::Corrupt`] (naming `what`) for a wrong length, unsorted or
/// out-of-range indices.
pub(crate) fn pairs_view<'b, E: Element>(
    b: &'b [u8],
    nnz: usize,
    dim: usize,
    what: &'static str,
) -> Result<PairsView<'b, E>> {
    let pairs = pairs_parts(b, nnz, what)?;
    sparse_core::sparse::check_indices(dim, &pairs.0).map_err(|e| Error::corrupt(what, e))?;
    Ok(pairs)
}

/// A stream message ([`encode_stream`]'s layout) read in place.
pub(crate) enum StreamView<'b, E: Element> {
    /// Sparse pairs.
    Sparse(PairsView<'b, E>),
    /// Dense values.
    Dense(Cow<'b, [E]>),
}

/// The stream message `b` of dimension `dim`, its pairs not validated.
fn stream_parts<'b, E: Element>(
    b: &'b [u8],
    dim: usize,
    what: &'static str,
) -> Result<StreamView<'b, E>> {
    let corrupt = |d: &str| Error::corrupt(what, d);
    if b.get(1..DENSE_HEADER).is_some_and(|pad| pad != [0, 0, 0]) {
        return Err(corrupt("non-zero header padding"));
    }
    match b.first() {
        Some(0) => {
            let nnz = b
                .get(DENSE_HEADER..SPARSE_HEADER)
                .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
                .ok_or_else(|| corrupt("truncated"))?;
            Ok(StreamView::Sparse(pairs_parts(
                &b[SPARSE_HEADER..],
                nnz,
                what,
            )?))
        }
        Some(1)
            if dim
                .checked_mul(E::BYTES)
                .and_then(|n| n.checked_add(DENSE_HEADER))
                == Some(b.len()) =>
        {
            Ok(StreamView::Dense(from_le(&b[DENSE_HEADER..])))
        }
        Some(1) => Err(corrupt("dense length")),
        _ => Err(corrupt("bad tag")),
    }
}

/// [`decode_stream`] read in place where possible, the indices validated
/// as [`pairs_view`] does.
///
/// # Errors
/// [`Error::Corrupt`] (naming `what`) for anything but a valid stream of
/// dimension `dim`.
pub(crate) fn stream_view<'b, E: Element>(
    b: &'b [u8],
    dim: usize,
    what: &'static str,
) -> Result<StreamView<'b, E>> {
    let view = stream_parts(b, dim, what)?;
    if let StreamView::Sparse((idx, _)) = &view {
        sparse_core::sparse::check_indices(dim, &idx[..]).map_err(|e| Error::corrupt(what, e))?;
    }
    Ok(view)
}

/// Takes the vectors of a [`SparseVec`] kept across calls, leaving an
/// empty one: their allocations are reused for the next result.
pub(crate) fn take_parts<E: Element>(v: &mut SparseVec<E>) -> (Vec<u32>, Vec<E>) {
    let (_, mut i, mut x) =
        std::mem::replace(v, SparseVec::new_unchecked(0, Vec::new(), Vec::new())).into_parts();
    i.clear();
    x.clear();
    (i, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way `sum_parts` sums (pairwise, dense accumulator, heap)
    /// gives the sequential merge's sum bit for bit: negative zeros kept,
    /// each index's values added in part order.
    #[test]
    fn sum_parts_equals_the_sequential_merge_on_every_path() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for (parts, dim, per) in [(3, 100, 20), (20, 200, 30), (40, 1 << 16, 50), (9, 64, 0)] {
            let vs: Vec<SparseVec<f32>> = (0..parts)
                .map(|_| {
                    let mut idx: Vec<u32> =
                        (0..per).map(|_| rng.random_range(0..dim as u32)).collect();
                    idx.sort_unstable();
                    idx.dedup();
                    let val = idx
                        .iter()
                        .map(|_| match rng.random_range(0..4) {
                            0 => -0.0,
                            1 => 1e8,
                            _ => rng.random_range(-1.0f32..1.0),
                        })
                        .collect();
                    SparseVec::new(dim, idx, val).unwrap()
                })
                .collect();
            let want = vs
                .iter()
                .skip(1)
                .fold(vs[0].clone(), |acc, v| acc.merge_sum(v).unwrap());
            let views: Vec<PairsView<'_, f32>> = vs
                .iter()
                .map(|v| (Cow::Borrowed(v.indices()), Cow::Borrowed(v.values())))
                .collect();
            let (mut ai, mut av, mut bi, mut bv) = (vec![9], vec![9.0], vec![], vec![]);
            sum_parts(&views, dim, (&mut ai, &mut av), (&mut bi, &mut bv));
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(ai, want.indices(), "{parts} parts of dimension {dim}");
            assert_eq!(
                bits(&av),
                bits(want.values()),
                "{parts} parts of dimension {dim}"
            );
            assert!(bi.is_empty() && bv.is_empty());
        }
    }

    /// Streams round-trip; a received stream's pairs and values are read in
    /// place (borrowed, not copied) from an aligned buffer and from behind a
    /// frame's 4-byte length; malformed headers are `Corrupt`.
    #[test]
    fn streams_round_trip_read_in_place_and_reject_bad_headers() {
        let v = SparseVec::new(64, vec![1, 5, 63], vec![1.5f32, -2.0, 0.25]).unwrap();
        let dense: Vec<f32> = (0..64).map(|i| i as f32).collect();
        for s in [Stream::Sparse(v.clone()), Stream::Dense(dense.clone())] {
            let b = encode_stream(&s);
            assert_eq!(decode_stream::<f32>(&b, 64).unwrap(), s);
            // Aligned in a buffer of u32s, and behind a 4-byte frame length.
            let words: Vec<u32> = vec![0; 1 + b.len().div_ceil(4)];
            let mut framed: Vec<u8> = bytemuck::cast_slice(&words).to_vec();
            framed[4..4 + b.len()].copy_from_slice(&b);
            let aligned: &[u32] = bytemuck::cast_slice(&framed[..framed.len() / 4 * 4]);
            let at = bytemuck::cast_slice::<u32, u8>(aligned);
            for msg in [&b[..], &at[4..4 + b.len()]] {
                if msg.as_ptr().align_offset(4) != 0 {
                    continue; // an allocator may place bytes anywhere
                }
                match stream_view::<f32>(msg, 64, "test").unwrap() {
                    StreamView::Sparse((i, x)) => {
                        assert!(matches!((&i, &x), (Cow::Borrowed(_), Cow::Borrowed(_))));
                        assert_eq!((&i[..], &x[..]), (v.indices(), v.values()));
                    }
                    StreamView::Dense(d) => {
                        assert!(matches!(d, Cow::Borrowed(_)));
                        assert_eq!(&d[..], &dense[..]);
                    }
                }
            }
        }
        let good = encode_stream(&Stream::Sparse(v));
        let mut padded = good.clone();
        padded[2] = 1;
        let mut tag = good.clone();
        tag[0] = 7;
        let dense_short = {
            let mut d = encode_stream(&Stream::Dense(dense));
            d.pop();
            d
        };
        for bad in [
            &padded[..],
            &tag[..],
            &good[..7],
            &good[..good.len() - 1],
            &dense_short[..],
            &[][..],
        ] {
            assert!(
                matches!(decode_stream::<f32>(bad, 64), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
        // A dimension whose dense length overflows is no match either.
        for (bad, dim) in [
            (&[1u8, 0, 0, 0][..], 1usize << 62),
            (&[1, 0, 0, 0, 0, 0, 0, 0][..], usize::MAX / 4 + 2),
        ] {
            assert!(
                matches!(decode_stream::<f32>(bad, dim), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
    }
}
