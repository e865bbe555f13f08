//! Once warm, DSAR_Split_allgather and DSAR with QSGD allocate nothing
//! that grows with the data (issue 30): with a counting allocator as the
//! oracle, each rank's bytes allocated during a call of `allreduce_into`,
//! after warm-up calls on the same input, stay under `SMALL`, while each
//! rank's dense partition alone is far larger (and its QSGD section too).
//! A fresh dense partition, its encoding, a decoded partition or the
//! probe of the dense result would each exceed it.

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
/// At most `P = 5`: the smallest partition's QSGD section at 2 bits (its
/// codes alone), below its dense stream.
const MIN_PARTITION: u64 = (DIM / 5) as u64 * 2 / 8;
/// Bookkeeping a warm call may allocate: the entry agreement's few words,
/// vectors of spans and views, one per rank or round.
const SMALL: u64 = 8 << 10;
/// Calls before the one measured. The thread transport ships each send's
/// pooled buffer to its receiver and lends a send only a buffer with a
/// sixteenth to spare, so where two ranks' split messages differ a little
/// in size a rank replaces a few of the buffers it gives away before
/// enough of them circulate: five calls settle it here, where three settle
/// the symmetric traffic of `warm_alloc.rs`.
const WARM: usize = 6;

/// Rank `r`'s input: `NNZ` indices spread over the whole dimension (so
/// that every rank sends every partition's owner a like share: the thread
/// transport ships a send's buffer to its receiver, and traffic skewed
/// one way would make a rank replace the buffers it gives away), half of
/// them shared by every rank.
fn input(r: usize) -> SparseVec<f32> {
    let mut idx: Vec<u32> = (0..NNZ as u32 / 2)
        .map(|i| i * 173)
        .chain((0..NNZ as u32 / 2).map(|i| 7 + i * 163 + r as u32 * 3))
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
            for _ in 0..WARM {
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
fn warm_dsar_calls_allocate_nothing_that_grows_with_the_data() {
    const {
        assert!(
            MIN_PARTITION > 4 * SMALL,
            "the bound must separate the cases"
        )
    };
    for spec in [
        "dsar_split_allgather",
        "dsar_qsgd",
        "dsar_qsgd:bits=2,bucket=64",
        "dsar_split_allgather:qsgd=8",
    ] {
        for p in [2, 3, 4, 5] {
            let bytes = warm_bytes(spec, p);
            assert!(
                bytes.iter().all(|&b| b <= SMALL),
                "{spec} at P = {p}: a warm call allocated {bytes:?} bytes per rank (at most {SMALL})"
            );
        }
    }
}
