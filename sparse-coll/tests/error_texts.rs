//! Error texts that say what happened and what to do (issue 40, item 5):
//! each names the parameter the user wrote and the way out.

use sparse_coll::{Defaults, Registry, ThreadCluster};
use sparse_core::{Error, SparseVec};

fn build_err(spec: &str) -> (&'static str, String) {
    match Registry::<f32>::builtin().build(spec, Defaults::k(4).unwrap()) {
        Ok(a) => panic!("{spec} built: {}", a.spec()),
        Err(Error::InvalidParameter { name, reason }) => (name, reason),
        Err(e) => panic!("{spec}: {e:?}"),
    }
}

/// `d = 3` of R-SAG is refused when built, naming `d` and what it must be.
#[test]
fn rsag_with_d_not_a_power_of_two_names_d() {
    for d in [0, 3, 6] {
        let (name, reason) = build_err(&format!("spardl_rsag:d={d}"));
        assert_eq!(name, "d", "{reason}");
        assert!(
            reason.contains(&format!("d = {d}")) && reason.contains("power of two"),
            "{reason}"
        );
    }
    let (name, reason) = build_err("spardl_bsag:d=0");
    assert_eq!(name, "d", "{reason}");
}

/// Teams that do not divide the ranks (known at the call) name `d` on the
/// rank and reach the others as its error.
#[test]
fn teams_that_do_not_divide_the_ranks_name_d() {
    for spec in ["spardl_rsag:d=4", "spardl_bsag:d=4"] {
        let out = ThreadCluster::new(2).run(|t| {
            let mut a = Registry::<f32>::builtin().build(spec, Defaults::k(2)?)?;
            a.allreduce(t, &SparseVec::new(8, vec![1], vec![1.0f32])?)
                .map(drop)
        });
        for r in &out {
            let text = r.as_ref().unwrap_err().to_string();
            assert!(
                text.contains("invalid parameter d:") && text.contains("d = 4"),
                "{spec}: {text}"
            );
            assert!(text.contains("divide"), "{spec}: {text}");
        }
    }
}

/// An unknown codec name lists the known ones and says how to add one.
#[test]
fn an_unknown_codec_says_how_to_add_one() {
    let (name, reason) = build_err("topk_a:values=fp8");
    assert_eq!(name, "values");
    assert!(
        reason.contains("\"fp8\"")
            && reason.contains("f16")
            && reason.contains("Registry::add_values"),
        "{reason}"
    );
}
