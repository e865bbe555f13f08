//! The collective test suite, written once and generic over the transport
//! (feature `testing`): every rank of any [`Transport`] calls
//! [`collective_suite`], which runs every algorithm on a matrix of seeded
//! inputs and checks, on every rank, against oracles that every rank can
//! compute (all ranks generate all ranks' inputs from the same seeds):
//!
//! - results are bitwise identical on every rank (each rank's result is
//!   allgathered and compared);
//! - lossless algorithms give the dense sum exactly (integer-valued inputs)
//!   and drop nothing;
//! - lossy ones conserve the sum exactly: the inputs equal `result` plus
//!   every rank's `dropped`, and the result keeps its budget;
//! - every rank's rounds equal the algorithm's formula, and, where the bytes
//!   follow from the inputs alone, its bytes too.
//!
//! Failures panic with the case, the algorithm and the rank, so a thread
//! cluster reports them as that rank's error and an MPI program aborts.

use crate::dense::bruck_allgather;
use crate::sparse::{put_block, take_block};
use crate::{Algorithm, Allreduce, Traffic, Transport};
use sparse_core::stats::{even_len, even_start};
use sparse_core::testing::generate::{GradientSpec, Skew, ValueDist};
use sparse_core::{Result, SparseVec, Stream};

/// One input of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Case {
    /// Dimension.
    pub dim: usize,
    /// Non-zeros per contributing rank, as a fraction of `dim`.
    pub density: f64,
    /// Fraction of indices shared by all ranks.
    pub overlap: f64,
    /// Whether indices crowd into a few partitions (Zen's skew).
    pub skew: bool,
    /// Seed.
    pub seed: u64,
}

/// The matrix: dimensions 1, 97, 1000 and 10007 (not divisible by most
/// `P`), overlap 0, 0.5 and 1, skewed and uniform indices.
pub fn cases(p: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for (dim, density) in [(1usize, 1.0), (97, 0.05), (1000, 0.01), (10_007, 0.02)] {
        for overlap in [0.0, 0.5, 1.0] {
            for skew in [false, true] {
                if dim == 1 && (overlap < 1.0 || skew) {
                    continue; // one coordinate: every rank holds it
                }
                out.push(Case {
                    dim,
                    density,
                    overlap,
                    skew: skew && dim > 4,
                    seed: (p * 31 + dim) as u64 + (overlap * 10.0) as u64,
                });
            }
        }
    }
    out
}

/// Every rank's input for `case`: integer values (sums are exact in
/// floating point), and every third rank contributes nothing.
///
/// # Errors
/// An infeasible case.
pub fn inputs(p: usize, case: &Case) -> Result<Vec<SparseVec<f32>>> {
    let spec = GradientSpec {
        overlap: case.overlap,
        skew: case.skew.then_some(Skew {
            partitions: 4,
            ratio: 3.0,
        }),
        values: ValueDist::Integer { max: 100 },
        ..GradientSpec::new(case.dim, case.density, case.seed)
    };
    let mut v = spec.generate::<f32>(p)?;
    for (r, x) in v.iter_mut().enumerate() {
        if r % 3 == 2 {
            *x = SparseVec::zeros(case.dim)?;
        }
    }
    Ok(v)
}

/// The algorithms the suite runs on `p` ranks with budget `k`: every named
/// one, R-SAG with the largest power of two up to 4 dividing `P`, B-SAG with
/// the smallest divisor above 1 of `P`.
pub fn algorithms(p: usize, k: usize) -> Vec<Algorithm> {
    let rsag = [4usize, 2, 1].into_iter().find(|d| p % d == 0).unwrap_or(1);
    let bsag = (2..=p).find(|d| p % d == 0).unwrap_or(1);
    Algorithm::all(k, rsag, bsag)
        .into_iter()
        .filter(|a| a.name() != "dsar_qsgd")
        .collect()
}

fn lg(p: usize) -> u64 {
    (usize::BITS - (p - 1).leading_zeros()) as u64
}

/// Rank `r`'s rounds in a first call of `algo` on `p` ranks.
pub fn expected_rounds(algo: Algorithm, p: usize, r: usize) -> u64 {
    let pu = p as u64;
    let pp = 1usize << p.ilog2();
    let rem = p - pp;
    // MPICH's fold: the folded rank sits out, its partner does two more.
    let fold = |core: u64| match (r < 2 * rem, r % 2 == 0) {
        (true, true) => 2,
        (true, false) => core + 2,
        _ => core,
    };
    if p == 1 {
        return 0;
    }
    match algo {
        Algorithm::TopkA => lg(p),
        Algorithm::TopkDsa => (pu - 1) + fold(pp.ilog2() as u64),
        Algorithm::SsarRecursiveDouble => fold(pp.ilog2() as u64),
        Algorithm::SsarSplitAllgather | Algorithm::DsarSplitAllgather { .. } => (pu - 1) + lg(p),
        Algorithm::ZenBalancedParallelism { .. } | Algorithm::OmniReduceBlocks { .. } => {
            2 * (pu - 1)
        }
        Algorithm::Gtopk { .. } => {
            // Binomial trees: a rank receives from each child and sends to
            // its parent, then the mirror image.
            let low = if r == 0 {
                p.next_power_of_two()
            } else {
                1 << r.trailing_zeros()
            };
            let children = (0..low.ilog2()).filter(|&i| r + (1 << i) < p).count() as u64;
            2 * (children + u64::from(r != 0))
        }
        Algorithm::OkTopk { .. } => (pu - 1) + 3 * lg(p),
        Algorithm::Spardl { .. } => 2 * lg(p),
        Algorithm::SpardlRsag { d, .. } => 2 * lg(p / d) + d.ilog2() as u64,
        Algorithm::SpardlBsag { d, .. } => 2 * lg(p / d) + lg(d),
    }
}

/// Rank `r`'s bytes received where they follow from the inputs alone:
/// TopkA (a framed block per other rank), the split-allgather family (the
/// split pieces, then each partition's stream block), `None` otherwise.
pub fn expected_bytes(algo: Algorithm, ins: &[SparseVec<f32>], r: usize) -> Option<u64> {
    let (p, dim) = (ins.len(), ins[0].dim());
    let others = || (0..p).filter(move |&q| q != r);
    let range = |q: usize| even_start(q, dim, p)..even_start(q, dim, p) + even_len(q, dim, p);
    let count = |v: &SparseVec<f32>, q: usize| {
        v.indices()
            .iter()
            .filter(|&&i| range(q).contains(&(i as usize)))
            .count()
    };
    let block = |q: usize, dense: bool| {
        let mut union: Vec<u32> = ins
            .iter()
            .flat_map(|v| v.indices().iter().copied())
            .filter(|&i| range(q).contains(&(i as usize)))
            .collect();
        union.sort_unstable();
        union.dedup();
        let len = range(q).len();
        if dense || union.len() > Stream::<f32>::delta(len) {
            1 + 4 * len
        } else {
            5 + 8 * union.len()
        }
    };
    let split = |dense: bool| -> usize {
        others().map(|q| 5 + 8 * count(&ins[q], r)).sum::<usize>()
            + others().map(|q| 4 + block(q, dense)).sum::<usize>()
    };
    let bytes = match algo {
        Algorithm::TopkA => others().map(|q| 4 + 8 * ins[q].nnz()).sum(),
        Algorithm::SsarSplitAllgather => split(false),
        Algorithm::DsarSplitAllgather { qsgd: None } => split(true),
        Algorithm::TopkDsa => {
            let rem = p - (1usize << p.ilog2());
            match (r < 2 * rem, r % 2 == 0) {
                (true, true) => split(false) + 4 + block(r, false),
                (true, false) => split(false) - 4,
                _ => split(false),
            }
        }
        _ => return None,
    };
    Some(bytes as u64)
}

/// The budget the suite gives the lossy algorithms for an input.
pub fn budget(case: &Case) -> usize {
    ((case.density * case.dim as f64) as usize).max(1) * 2
}

/// Runs the whole suite on this rank; every rank of `t` must call it.
/// Returns the number of (algorithm, input) runs checked.
///
/// # Errors
/// Transport errors. Failed checks panic (see the module docs).
pub fn collective_suite<T: Transport + ?Sized>(t: &mut T) -> Result<usize> {
    let (p, r) = (t.size(), t.rank());
    let mut runs = 0;
    for case in cases(p) {
        let ins = inputs(p, &case)?;
        let dim = case.dim;
        let mut oracle = vec![0.0f32; dim];
        for v in &ins {
            v.add_to_dense(&mut oracle);
        }
        let k = budget(&case);
        for algo in algorithms(p, k) {
            let ctx = format!("{} P={p} rank {r} {case:?}", algo.name());
            let red = Allreduce::new(algo)?.run(t, &ins[r])?;
            // Every rank's result, dropped and traffic, on every rank.
            let mut mine = Vec::new();
            put_block(&mut mine, &red.result);
            put_block(&mut mine, &red.dropped);
            for x in [red.traffic.bytes_recv, red.traffic.rounds] {
                mine.extend_from_slice(&x.to_le_bytes());
            }
            let all = bruck_allgather(t, &mine)?;
            let mut total = vec![0.0f32; dim];
            let mut traffic = Vec::new();
            for (q, b) in all.iter().enumerate() {
                let mut rest: &[u8] = b;
                let result: SparseVec<f32> = take_block(&mut rest, dim, 0, dim, "suite")?;
                let dropped: SparseVec<f32> = take_block(&mut rest, dim, 0, dim, "suite")?;
                assert_eq!(rest.len(), 16, "{ctx}: message from rank {q}");
                let word = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().expect("8"));
                traffic.push(Traffic {
                    bytes_recv: word(0),
                    rounds: word(8),
                    ..Traffic::default()
                });
                assert_eq!(
                    result.indices(),
                    red.result.indices(),
                    "{ctx}: rank {q}'s pattern"
                );
                let bits = |v: &SparseVec<f32>| -> Vec<u32> {
                    v.values().iter().map(|x| x.to_bits()).collect()
                };
                assert_eq!(bits(&result), bits(&red.result), "{ctx}: rank {q}'s bits");
                if q == 0 {
                    result.add_to_dense(&mut total);
                }
                dropped.add_to_dense(&mut total);
            }
            if algo.lossless() {
                assert_eq!(red.result.to_dense(), oracle, "{ctx}: the exact sum");
                assert_eq!(red.dropped.nnz(), 0, "{ctx}: lossless drops nothing");
            } else {
                if let Some(i) = (0..dim).find(|&i| total[i] != oracle[i]) {
                    panic!(
                        "{ctx}: coordinate {i}: result + dropped = {}, inputs sum to {}",
                        total[i], oracle[i]
                    );
                }
                // Ok-Topk's budget: max(k, floor(1.3 k)).
                let most = match algo {
                    Algorithm::OkTopk { .. } => k.max(k * 13 / 10),
                    _ => k,
                };
                assert!(
                    red.result.nnz() <= most,
                    "{ctx}: {} > {most}",
                    red.result.nnz()
                );
            }
            for (q, tr) in traffic.iter().enumerate() {
                assert_eq!(
                    tr.rounds,
                    expected_rounds(algo, p, q),
                    "{ctx}: rank {q}'s rounds"
                );
                if let Some(b) = expected_bytes(algo, &ins, q) {
                    assert_eq!(tr.bytes_recv, b, "{ctx}: rank {q}'s bytes");
                }
            }
            runs += 1;
        }
    }
    Ok(runs)
}

/// The ways a vector built with `SparseVec::new_unchecked` can break its
/// invariants.
pub const BAD_INPUTS: [&str; 4] = ["out of range", "unsorted", "duplicate", "lengths differ"];

/// An invalid vector of dimension `dim >= 4` of the given kind
/// ([`BAD_INPUTS`]).
pub fn bad_input(kind: &str, dim: usize) -> SparseVec<f32> {
    let d = dim as u32;
    let (idx, val) = match kind {
        "out of range" => (vec![0, d - 1, d + 5], vec![1.0, 2.0, 3.0]),
        "unsorted" => (vec![2, 1, 3], vec![1.0, 2.0, 3.0]),
        "duplicate" => (vec![1, 1, 3], vec![1.0, 2.0, 3.0]),
        _ => (vec![0, 1, 2], vec![1.0, 2.0]),
    };
    SparseVec::new_unchecked(dim, idx, val)
}

/// Every algorithm (DSAR with QSGD included) with an invalid input on one
/// rank (each rank in turn, each kind of [`BAD_INPUTS`]): every rank returns
/// an error, the bad rank its own ([`sparse_core::Error::IndexOutOfRange`],
/// `NotStrictlyIncreasing` or `LengthMismatch`), the others
/// [`sparse_core::Error::PeerError`] naming it; then a valid call on the
/// same transport succeeds (the failed call left no message behind).
/// Returns the number of calls checked.
///
/// # Errors
/// Transport errors. Failed checks panic.
pub fn bad_input_suite<T: Transport + ?Sized>(t: &mut T) -> Result<usize> {
    use sparse_core::Error;
    let (p, r) = (t.size(), t.rank());
    let dim = 97;
    let good = SparseVec::new(dim, vec![3, 50], vec![1.0f32, -2.0])?;
    let mut calls = 0;
    for algo in Algorithm::all(4, 1, 1) {
        for (n, kind) in BAD_INPUTS.iter().enumerate() {
            let bad = (n + calls) % p;
            let input = if r == bad {
                bad_input(kind, dim)
            } else {
                good.clone()
            };
            let ctx = format!("{} P={p} rank {r}, {kind} on rank {bad}", algo.name());
            let mut runner = Allreduce::new(algo)?;
            match runner.run(t, &input) {
                Ok(red) => panic!("{ctx}: accepted ({} entries)", red.result.nnz()),
                Err(Error::PeerError { rank, .. }) if r != bad => {
                    assert_eq!(rank, bad, "{ctx}: names the bad rank");
                }
                Err(
                    Error::IndexOutOfRange { .. }
                    | Error::NotStrictlyIncreasing { .. }
                    | Error::LengthMismatch { .. },
                ) if r == bad => {}
                Err(e) => panic!("{ctx}: unexpected error {e}"),
            }
            let red = runner.run(t, &good)?;
            if algo.lossless() {
                let want = SparseVec::new(dim, vec![3, 50], vec![p as f32, -2.0 * p as f32])?;
                assert_eq!(red.result, want, "{ctx}: the next call works");
            }
            calls += 1;
        }
    }
    Ok(calls)
}
