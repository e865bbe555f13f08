//! A user's own sparse allreduce, written outside the crate: a dense ring
//! over the sparse inputs ("densify, ring, sparsify"), which beats every
//! sparse scheme once the inputs fill in. It joins the registry with one
//! call, passes the same collective suite as the built-in algorithms on
//! 1 to 9 thread ranks, and the `Auto` planner chooses between it and the
//! built-in ones by its cost.
//!
//! Run with `cargo run -p sparse-coll --example custom_scheme`.

use sparse_coll::dense::ring_allreduce;
use sparse_coll::testing::{bad_input_suite_for, cases, collective_suite_for, real_cases};
use sparse_coll::{
    Admission, Auto, Defaults, Entered, Profile, Reduced, Registry, SparseAllreduce, ThreadCluster,
    Transport, wire,
};
use sparse_core::cost::Cost;
use sparse_core::{Result, SparseVec};

/// Densify, ring allreduce, sparsify. Lossless; every rank's result is
/// bitwise identical (the ring forms each sum once and copies it).
struct DenseRing;

impl SparseAllreduce<f32> for DenseRing {
    fn name(&self) -> String {
        "dense_ring".into()
    }
    fn lossless(&self) -> bool {
        true
    }
    /// Reduce-scatter and allgather of `n / P` words each, `2 (P - 1)`
    /// rounds, whatever the density.
    fn cost(&self, prof: &Profile) -> Cost {
        let p = prof.p as f64;
        Cost::new(2.0 * (p - 1.0), 2.0 * prof.n as f64 * (p - 1.0) / p)
    }
    /// The same entry as the built-in algorithms: input checked, every
    /// rank agrees on the call (in its own round, or in one round with
    /// other calls: `sparse_coll::allreduce_jointly`), any rank's failure
    /// reaches all.
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<f32>) -> Option<Admission> {
        Some(wire::admit("dense_ring", v, &[], Ok(())))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<f32>,
        _: Entered,
        out: &mut Reduced<f32>,
    ) -> Result<Result<()>> {
        let sum = ring_allreduce(t, &v.to_dense())?;
        *out = Reduced {
            result: SparseVec::from_dense(&sum)?,
            dropped: SparseVec::zeros(v.dim())?,
            ..Reduced::default()
        };
        Ok(Ok(()))
    }
}

fn main() -> Result<()> {
    // 1. Register it next to the built-in algorithms.
    let mut registry = Registry::<f32>::builtin();
    registry.register(
        "dense_ring",
        "",
        "densify, ring allreduce, sparsify; lossless",
        |_, _| Ok(Box::new(DenseRing)),
    )?;
    assert!(registry.build("dense_ring:k=3", Defaults::k(1)?).is_err());

    // 2. The collective suite, as the built-in algorithms run it, with
    //    sends that wait for their receive as MPI's do.
    for p in 1..=9 {
        for (r, res) in ThreadCluster::new(p)
            .synchronous(true)
            .run(|t| collective_suite_for(t, &registry, "dense_ring"))
            .into_iter()
            .enumerate()
        {
            let runs = res?;
            assert_eq!(runs, cases(p).len() + real_cases(p).len(), "P={p} rank {r}");
        }
    }
    println!("dense_ring passed the collective suite on 1 to 9 ranks");
    // Invalid inputs on one rank: an error on every rank, then a good call.
    for p in 1..=5 {
        for res in ThreadCluster::new(p).run(|t| bad_input_suite_for(t, &registry, "dense_ring")) {
            res?;
        }
    }
    println!("dense_ring passed the bad-input suite on 1 to 5 ranks");

    // 3. The planner chooses between it and the built-in lossless ones, by
    //    bytes (alpha = 0): sparse inputs go to a sparse scheme, inputs that
    //    fill every coordinate to the dense ring.
    let (p, n) = (4, 4096);
    for density in [0.01, 1.0] {
        let ins: Vec<SparseVec<f32>> = (0..p)
            .map(|r| {
                let step = (1.0 / density) as usize;
                let idx: Vec<u32> = (0..n).step_by(step).map(|i| ((i + r) % n) as u32).collect();
                let mut idx = idx;
                idx.sort_unstable();
                idx.dedup();
                let vals = vec![1.0f32; idx.len()];
                SparseVec::new(n, idx, vals)
            })
            .collect::<Result<_>>()?;
        let chosen = ThreadCluster::new(p)
            .run(|t| {
                let mut candidates = Vec::new();
                for name in registry.auto_candidates().into_iter().chain(["dense_ring"]) {
                    candidates.push(registry.build(name, Defaults::lossless())?);
                }
                let mut auto = Auto::new(0.0, 1.0, candidates)?.reprofile_every(1)?;
                let v = &ins[t.rank()];
                // The second call plans with the measured overlap.
                auto.allreduce(t, v)?;
                let red = auto.allreduce(t, v)?;
                assert_eq!(
                    red.result.nnz(),
                    if density < 1.0 { 4 * v.nnz() } else { n }
                );
                Ok(auto.last_name().unwrap_or_default())
            })
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        println!("density {density}: auto chose {}", chosen[0]);
        assert!(
            chosen.iter().all(|c| c == &chosen[0]),
            "every rank chose the same"
        );
        assert_eq!(chosen[0] == "dense_ring", density == 1.0);
    }
    Ok(())
}
