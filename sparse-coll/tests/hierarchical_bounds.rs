//! The hierarchical allreduce's `node` is bounded by the rank count
//! (issue 40, item 9): building it allocates nothing proportional to
//! `node` (`node = 10^9` aborted the process), and a node larger than the
//! cluster is one node, the intra collective alone.

use sparse_coll::testing::CountingAlloc;
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::SparseVec;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The bytes this thread asks for while building `spec`.
fn build_asks(registry: &Registry<f32>, spec: &str) -> u64 {
    let before = CountingAlloc::asked();
    let algo = registry.build(spec, Defaults::k(4).unwrap()).unwrap();
    let asked = CountingAlloc::asked() - before;
    drop(algo);
    asked
}

/// Building with a million ranks per node asks for what building with two
/// does (within a few KiB of names), not 16 bytes and an instance per
/// rank of the node.
#[test]
fn building_asks_for_nothing_proportional_to_node() {
    let registry = Registry::<f32>::builtin();
    for inter in ["ssar_split_allgather", "spardl_bsag"] {
        let two = build_asks(&registry, &format!("hierarchical:node=2,inter={inter}"));
        for node in [1_000_000u64, 1_000_000_000, u64::MAX] {
            let big = build_asks(
                &registry,
                &format!("hierarchical:node={node},inter={inter}"),
            );
            assert!(
                big <= two + 4096,
                "node={node} {inter}: {big} bytes, node=2: {two}"
            );
        }
    }
}

/// A node larger than the cluster is one node: the exact sum on every rank.
#[test]
fn a_node_larger_than_the_cluster_sums_exactly() {
    for p in [1, 4, 5] {
        let out = ThreadCluster::new(p).run(|t| {
            let r = t.rank() as u32;
            let v = SparseVec::new(100, vec![r, 50 + r], vec![1.0f32, 2.0])?;
            let mut h =
                Registry::builtin().build("hierarchical:node=1000000000", Defaults::lossless())?;
            Ok(h.allreduce(t, &v)?.result)
        });
        let want = SparseVec::new(
            100,
            (0..p as u32).chain(50..50 + p as u32).collect(),
            [vec![1.0f32; p], vec![2.0f32; p]].concat(),
        )
        .unwrap();
        for r in out {
            assert_eq!(r.unwrap(), want, "P={p}");
        }
    }
}
