//! A sum that overflows (issue 40, item 9): finite inputs whose sum across
//! ranks passes the element's largest value. Every algorithm either
//! returns on every rank (an infinite sum is the sum) or fails on every
//! rank, and either way leaves the transport usable: the next call on the
//! same transports succeeds and is exact. DSAR with QSGD, which cannot
//! quantize an infinite partition, fails on every rank (the partition's
//! owner its own error, the others naming it) and used to abandon the
//! transport.

use sparse_coll::testing::algorithms;
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::stats::even_start;
use sparse_core::{Error, Result, SparseVec};
use std::time::Duration;

const DIM: usize = 40;

/// Rank `r`'s input: `2e38` at 1, 5 and 38 (two ranks' sum is infinite in
/// f32), and a small value of its own.
fn huge(r: usize) -> SparseVec<f32> {
    let mut idx = vec![1u32, 5, 38, 10 + r as u32];
    idx.sort_unstable();
    let val = idx
        .iter()
        .map(|&i| if i == 10 + r as u32 { 1.0 } else { 2e38 })
        .collect();
    SparseVec::new(DIM, idx, val).unwrap()
}

/// Rank `r`'s ordinary input, and the exact sum of `p` of them.
fn small(r: usize) -> SparseVec<f32> {
    SparseVec::new(DIM, vec![3, 20 + r as u32], vec![1.0, 2.0]).unwrap()
}

fn small_sum(p: usize) -> SparseVec<f32> {
    (0..p).fold(SparseVec::zeros(DIM).unwrap(), |acc, r| {
        acc.merge_sum(&small(r)).unwrap()
    })
}

/// How the overflowing call ended on this rank: `Ok(true)` if it returned
/// (the result infinite at the shared indices where kept), `Err` its error.
fn overflowing_then_ordinary(
    t: &mut dyn Transport,
    registry: &Registry<f32>,
    spec: &str,
) -> Result<std::result::Result<(), Error>> {
    let (r, p) = (t.rank(), t.size());
    let defaults = Defaults::k(8)?;
    let mut algo = registry.build(spec, defaults)?;
    let first = algo.allreduce(t, &huge(r));
    if let Ok(red) = &first {
        for (i, x) in red.result.iter() {
            if [1, 5, 38].contains(&i) {
                assert!(x.is_infinite(), "{spec}: coordinate {i} is {x}");
            }
        }
    }
    // The same transport, after the first call: the same instance reset
    // (as a trainer does after a failed step), then a lossless one.
    algo.reset();
    let red = algo.allreduce(t, &small(r))?;
    let sum = small_sum(p);
    if algo.lossless() {
        assert_eq!(red.result, sum, "{spec}: the next call");
    }
    let mut exact = registry.build("dsar_split_allgather", Defaults::lossless())?;
    assert_eq!(exact.allreduce(t, &small(r))?.result, sum);
    Ok(first.map(drop))
}

/// The rank whose partition of `p` holds coordinate `i`.
fn owner(i: usize, p: usize) -> usize {
    (0..p).rfind(|&q| even_start(q, DIM, p) <= i).unwrap()
}

/// DSAR with QSGD whose partition sums overflow (at 1, 5 and 38): an error
/// on every rank, each owner of such a partition its own naming its first
/// such index, the others a `PeerError` naming the lowest owner (rank 0);
/// the transport stays usable.
#[test]
fn dsar_qsgd_fails_on_every_rank_and_leaves_the_transport_usable() {
    let registry = Registry::<f32>::builtin();
    for p in [2, 3, 4] {
        for spec in ["dsar_qsgd", "dsar_qsgd:bits=2,bucket=4"] {
            let out = ThreadCluster::new(p)
                .timeout(Duration::from_secs(10))
                .run(|t| overflowing_then_ordinary(t, &registry, spec));
            for (r, o) in out.into_iter().enumerate() {
                let first = o.unwrap_or_else(|e| panic!("{spec} P={p} rank {r}: {e}"));
                let owns = [1, 5, 38].into_iter().find(|&i| owner(i, p) == r);
                match (first, owns) {
                    (Err(Error::Unencodable { codec, reason }), Some(i)) => {
                        assert_eq!(codec, "qsgd");
                        assert!(
                            reason.contains(&format!("not finite at index {i} ")),
                            "{reason}"
                        );
                        assert!(reason.contains("scale the inputs down"), "{reason}");
                    }
                    (Err(Error::PeerError { rank: 0, detail }), None) => {
                        assert!(detail.contains("not finite at index 1,"), "{detail}");
                    }
                    (other, _) => panic!("{spec} P={p} rank {r}: {other:?}"),
                }
            }
        }
    }
}

/// What still abandons the transport after an overflow (found here, not
/// fixed): a value codec of intermediate sums (`bf16`, `ssmean`) refuses
/// an infinite sum on one rank in the middle of SparDL's or recursive
/// doubling's steps, and the hierarchical allreduce hands its parts the
/// node's infinite sum, which the inter-node collective's entry refuses
/// in one group while the node's other members wait in theirs. Each fails
/// on every rank (no hang, no wrong result), but the next call's
/// transport is abandoned. By spec, the rank counts where it does (at
/// P = 2 recursive doubling sums once, at the end, and the hierarchical
/// allreduce is its intra part alone). The test holds this list to what
/// happens.
const ABANDONS_AFTER_OVERFLOW: [(&str, &[usize]); 5] = [
    ("spardl:values=bf16", &[2, 3]),
    ("spardl:values=ssmean", &[2, 3]),
    ("ssar_recursive_double:values=bf16", &[3]),
    ("ssar_recursive_double:values=ssmean", &[3]),
    ("hierarchical:node=2", &[3]),
];

/// Every algorithm of the suite either returns on every rank or fails on
/// every rank, and the next calls on the same transports succeed; but for
/// [`ABANDONS_AFTER_OVERFLOW`], whose next calls fail on every rank.
#[test]
fn every_algorithm_leaves_the_transport_usable_after_an_overflow() {
    let registry = Registry::<f32>::builtin();
    let mut bad = Vec::new();
    for p in [2, 3] {
        for spec in algorithms(p) {
            let out = ThreadCluster::new(p)
                .timeout(Duration::from_secs(10))
                .run(|t| overflowing_then_ordinary(t, &registry, &spec));
            let abandons = ABANDONS_AFTER_OVERFLOW
                .iter()
                .any(|(s, ps)| *s == spec && ps.contains(&p));
            let next_failed = out.iter().filter(|o| o.is_err()).count();
            if abandons {
                if next_failed != p {
                    bad.push(format!("{spec} P={p} no longer abandons: {out:?}"));
                }
                continue;
            }
            if next_failed > 0 {
                bad.push(format!("{spec} P={p}: the next calls failed: {out:?}"));
                continue;
            }
            let failed = out.iter().filter(|o| matches!(o, Ok(Err(_)))).count();
            if !(failed == 0 || failed == p) {
                bad.push(format!("{spec} P={p}: {out:?}"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
