//! Once warm, Zen's Balanced Parallelism and the OmniReduce-style blocks
//! allocate nothing that grows with the data (issue 30.5): their pieces,
//! received parts, sums and messages live in buffers kept by the algorithm
//! and the transport's pool. The
//! oracle is a counting allocator, as in `warm_alloc.rs`: each rank's bytes
//! allocated during a call of `allreduce_into`, after warm-up calls on the
//! same input, stay under `SMALL`, while each message carries at least
//! `MIN_MESSAGE` bytes (the pulled hash bitmap alone is `DIM / 8 / P`
//! bytes).

use sparse_coll::testing::CountingAlloc;
use sparse_coll::{Defaults, Reduced, Registry, ThreadCluster, Transport};
use sparse_core::SparseVec;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn asked() -> u64 {
    CountingAlloc::asked()
}

const DIM: usize = 1 << 20;
/// Entries per rank.
const NNZ: usize = 12_000;
/// At least what one pushed message carries here (`NNZ / P` pairs, or
/// their blocks, P <= 5).
const MIN_MESSAGE: u64 = 8 * NNZ as u64 / 5;
/// Bookkeeping a warm call may allocate: the entry agreement's few words,
/// vectors of views, one per rank, the encodings' boxes.
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
/// ranks, and the result of that call.
fn warm_bytes(spec: &str, p: usize) -> Vec<(u64, Reduced<f32>)> {
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
            Ok((asked() - before, out))
        })
        .into_iter()
        .collect::<sparse_core::Result<Vec<_>>>()
        .expect("the calls succeed")
}

#[test]
fn warm_push_pull_calls_allocate_nothing_that_grows_with_the_data() {
    const { assert!(MIN_MESSAGE > 2 * SMALL, "the bound must separate the cases") };
    for (spec, p) in ["zen_balanced_parallelism", "omnireduce_blocks"]
        .into_iter()
        .flat_map(|s| [2, 3, 4, 5].map(|p| (s, p)))
    {
        let got = warm_bytes(spec, p);
        let bytes: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert!(
            bytes.iter().all(|&b| b <= SMALL),
            "{spec} at P = {p}: a warm call allocated {bytes:?} bytes per rank (at most {SMALL})"
        );
        // The warm call's result is the exact sum, as a fresh call's.
        let fresh = ThreadCluster::new(p).run(|t| {
            let mut algo = Registry::<f32>::builtin().build(spec, Defaults::k(NNZ)?)?;
            let v = input(t.rank());
            algo.allreduce(t, &v)
        });
        for ((_, warm), fresh) in got.iter().zip(fresh) {
            let fresh = fresh.expect("a fresh call succeeds");
            assert_eq!(warm.result, fresh.result, "{spec} at P = {p}");
            assert_eq!(warm.traffic, fresh.traffic, "{spec} at P = {p}");
        }
    }
}
