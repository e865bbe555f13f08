//! Hostile parameters and inputs (issue 27, items 3 to 5): a parameter is
//! used or rejected, never dropped; a hash table a parameter would make
//! huge is refused before anything is allocated; a NaN or an infinity is
//! the same error for every collective, at its entry, on every rank, with
//! the transport usable.

use sparse_coll::testing;
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::{Error, SparseVec};

fn build(spec: &str) -> sparse_core::Result<String> {
    Registry::<f32>::builtin()
        .build(spec, Defaults::k(4)?)
        .map(|a| a.spec())
}

/// Each QSGD setting has one spelling per name: a second spelling, or a
/// QSGD parameter without QSGD, is `InvalidParameter`, not ignored.
#[test]
fn conflicting_or_unknown_parameters_are_rejected() {
    for spec in [
        "dsar_split_allgather:qsgd=4,bits=8",
        "dsar_split_allgather:bits=8",
        "dsar_split_allgather:bucket=64",
        "dsar_split_allgather:seed=3",
        "dsar_qsgd:qsgd=4",
        "dsar_qsgd:bits=8,qsgd=8",
    ] {
        assert!(
            matches!(build(spec), Err(Error::InvalidParameter { .. })),
            "{spec}: {:?}",
            build(spec)
        );
    }
    assert_eq!(
        build("dsar_split_allgather:qsgd=8,bucket=64").unwrap(),
        build("dsar_qsgd:bits=8,bucket=64").unwrap()
    );
    assert!(build("dsar_qsgd:bits=8").unwrap().contains("bits=8"));
}

/// Zen's `r1` and `r2` are bounded at build time (the table has
/// `P (r1 + r2)` slots whatever the input).
#[test]
fn zen_hash_memory_is_bounded_when_built() {
    for spec in [
        "zen_balanced_parallelism:r1=4294967295",
        "zen_balanced_parallelism:r1=268435456",
        "zen_balanced_parallelism:r1=16777216,r2=1",
        "zen_balanced_parallelism:r1=1,r2=4294967295",
    ] {
        assert!(
            matches!(build(spec), Err(Error::InvalidParameter { .. })),
            "{spec}"
        );
    }
    assert!(build("zen_balanced_parallelism:r1=16777215,r2=1").is_ok());
    // Within the bound, a call runs (one entry per rank).
    let out = ThreadCluster::new(2).run(|t| {
        let mut zen = Registry::<f32>::builtin()
            .build("zen_balanced_parallelism:r1=4096,r2=16", Defaults::k(1)?)?;
        let v = SparseVec::new(100, vec![t.rank() as u32], vec![1.0f32])?;
        zen.allreduce(t, &v)
    });
    for r in out {
        assert_eq!(r.unwrap().result.nnz(), 2);
    }
}

/// A NaN or an infinity in one rank's input: every collective returns
/// `NonFinite` on that rank and `PeerError` on the others, at its entry,
/// and the transport still carries the next call.
#[test]
fn non_finite_inputs_are_one_error_at_entry_for_every_collective() {
    for p in [2usize, 3] {
        for spec in testing::algorithms(p) {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let out = ThreadCluster::new(p).run(|t| {
                    let registry = Registry::<f32>::builtin();
                    let mut a = registry.build(&spec, Defaults::k(2)?)?;
                    let r = t.rank() as u32;
                    let x = if r == 0 { bad } else { 1.0 };
                    let v = SparseVec::new(50, vec![r, 10 + r], vec![x, 2.0])?;
                    let res = a.allreduce(t, &v).map(drop);
                    // The transport is usable: a lossless call succeeds.
                    let mut next = registry.build("topk_a", Defaults::k(2)?)?;
                    let ok = SparseVec::new(50, vec![r], vec![1.0])?;
                    assert_eq!(next.allreduce(t, &ok)?.result.nnz(), p);
                    Ok(res)
                });
                for (r, res) in out.into_iter().enumerate() {
                    let res = res.unwrap_or_else(|e| panic!("{spec} P = {p} rank {r}: {e}"));
                    let want = if r == 0 {
                        matches!(res, Err(Error::NonFinite { index: 0 }))
                    } else {
                        matches!(res, Err(Error::PeerError { rank: 0, .. }))
                    };
                    assert!(want, "{spec} P = {p} rank {r} ({bad}): {res:?}");
                }
            }
        }
    }
}
