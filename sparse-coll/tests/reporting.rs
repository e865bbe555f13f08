//! Errors that say what happened: a disagreement names the algorithms,
//! a panic on a rank is `Error::Panicked`, not a transport fault.

use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::{Error, SparseVec};

/// Two ranks calling two different algorithms: every rank's error names
/// both, by name.
#[test]
fn a_disagreement_about_the_algorithm_names_them() {
    let out = ThreadCluster::new(2).run(|t| {
        let rank = t.rank();
        let v = SparseVec::new(100, vec![rank as u32], vec![1.0f32])?;
        let spec = if rank == 0 {
            "topk_a"
        } else {
            "ssar_recursive_double"
        };
        let mut a = Registry::builtin().build(spec, Defaults::lossless())?;
        a.allreduce(t, &v)
    });
    for r in out {
        match r {
            Err(Error::Disagreement {
                what: "algorithm",
                detail,
            }) => assert_eq!(
                detail, "rank 0: topk_a, rank 1: ssar_recursive_double",
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
    }
}

/// A failed check inside a rank's code comes back as what it is.
#[test]
fn a_panic_on_a_rank_is_reported_as_a_panic() {
    let out = ThreadCluster::new(3).run(|t| {
        assert_ne!(t.rank(), 2, "a planted check failure");
        Ok(t.rank())
    });
    assert_eq!(out[0], Ok(0));
    match &out[2] {
        Err(e @ Error::Panicked { rank: 2, message }) => {
            assert!(message.contains("a planted check failure"), "{message}");
            assert!(e.to_string().starts_with("rank 2 panicked: "), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

/// The pattern every user writes once: take the rank before handing the
/// transport to the collective (`a.allreduce(t, &ins[t.rank()])` does not
/// compile: `t` is borrowed mutably for the call).
#[test]
fn the_rank_first_pattern() {
    let ins: Vec<SparseVec<f32>> = (0..4)
        .map(|r| SparseVec::new(10, vec![r], vec![1.0]).unwrap())
        .collect();
    let out = ThreadCluster::new(4).run(|t| {
        let rank = t.rank();
        let mut a = Registry::builtin().build("ssar_recursive_double", Defaults::lossless())?;
        a.allreduce(t, &ins[rank])
    });
    for r in out {
        assert_eq!(r.unwrap().result.to_dense(), {
            let mut d = vec![0.0f32; 10];
            d[..4].fill(1.0);
            d
        });
    }
}
