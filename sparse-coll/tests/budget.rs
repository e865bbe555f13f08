//! Issue 28.2: a budget that cannot lie. A lossy collective keeps a count
//! `k >= 1` or a density of its input's dimension; `k = 0` is an error,
//! never a silent "drop everything"; a lossy collective built without a
//! budget is an error that says how to give one.

use sparse_coll::{Budget, Defaults, Registry, Spardl, SparseAllreduce, ThreadCluster, Transport};
use sparse_core::testing::generate::GradientSpec;
use sparse_core::{Error, SparseVec};

/// The algorithms of the built-in registry that take a budget
/// (`Entry::takes_budget`; `tests/suite.rs` checks that exactly those
/// accept `k=`).
fn budgeted(r: &Registry<f32>) -> Vec<String> {
    r.entries()
        .iter()
        .filter(|e| e.takes_budget())
        .map(|e| e.name().to_string())
        .collect()
}

#[test]
fn every_lossy_algorithm_refuses_k_zero_and_a_missing_budget() {
    let r = Registry::<f32>::builtin();
    let names = budgeted(&r);
    assert!(!names.is_empty(), "the budgeted algorithms");
    for n in &names {
        let a = r.build(n, Defaults::density(0.1).unwrap()).unwrap();
        assert!(!a.lossless(), "{n}");
        for spec in [
            format!("{n}:k=0"),
            format!("{n}:density=0"),
            format!("{n}:density=1.5"),
        ] {
            let err = r.build(&spec, Defaults::density(0.1).unwrap()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidParameter { .. }),
                "{spec}: {err}"
            );
            assert!(err.to_string().contains(n.as_str()), "{spec}: {err}");
        }
        let err = r.build(n, Defaults::lossless()).unwrap_err();
        assert!(
            err.to_string().contains("density= or k=") && err.to_string().contains(n.as_str()),
            "{n}: {err}"
        );
        let both = r.build(&format!("{n}:k=3,density=0.1"), Defaults::lossless());
        assert!(both.is_err(), "{n}: k and density together");
        // The spec names the budget and builds back the same.
        let a = r
            .build(&format!("{n}:density=0.05"), Defaults::lossless())
            .unwrap();
        assert!(a.spec().contains("density=0.05"), "{}", a.spec());
        let b = r.build(&a.spec(), Defaults::lossless()).unwrap();
        assert_eq!(a.spec(), b.spec());
        let most = |spec: &str| {
            r.promises(spec, Defaults::lossless())
                .unwrap()
                .and_then(|pr| pr.max_result_entries(1000))
        };
        assert_eq!(most(&a.spec()), most(&b.spec()));
    }
    // The lossless ones need no budget.
    for e in r.entries().iter().filter(|e| e.lossless()) {
        assert!(
            r.build(e.name(), Defaults::lossless()).is_ok(),
            "{}",
            e.name()
        );
    }
    assert!(Defaults::k(0).is_err());
    assert!(Budget::k(0).is_err());
    for d in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
        assert!(Defaults::density(d).is_err(), "{d}");
    }
}

/// A density resolves at each call from the input's dimension: `round(d
/// dim)`, at least 1; SparDL keeps exactly that many entries of an input
/// with more, and `spardl:k=0` on a nonzero input is an error.
#[test]
fn a_density_resolves_per_call_and_k_zero_is_an_error() {
    let b = Budget::density(0.05).unwrap();
    assert_eq!(
        (b.k_for(1000), b.k_for(10), b.k_for(1), b.k_for(0)),
        (50, 1, 1, 0)
    );
    assert_eq!(Budget::k(7).unwrap().k_for(3), 7);
    let r = Registry::<f32>::builtin();
    assert!(r.build("spardl:k=0", Defaults::lossless()).is_err());
    assert!(r.build("spardl", Defaults::lossless()).is_err());
    let p = 4;
    for dim in [1000usize, 4000] {
        let ins = GradientSpec::new(dim, 0.2, 5).generate::<f32>(p).unwrap();
        let out = ThreadCluster::new(p).run(|t| {
            let v: &SparseVec<f32> = &ins[t.rank()];
            let mut a = r.build("spardl", Defaults::density(0.05)?)?;
            let red = a.allreduce(t, v)?;
            let direct = Spardl::new(Budget::density(0.05)?).allreduce(t, v)?;
            Ok((red, direct))
        });
        for res in out {
            let (red, direct) = res.unwrap();
            assert_eq!(red.result.nnz(), dim / 20, "dim {dim}");
            assert_eq!(red.result, direct.result);
        }
    }
}
