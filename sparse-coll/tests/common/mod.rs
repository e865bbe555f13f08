//! Inputs, oracle and runner shared by the collective tests.
#![allow(dead_code)]

use sparse_coll::sim::{Op, Trace};
use sparse_coll::testing::{cases, collective_suite_for, real_cases};
use sparse_coll::{Reduced, Registry, ThreadCluster, ThreadTransport, Transport};
use sparse_core::stats::{even_len, even_start};
use sparse_core::testing::generate::{GradientSpec, Skew, ValueDist};
use sparse_core::{Result, SparseVec};

/// The rank counts every collective is tested with.
pub const RANKS: [usize; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17];

/// Per-rank inputs: integer values; every third rank contributes nothing.
pub fn inputs(
    p: usize,
    dim: usize,
    density: f64,
    overlap: f64,
    skew: bool,
    seed: u64,
) -> Vec<SparseVec<f32>> {
    let spec = GradientSpec {
        overlap,
        skew: skew.then_some(Skew {
            partitions: 4.min(dim),
            ratio: 3.0f64.min(4.min(dim) as f64),
        }),
        values: ValueDist::Integer { max: 100 },
        ..GradientSpec::new(dim, density, seed)
    };
    let mut v = spec.generate::<f32>(p).expect("feasible spec");
    for (r, x) in v.iter_mut().enumerate() {
        if r % 3 == 2 {
            *x = SparseVec::zeros(dim).unwrap();
        }
    }
    v
}

/// Runs `f` on `p` thread ranks, rank `r` on `inputs[r]`.
pub fn run<F>(p: usize, inputs: &[SparseVec<f32>], f: F) -> Vec<Reduced<f32>>
where
    F: Fn(&mut ThreadTransport, &SparseVec<f32>) -> Result<Reduced<f32>> + Sync,
{
    ThreadCluster::new(p)
        .run(|t| f(t, &inputs[t.rank()]))
        .into_iter()
        .map(|r| r.expect("rank succeeded"))
        .collect()
}

/// The dense sum of the inputs.
pub fn oracle(inputs: &[SparseVec<f32>]) -> Vec<f32> {
    let mut sum = vec![0.0f32; inputs[0].dim()];
    for v in inputs {
        v.add_to_dense(&mut sum);
    }
    sum
}

/// The values of `v` as bits, for bitwise comparisons.
pub fn bits(v: &SparseVec<f32>) -> Vec<u32> {
    v.values().iter().map(|x| x.to_bits()).collect()
}

/// Asserts the contract of a lossy allreduce on integer-valued inputs:
/// every rank holds the same result, bit for bit, and the inputs sum
/// exactly to the result plus every rank's `dropped`.
pub fn assert_conserved(ins: &[SparseVec<f32>], out: &[Reduced<f32>], ctx: &str) {
    let mut total = out[0].result.to_dense();
    for (r, red) in out.iter().enumerate() {
        assert_eq!(
            red.result.indices(),
            out[0].result.indices(),
            "{ctx} rank {r}: same pattern as rank 0"
        );
        assert_eq!(
            bits(&red.result),
            bits(&out[0].result),
            "{ctx} rank {r}: bitwise identical"
        );
        red.dropped.add_to_dense(&mut total);
    }
    let want = oracle(ins);
    if let Some(i) = (0..want.len()).find(|&i| total[i] != want[i]) {
        panic!(
            "{ctx}: coordinate {i}: result + all dropped = {}, inputs sum to {}",
            total[i], want[i]
        );
    }
}

/// Asserts that `result` keeps at most its share of `k` in each of the `m`
/// even blocks of SparDL's layout (`k / m`, one more for the first `k % m`
/// blocks, at most the block's length).
pub fn assert_within_shares(result: &SparseVec<f32>, m: usize, k: usize, ctx: &str) {
    let dim = result.dim();
    for j in 0..m {
        let (lo, len) = (even_start(j, dim, m), even_len(j, dim, m));
        let share = (k / m + usize::from(j < k % m)).min(len);
        let n = result
            .indices()
            .iter()
            .filter(|&&i| (lo..lo + len).contains(&(i as usize)))
            .count();
        assert!(n <= share, "{ctx} block {j}: {n} > {share}");
    }
}

/// Asserts that every rank returned `Error::Disagreement` about `what`.
pub fn assert_all_disagree<T: std::fmt::Debug>(out: &[Result<T>], what: &str, ctx: &str) {
    for (r, res) in out.iter().enumerate() {
        assert!(
            matches!(res, Err(sparse_core::Error::Disagreement { what: w, .. }) if *w == what),
            "{ctx} rank {r}: {res:?}"
        );
    }
}

/// The top `k` entries of `v` by magnitude, ties to the lower index, found
/// by sorting: the brute-force oracle of every cut.
pub fn topk_by_sort(v: &SparseVec<f32>, k: usize) -> SparseVec<f32> {
    let mut order: Vec<(u32, f32)> = v.iter().collect();
    order.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
    order.truncate(k);
    order.sort_by_key(|e| e.0);
    let (i, x) = order.into_iter().unzip();
    SparseVec::new(v.dim(), i, x).unwrap()
}

/// The collective suite for `spec` of `registry` on `p` thread ranks with
/// synchronous sends: each rank that fails, or runs another number of
/// cases than the suite's, adds a line to `failures`. Returns the ranks
/// that passed.
pub fn suite_on_threads(
    registry: &Registry<f32>,
    p: usize,
    spec: &str,
    failures: &mut Vec<String>,
) -> usize {
    let mut passed = 0;
    for (r, res) in ThreadCluster::new(p)
        .synchronous(true)
        .run(|t| collective_suite_for(t, registry, spec))
        .into_iter()
        .enumerate()
    {
        match res {
            Ok(n) if n == cases(p).len() + real_cases(p).len() => passed += 1,
            Ok(n) => failures.push(format!("{spec} P={p} rank {r}: {n} cases ran")),
            Err(e) => failures.push(format!("{spec} P={p} rank {r}: {e}")),
        }
    }
    passed
}

/// A chain of `ranks` ranks: each receives from the one before it, then
/// sends `bytes` to the one after.
pub fn chain(ranks: usize, bytes: usize) -> Vec<Trace> {
    (0..ranks)
        .map(|r| {
            let mut t = Vec::new();
            if r > 0 {
                t.push(Op::Recv { from: r - 1 });
            }
            if r + 1 < ranks {
                t.push(Op::Send { to: r + 1, bytes });
            }
            t
        })
        .collect()
}
