//! Issue 12.6: every algorithm's cost for a profile predicts its measured
//! busiest-rank bytes received and rounds within 10%, at P in
//! {2, 3, 4, 7, 8, 16} and overlap 0, 0.5 and 1. Each rank runs three calls
//! on the same input (as `sparse-bench allreduce` does: warm-up, then timed
//! calls) and asks its algorithm for the cost of the last call just before
//! making it, so stateful algorithms (B-SAG's `h`, Ok-Topk's refreshes)
//! predict the call they are about to make.

use sparse_coll::{Defaults, Profile, Registry, ThreadCluster, Transport};
use sparse_core::testing::generate::GradientSpec;

const RANKS: [usize; 6] = [2, 3, 4, 7, 8, 16];

/// (name, P, overlap, measured bytes, predicted bytes, measured rounds,
/// predicted rounds) for every algorithm and case.
fn table() -> Vec<(String, usize, f64, f64, f64, f64, f64)> {
    let reg = Registry::<f32>::builtin();
    let mut rows = Vec::new();
    for p in RANKS {
        for overlap in [0.0, 0.5, 1.0] {
            let ins = GradientSpec {
                overlap,
                ..GradientSpec::new(50_000, 0.01, 5 + p as u64)
            }
            .generate::<f32>(p)
            .unwrap();
            let prof = Profile::of(&ins);
            let k = ins[0].nnz();
            for name in reg.names() {
                let out = ThreadCluster::new(p)
                    .run(|t| {
                        let mut algo = reg.build(name, Defaults::k(k)?)?;
                        let v = &ins[t.rank()];
                        algo.allreduce(t, v)?;
                        algo.allreduce(t, v)?;
                        // The cost of the call this state makes next.
                        let mut predicted = algo.cost(&prof);
                        let red = algo.allreduce(t, v)?;
                        // The planner's own cost is its choice for the true
                        // profile, but it chose from its estimate: the model
                        // of what it ran is the one to hold against the bytes.
                        if let Some(ran) = algo.ran() {
                            predicted = reg.build(&ran, Defaults::k(k)?)?.cost(&prof);
                        }
                        Ok((red.traffic, predicted))
                    })
                    .into_iter()
                    .map(|r| r.unwrap())
                    .collect::<Vec<_>>();
                let bytes = out.iter().map(|o| o.0.bytes_recv).max().unwrap() as f64;
                let rounds = out.iter().map(|o| o.0.rounds).max().unwrap() as f64;
                let c = out[0].1;
                rows.push((
                    name.to_string(),
                    p,
                    overlap,
                    bytes,
                    c.bytes(),
                    rounds,
                    c.rounds,
                ));
            }
        }
    }
    rows
}

#[test]
fn cost_predicts_bytes_and_rounds_within_ten_percent() {
    let mut bad = Vec::new();
    for (name, p, o, b, pb, r, pr) in table() {
        let line = format!(
            "{name:26} P={p:2} overlap={o:.1}: bytes {b:9.0} predicted {pb:9.0} ({:.3}), rounds {r:3} predicted {pr:5.1}",
            pb / b.max(1.0)
        );
        println!("{line}");
        let off = |x: f64, y: f64| !approx::abs_diff_eq!(x, y, epsilon = 0.1 * y.max(1.0));
        if off(pb, b) || off(pr, r) {
            bad.push(line);
        }
    }
    assert!(
        bad.is_empty(),
        "{} off by more than 10%:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
