//! A step's calls, shared by the whole step and the pipelined one: a
//! bucket's input (its layers' selections laid end to end) and its result
//! split back into each layer's, a bucket's selections cut to a shared
//! budget, the reduce call of a bucket and the dense groups' allreduces.

use super::work::{Outgoing, Received};
use crate::trainer::{Bucket, Layer, Part};
use sparse_coll::{Reduced, Transport};
use sparse_core::{Backend, Result, SparseVec};

/// The selections of a bucket's layers laid end to end (list order) in
/// one vector of the bucket's `len`.
fn join(sents: &[&SparseVec<f32>], len: usize) -> Result<SparseVec<f32>> {
    let nnz = sents.iter().map(|v| v.nnz()).sum();
    let (mut idx, mut val) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    let mut at = 0u32;
    for v in sents {
        idx.extend(v.indices().iter().map(|&i| i + at));
        val.extend_from_slice(v.values());
        at += v.dim() as u32;
    }
    SparseVec::new(len, idx, val)
}

/// The part of a bucket's reduced vector `v` (of the bucket's `len`) that
/// falls in `at..at + n`, as a vector of dimension `n`. A vector of
/// another dimension than the bucket's comes back as it is, for the
/// check of every result to name it.
pub(crate) fn cut(v: &SparseVec<f32>, at: usize, n: usize, len: usize) -> SparseVec<f32> {
    if v.dim() != len {
        return v.clone();
    }
    let span = v.span(at, n);
    SparseVec::new_unchecked(
        n,
        v.indices()[span.clone()]
            .iter()
            .map(|&i| i - at as u32)
            .collect(),
        v.values()[span].to_vec(),
    )
}

/// A bucket's layers' selections cut to the bucket's `k` largest
/// candidates ([`crate::bucket::global_cut`]); what a layer does not keep
/// stays in its memory (its selection's indices are what it keeps).
pub(super) fn cut_bucket<B: Backend<f32>>(
    b: &B,
    outs: &mut [&mut Outgoing<B>],
    k: usize,
) -> Result<()> {
    let candidates: Vec<(&[u32], &[f32])> = outs
        .iter()
        .map(|o| (o.sent.indices(), o.sent.values()))
        .collect();
    let kept = crate::bucket::global_cut(&candidates, k);
    for (out, kept) in outs.iter_mut().zip(kept) {
        if kept.len() == out.sent.nnz() {
            continue;
        }
        let values: Vec<f32> = kept
            .iter()
            .map(|i| {
                let at = out.sent.indices().binary_search(i).expect("a candidate");
                out.sent.values()[at]
            })
            .collect();
        out.indices = Some(b.upload(&kept)?);
        out.sent = SparseVec::new(out.sent.dim(), kept, values)?;
    }
    Ok(())
}

/// A bucket's collective call on its layers' selections `sents` (list
/// order, [`bucket_input`]), the result and dropped entries cut back into
/// each layer's ([`split_result`]): the pipelined step's call, each
/// bucket's with its own entry round.
pub(super) fn reduce_call(
    t: &mut dyn Transport,
    bucket: &mut Bucket,
    dims: &[usize],
    sents: &[&SparseVec<f32>],
) -> Result<Vec<Reduced<f32>>> {
    let input = sparse_coll::guard(t, |_| bucket_input(sents, bucket))?;
    let red = bucket.comm.allreduce(t, &input)?;
    Ok(split_result(red, bucket, dims))
}

/// A dense group's fused allreduce of `fused` (the gradients of its
/// `layers`, of lengths `dims[l]`, laid end to end), each layer's share of
/// the sum kept in `received`: both step paths' dense call.
pub(super) fn dense_call<B: Backend<f32>>(
    t: &mut dyn Transport,
    layers: &[usize],
    dims: &[usize],
    fused: &[f32],
    received: &mut [Option<Received<B>>],
) -> Result<()> {
    let sum = t.allreduce_sum_f32(fused)?;
    let mut at = 0;
    for &l in layers {
        received[l] = Some(Received::Dense(sum[at..at + dims[l]].to_vec()));
        at += dims[l];
    }
    Ok(())
}

/// What a bucket's call sends: a single layer's selection as it is,
/// several laid end to end in one vector of the bucket's length, or (no
/// selections: this rank's local work failed) an empty vector of that
/// length.
pub(super) fn bucket_input(sents: &[&SparseVec<f32>], bucket: &Bucket) -> Result<SparseVec<f32>> {
    match sents {
        [] => SparseVec::zeros(bucket.len),
        [one] => Ok((*one).clone()),
        _ => join(sents, bucket.len),
    }
}

/// A bucket call's outcome cut back into each of its layers' (list
/// order; `dims`: every layer's length, by position); a single layer's as
/// it is.
pub(super) fn split_result(
    red: Reduced<f32>,
    bucket: &Bucket,
    dims: &[usize],
) -> Vec<Reduced<f32>> {
    if let [_] = bucket.layers[..] {
        return vec![red];
    }
    let mut at = 0;
    bucket
        .layers
        .iter()
        .map(|&m| {
            let len = dims[m];
            let part = Reduced {
                result: cut(&red.result, at, len, bucket.len),
                dropped: cut(&red.dropped, at, len, bucket.len),
                ..Reduced::default()
            };
            at += len;
            part
        })
        .collect()
}

/// The dense layers of `layers` in the groups their allreduces fuse
/// ([`Config::fuse`]): consecutive dense layers until a group holds
/// `fusion` bytes or a compressed layer comes.
pub(super) fn dense_groups<B: Backend<f32>, S>(
    layers: &[Layer<B, S>],
    fusion: usize,
) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let (mut open, mut bytes) = (Vec::new(), 0usize);
    for (l, layer) in layers.iter().enumerate() {
        if let Part::Dense { .. } = layer.part {
            open.push(l);
            bytes += 4 * layer.spec.len;
        }
        let next_compressed = layers
            .get(l + 1)
            .is_some_and(|x| matches!(x.part, Part::Compressed(_)));
        if !open.is_empty() && (bytes >= fusion || next_compressed || l + 1 == layers.len()) {
            out.push(std::mem::take(&mut open));
            bytes = 0;
        }
    }
    out
}
