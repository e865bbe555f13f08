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

/// Every algorithm of the suite either returns on every rank or fails on
/// every rank, and the next calls on the same transports succeed. (A
/// value codec of intermediate sums, `bf16` or `ssmean`, refusing an
/// infinite sum in the middle of SparDL's or recursive doubling's steps,
/// and the hierarchical allreduce's inter-node entry refusing a node's
/// infinite sum in one group while the node's other members waited in
/// theirs, used to abandon the transport; see the tests below.)
#[test]
fn every_algorithm_leaves_the_transport_usable_after_an_overflow() {
    let registry = Registry::<f32>::builtin();
    let mut bad = Vec::new();
    for p in [2, 3] {
        for spec in algorithms(p) {
            let out = ThreadCluster::new(p)
                .timeout(Duration::from_secs(10))
                .run(|t| overflowing_then_ordinary(t, &registry, &spec));
            let next_failed = out.iter().filter(|o| o.is_err()).count();
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

/// Rank `r`'s input where the ranks of `hot` hold `2e38` at index 7 (two
/// of them sum to an infinity in f32) and every rank a small value of its
/// own.
fn hot(r: usize, hot: &[usize]) -> SparseVec<f32> {
    let mut pairs = vec![(20 + r as u32, 1.0)];
    if hot.contains(&r) {
        pairs.push((7, 2e38));
    }
    pairs.sort_by_key(|e| e.0);
    let (i, x) = pairs.into_iter().unzip();
    SparseVec::new(DIM, i, x).unwrap()
}

/// Runs `spec` on `p` ranks with `hot`'s overflowing inputs, then the same
/// instance reset and a lossless collective on ordinary inputs (which must
/// succeed, the lossless one exactly): how the first call ended on each
/// rank.
fn hot_then_ordinary(
    registry: &Registry<f32>,
    spec: &str,
    p: usize,
    h: &[usize],
) -> Vec<Result<()>> {
    let out = ThreadCluster::new(p)
        .timeout(Duration::from_secs(10))
        .run(|t| {
            let r = t.rank();
            let mut algo = registry.build(spec, Defaults::k(8)?)?;
            let first = algo.allreduce(t, &hot(r, h));
            algo.reset();
            algo.allreduce(t, &small(r))?;
            let mut exact = registry.build("dsar_split_allgather", Defaults::lossless())?;
            assert_eq!(exact.allreduce(t, &small(r))?.result, small_sum(t.size()));
            Ok(first.map(drop))
        });
    out.into_iter()
        .enumerate()
        .map(|(r, o)| {
            o.unwrap_or_else(|e| panic!("{spec} P={p} hot {h:?} rank {r}: the next calls: {e}"))
        })
        .collect()
}

/// The hot sets tried at `p` ranks: all, the first two, the last two, the
/// first and last, the middle and last.
fn hots(p: usize) -> Vec<Vec<usize>> {
    vec![
        (0..p).collect(),
        vec![0, 1],
        vec![p - 2, p - 1],
        vec![0, p - 1],
        vec![p / 2, p - 1],
    ]
}

/// Every rank failed: those whose own work or input failed with their own
/// error, every other rank with a `PeerError` naming the lowest of them
/// (whose text begins with `prefix`).
fn assert_named_alike(tag: &str, out: &[Result<()>], prefix: &str) {
    let own: Vec<usize> = (0..out.len())
        .filter(|&r| matches!(&out[r], Err(e) if !matches!(e, Error::PeerError { .. })))
        .collect();
    let q = *own
        .first()
        .unwrap_or_else(|| panic!("{tag}: no rank's own error: {out:?}"));
    for (r, o) in out.iter().enumerate() {
        match o {
            Ok(()) => panic!("{tag}: rank {r} returned while others failed: {out:?}"),
            Err(Error::PeerError { rank, detail }) => {
                assert_eq!(*rank, q, "{tag} rank {r}: {detail}");
                assert!(detail.starts_with(prefix), "{tag} rank {r}: {detail}");
            }
            Err(Error::NonFinite { .. } | Error::Unencodable { .. }) => {}
            Err(e) => panic!("{tag} rank {r}: {e:?}"),
        }
    }
}

/// A lossy codec that cannot carry a partial sum part way through SparDL
/// or recursive doubling (the sum overflowed, at whichever step the hot
/// ranks' values meet): every rank fails, the ranks that failed their own
/// work with their own error and every other rank with a `PeerError`
/// naming the lowest of them, and the next calls on the same transports
/// are exact. Any P, the overflow from any pair of ranks.
#[test]
fn a_partial_sum_a_codec_cannot_carry_fails_every_rank_alike() {
    let registry = Registry::<f32>::builtin();
    let specs = [
        "spardl:values=bf16",
        "spardl:values=ssmean",
        "spardl:values=f16",
        "ssar_recursive_double:values=bf16",
        "ssar_recursive_double:values=ssmean",
        "ssar_recursive_double:values=f16",
    ];
    let mut failed_runs = 0;
    for p in [2, 3, 4, 5, 6, 7, 8] {
        for spec in specs {
            for h in hots(p) {
                let out = hot_then_ordinary(&registry, spec, p, &h);
                let tag = format!("{spec} P={p} hot {h:?}");
                if out.iter().all(std::result::Result::is_ok) {
                    continue;
                }
                failed_runs += 1;
                assert_named_alike(&tag, &out, "failed part way through the call: ");
            }
        }
    }
    // Most runs overflow (two hot ranks' values meet in a sum some rank
    // must send on).
    assert!(failed_runs > 100, "{failed_runs} runs failed");
}

/// The hierarchical allreduce whose node sums overflow: the inter-node
/// entry refuses a node's sum, the intra-node part fails (DSAR with QSGD:
/// a partition sum it cannot scale), or the inter-node part does. Every
/// rank fails, whatever nodes the hot ranks are in (the last node smaller
/// or not), and the next calls on the same transports are exact: a rank
/// that learns of a failure still takes part in its later calls, failing
/// each inter-node call at its entry (the planner's too) and sending a
/// failure frame in the node's allgather; every rank names the same
/// lowest rank whose own input or work failed.
#[test]
fn a_hierarchical_call_whose_part_fails_fails_every_rank_alike() {
    let registry = Registry::<f32>::builtin();
    let specs = [
        "hierarchical:node=2",
        "hierarchical:node=3",
        "hierarchical:node=2,intra=dsar_qsgd",
        "hierarchical:node=2,inter=dsar_qsgd",
        "hierarchical:node=2,intra=spardl,inter=ssar_recursive_double",
        "hierarchical:node=4,intra=dsar_qsgd,inter=topk_a",
        "hierarchical:node=2,inter=auto",
        "hierarchical:node=3,intra=auto,inter=auto",
    ];
    let mut failed_runs = 0;
    for p in [3, 4, 5, 6, 7, 8, 9] {
        for spec in specs {
            for h in hots(p) {
                let out = hot_then_ordinary(&registry, spec, p, &h);
                if out.iter().all(std::result::Result::is_ok) {
                    continue;
                }
                failed_runs += 1;
                assert_named_alike(&format!("{spec} P={p} hot {h:?}"), &out, "");
            }
        }
    }
    assert!(failed_runs > 100, "{failed_runs} runs failed");
}

/// `SparseAllreduce::enter_failing` on every algorithm of the suite and
/// on the planner between and on its profiles: rank `q` fails a call at
/// its entry while the others call `allreduce`; every other rank gets a
/// `PeerError` naming `q`, and the next ordinary call succeeds on every
/// rank (the ranks stay in step, stateful ones included).
#[test]
fn any_rank_can_fail_a_call_at_its_entry() {
    let registry = Registry::<f32>::builtin();
    for p in [2, 3, 5] {
        let mut specs = algorithms(p);
        specs.push("auto:every=2".into());
        for spec in specs {
            for q in [0, p - 1] {
                let out = ThreadCluster::new(p)
                    .timeout(Duration::from_secs(10))
                    .run(|t| {
                        let r = t.rank();
                        let mut algo = registry.build(&spec, Defaults::k(8)?)?;
                        let mut peer_errors = 0;
                        // Calls 1, 3 and 5 fail: the planner profiles at 1
                        // and 3 (every 2) and runs its choice at 5.
                        for call in 0..6 {
                            if call % 2 == 1 {
                                algo.allreduce(t, &small(r))?;
                            } else if r == q {
                                let e = Error::invalid("probe", "failed on purpose");
                                algo.enter_failing(t, &small(r), e)?;
                            } else {
                                match algo.allreduce(t, &small(r)) {
                                    Err(Error::PeerError { rank, detail }) if rank == q => {
                                        assert!(detail.contains("failed on purpose"), "{detail}");
                                        peer_errors += 1;
                                    }
                                    other => panic!("{spec} P={p} rank {r}: {other:?}"),
                                }
                            }
                        }
                        Ok(peer_errors)
                    });
                for (r, o) in out.into_iter().enumerate() {
                    let n = o.unwrap_or_else(|e| panic!("{spec} P={p} q={q} rank {r}: {e}"));
                    assert_eq!(n, if r == q { 0 } else { 3 }, "{spec} P={p} q={q} rank {r}");
                }
            }
        }
    }
}

/// Every algorithm of the suite at P = 2 to 9, the overflow from each of
/// [`hots`]'s sets of ranks: each call returns on every rank or fails on
/// every rank, and the next calls on the same transports succeed (the
/// lossless one exactly).
#[test]
fn every_algorithm_fails_alike_whichever_ranks_overflow() {
    let registry = Registry::<f32>::builtin();
    let mut bad = Vec::new();
    for p in 2..=9 {
        for spec in algorithms(p) {
            for h in hots(p) {
                let out = ThreadCluster::new(p)
                    .timeout(Duration::from_secs(10))
                    .run(|t| {
                        let r = t.rank();
                        let mut algo = registry.build(&spec, Defaults::k(8)?)?;
                        let first = algo.allreduce(t, &hot(r, &h));
                        algo.reset();
                        algo.allreduce(t, &small(r))?;
                        let mut exact =
                            registry.build("dsar_split_allgather", Defaults::lossless())?;
                        if exact.allreduce(t, &small(r))?.result != small_sum(t.size()) {
                            return Err(Error::invalid("probe", "inexact"));
                        }
                        Ok(first.map(drop))
                    });
                let next_failed = out.iter().filter(|o| o.is_err()).count();
                let failed = out.iter().filter(|o| matches!(o, Ok(Err(_)))).count();
                if next_failed > 0 || !(failed == 0 || failed == p) {
                    bad.push(format!("{spec} P={p} hot {h:?}: {out:?}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
