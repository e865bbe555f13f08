//! A collective's failure that every rank agrees on (DSAR with QSGD: a
//! partition sum it cannot scale; SparDL and recursive doubling with a
//! lossy value codec: a partial sum it cannot carry; the hierarchical
//! allreduce: an inter-node entry that refuses a node's sum) fails the
//! step on every rank and leaves the transport usable, now that `Trainer::step` enters its calls jointly
//! (`sparse_coll::allreduce_jointly` runs each body as the call alone
//! does, `SparseAllreduce::guarded_body`): the next step on the same
//! transport succeeds. (Before that was mended, the joint call abandoned
//! the transport and every later step failed.)

use backend_cpu::Cpu;
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster};
use sparse_core::Result;
use sparse_select::RadixTopK;

fn trainer(spec: &str) -> Result<Trainer<Cpu, RadixTopK>> {
    Trainer::new(
        Cpu,
        Config::new(1.0, 0.5, Rule::TopK)?.compress_threshold(0),
        LayerSpec::matrices(&[4]),
        &[vec![1.0; 4]],
        RadixTopK::magnitude(),
        |_: &LayerSpec| Registry::builtin().build(spec, Defaults::k(2)?),
    )
}

#[test]
fn an_agreed_collective_failure_leaves_the_transport_to_the_next_step() {
    let specs = [
        "dsar_split_allgather:qsgd=4",
        "spardl:values=bf16",
        "ssar_recursive_double:values=ssmean",
        "hierarchical:node=2",
    ];
    for spec in specs {
        for p in [2usize, 3, 4, 5] {
            let out = ThreadCluster::new(p).run(|t| {
                let first = trainer(spec)?
                    .step(t, &[vec![3e38f32, -1.0, 3e38, 2.0]])
                    .map(drop);
                // A fresh trainer (the first one's residual keeps
                // overflowing) on the same transport.
                let next = trainer(spec)?
                    .step(t, &[vec![1.0, -1.0, 0.5, 2.0]])
                    .map(drop);
                Ok((first, next))
            });
            for (r, o) in out.into_iter().enumerate() {
                let (first, next) = o.expect("the test's own trainers");
                assert!(first.is_err(), "{spec} P = {p}, rank {r}: {first:?}");
                next.unwrap_or_else(|e| {
                    panic!("{spec} P = {p}, rank {r}: the next step failed: {e}")
                });
            }
        }
    }
}
