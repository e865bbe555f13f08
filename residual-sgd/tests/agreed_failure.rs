//! A collective's failure that every rank agrees on (DSAR with QSGD: a
//! partition sum it cannot scale) fails the step on every rank and leaves
//! the transport usable, now that `Trainer::step` enters its calls jointly
//! (`sparse_coll::allreduce_jointly` runs each body as the call alone
//! does, `SparseAllreduce::guarded_body`): the next step on the same
//! transport succeeds. (Before that was mended, the joint call abandoned
//! the transport and every later step failed.)

use backend_cpu::Cpu;
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster};
use sparse_core::Result;
use sparse_select::RadixTopK;

fn trainer() -> Result<Trainer<Cpu, RadixTopK>> {
    Trainer::new(
        Cpu,
        Config::new(1.0, 0.5, Rule::TopK)?.compress_threshold(0),
        LayerSpec::matrices(&[4]),
        &[vec![1.0; 4]],
        RadixTopK::magnitude(),
        |_: &LayerSpec| Registry::builtin().build("dsar_split_allgather:qsgd=4", Defaults::k(2)?),
    )
}

#[test]
fn an_agreed_collective_failure_leaves_the_transport_to_the_next_step() {
    for p in [2usize, 3] {
        let out = ThreadCluster::new(p).run(|t| {
            let first = trainer()?
                .step(t, &[vec![3e38f32, -1.0, 3e38, 2.0]])
                .map(drop);
            // A fresh trainer (the first one's residual keeps overflowing)
            // on the same transport.
            let next = trainer()?.step(t, &[vec![1.0, -1.0, 0.5, 2.0]]).map(drop);
            Ok((first, next))
        });
        for (r, o) in out.into_iter().enumerate() {
            let (first, next) = o.expect("the test's own trainers");
            assert!(first.is_err(), "P = {p}, rank {r}: {first:?}");
            next.unwrap_or_else(|e| panic!("P = {p}, rank {r}: the next step failed: {e}"));
        }
    }
}
