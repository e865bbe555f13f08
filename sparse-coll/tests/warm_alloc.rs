//! Once warm, TopkA, SSAR_Recursive_double, gTopk, the SparDL variants and
//! Ok-Topk (with a budget below the inputs' entries, so that it reuses its
//! thresholds) allocate nothing that grows with the data (issue 14.2: reuse buffers
//! across calls, no per-message allocation in the transport; issue 30.5):
//! with a counting allocator as the oracle, each rank's bytes allocated
//! during a call of `allreduce_into`, after warm-up calls on the same
//! input, stay under `SMALL`, while each message carries at least
//! `MIN_MESSAGE` bytes. A fresh buffer for one message, a received stream
//! copied out of its buffer or one copy of the input would exceed it.
//!
//! The thread transport ships each send buffer to its receiver. Where the
//! ranks' messages differ in size (SparDL's blocks at P = 3, 5 or 8,
//! B-SAG's `h` at P = 4, Ok-Topk's pieces at 8), a rank's pool sometimes holds no buffer of the
//! size its next send needs, and it allocates one (a few tens of KB): the
//! transport's, not the algorithm's, so those rank counts are left out
//! here. Under MPI, where nothing travels with a message, `mpi-suite warm`
//! holds every algorithm but the hierarchical one and the planner to the
//! same bound at P = 2..5 (Zen, OmniReduce and DSAR on threads:
//! `warm_alloc_zen.rs`, `warm_alloc_dsar.rs`).

use sparse_coll::testing::CountingAlloc;
use sparse_coll::{Defaults, Reduced, Registry, ThreadCluster, Transport};
use sparse_core::SparseVec;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn asked() -> u64 {
    CountingAlloc::asked()
}

const DIM: usize = 1 << 20;
/// Entries per rank: every message carries a share of them.
const NNZ: usize = 12_000;
/// At least what one message of any of these algorithms carries here.
const MIN_MESSAGE: u64 = 4 * NNZ as u64 / 2;
/// Bookkeeping a warm call may allocate: the entry agreement's few words,
/// vectors of spans and views, one per rank or round.
const SMALL: u64 = 8 << 10;

/// Rank `r`'s input: `NNZ` indices, half of them shared by every rank.
fn input(r: usize) -> SparseVec<f32> {
    let mut idx: Vec<u32> = (0..NNZ as u32 / 2)
        .map(|i| i * 61)
        .chain((0..NNZ as u32 / 2).map(|i| 7 + i * 67 + r as u32 * 3))
        .collect();
    idx.sort_unstable();
    idx.dedup();
    let val = idx.iter().map(|&i| (i % 13) as f32 - 6.5).collect();
    SparseVec::new(DIM, idx, val).expect("a valid input")
}

/// The bytes each rank allocated in its fourth call of `spec` on `p`
/// ranks.
fn warm_bytes(spec: &str, p: usize) -> Vec<u64> {
    let registry = Registry::<f32>::builtin();
    ThreadCluster::new(p)
        .run(|t| {
            let mut algo = registry.build(spec, Defaults::k(NNZ)?)?;
            let v = input(t.rank());
            let mut out = Reduced::default();
            for _ in 0..3 {
                algo.allreduce_into(t, &v, &mut out)?;
            }
            let before = asked();
            algo.allreduce_into(t, &v, &mut out)?;
            Ok(asked() - before)
        })
        .into_iter()
        .collect::<sparse_core::Result<Vec<_>>>()
        .expect("the calls succeed")
}

#[test]
fn warm_calls_allocate_nothing_that_grows_with_the_data() {
    const { assert!(MIN_MESSAGE > 2 * SMALL, "the bound must separate the cases") };
    // SSAR_Recursive_double on the thread transport: powers of two (the
    // fold's messages differ in size and the pool regrows a buffer).
    for (spec, ranks) in [
        ("topk_a", &[2, 3, 4, 5, 8][..]),
        ("ssar_recursive_double", &[2, 4, 8][..]),
        ("gtopk", &[2, 3, 4, 5, 8][..]),
        ("spardl", &[2, 4][..]),
        ("spardl_rsag", &[2, 4][..]),
        ("spardl_bsag", &[2][..]),
        ("ok_topk:k=4000", &[2, 3, 4, 5][..]),
    ] {
        for &p in ranks {
            let bytes = warm_bytes(spec, p);
            assert!(
                bytes.iter().all(|&b| b <= SMALL),
                "{spec} at P = {p}: a warm call allocated {bytes:?} bytes per rank (at most {SMALL})"
            );
        }
    }
}
