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
//! cluster reports them as that rank's error (printing the first rank's
//! panic only, not one per rank) and an MPI program aborts.

use crate::algorithm::Defaults;
use crate::dense::bruck_allgather;
use crate::entry::Reduced;
use crate::frame::{put_block, take_block};
use crate::registry::Registry;
use crate::transport::{Intercept, Intercepting};
use crate::{Profile, Traffic, Transport};
use sparse_core::testing::generate::{GradientSpec, Skew, ValueDist};
use sparse_core::{Result, SparseVec};

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
/// `P`), overlap 0, 0.5 and 1, skewed and uniform indices; and one input of
/// dimension 100,003 at density 8% and overlap 0.5 (8,000 entries per rank,
/// a union past 2^16 at 17 ranks), past any small threshold of dimension,
/// entries or result size an algorithm might switch at.
pub fn cases(p: usize) -> Vec<Case> {
    let mut out = vec![Case {
        dim: 100_003,
        density: 0.08,
        overlap: 0.5,
        skew: false,
        seed: (p * 31) as u64 + 100_003,
    }];
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
/// floating point), and every third rank contributes nothing (with real
/// values, in [`collective_suite_for`], every rank contributes, so that
/// three or more terms meet at an index from `P = 3` on and a sum whose
/// order depends on the rank shows in the bits).
///
/// # Errors
/// An infeasible case.
pub fn inputs(p: usize, case: &Case) -> Result<Vec<SparseVec<f32>>> {
    inputs_of(p, case, true)
}

/// The cases [`collective_suite_for`] also runs with real (normal) values:
/// two of the matrix's shapes.
pub fn real_cases(p: usize) -> Vec<Case> {
    cases(p)
        .into_iter()
        .filter(|c| {
            (c.dim == 1000 && c.overlap == 0.5 && !c.skew)
                || (c.dim == 10_007 && c.skew && c.overlap == 1.0)
        })
        .collect()
}

/// [`inputs`], with integer values or normal ones.
fn inputs_of(p: usize, case: &Case, integer: bool) -> Result<Vec<SparseVec<f32>>> {
    let spec = GradientSpec {
        overlap: case.overlap,
        skew: case.skew.then_some(Skew {
            partitions: 4,
            ratio: 3.0,
        }),
        values: if integer {
            ValueDist::Integer { max: 100 }
        } else {
            ValueDist::Normal { std: 10.0 }
        },
        ..GradientSpec::new(case.dim, case.density, case.seed)
    };
    let mut v = spec.generate::<f32>(p)?;
    for (r, x) in v.iter_mut().enumerate() {
        if integer && r % 3 == 2 {
            *x = SparseVec::zeros(case.dim)?;
        }
    }
    Ok(v)
}

/// The algorithms the suite runs on `p` ranks, as registry specs: what
/// each built-in one names for itself ([`crate::Registered::suite_specs`]:
/// every one but the planner, whose profiling round changes the rounds
/// and which `tests/plan.rs` checks; the teams of the SparDL variants),
/// and those that take `values` with each codec of the registry
/// ([`Registry::suite_specs`]; a registry with a user's codec added runs
/// it through each of them). The budget of the lossy ones comes from the
/// [`Defaults`] of each case ([`budget`]).
pub fn algorithms(p: usize) -> Vec<String> {
    Registry::<f32>::builtin().suite_specs(p)
}

fn lg(p: usize) -> u64 {
    (usize::BITS - (p - 1).leading_zeros()) as u64
}

/// The budget the suite gives the lossy algorithms for an input: twice
/// the input's density (at most all of it), so that cuts happen where
/// ranks' entries meet and where they do not.
pub fn budget(case: &Case) -> Defaults {
    Defaults::density((2.0 * case.density).min(1.0)).expect("the cases' densities are in (0, 1]")
}

/// The last check of [`collective_suite_for`]: no message is left unread
/// on any link, a rank's link to itself included. Every rank sends a
/// marker along every link in `P` exchange rounds (to `r + s`, from
/// `r - s`, for `s` in `0..P`) and must receive markers only: a message an
/// algorithm sent and never received arrives first instead.
///
/// # Errors
/// Transport errors. A stray message panics, naming its link.
fn check_nothing_unread(t: &mut dyn Transport, spec: &str) -> Result<()> {
    const MARKER: &[u8] = b"collective suite: end of calls";
    let (p, r) = (t.size(), t.rank());
    for s in 0..p {
        let (to, from) = ((r + s) % p, (r + p - s) % p);
        let got = t.exchange(to, MARKER, from)?;
        assert!(
            got == MARKER,
            "{spec} P={p}: rank {r} found a message from rank {from} left unread \
             ({} bytes) after the calls",
            got.len()
        );
    }
    Ok(())
}

/// Runs the whole suite on this rank with every built-in algorithm
/// ([`algorithms`]); every rank of `t` must call it. Returns the number of
/// (algorithm, input) runs checked.
///
/// # Errors
/// Transport errors and the algorithms' errors. Failed checks panic (see
/// the module docs).
pub fn collective_suite(t: &mut dyn Transport) -> Result<usize> {
    collective_suite_in(t, &Registry::builtin())
}

/// [`collective_suite`] on the algorithms of `registry`
/// ([`Registry::suite_specs`]): each of its algorithms, and each that takes
/// `values` with every codec the registry holds (a user's own included).
/// Returns the number of (algorithm, input) runs checked.
///
/// # Errors
/// As [`collective_suite`].
pub fn collective_suite_in(t: &mut dyn Transport, registry: &Registry<f32>) -> Result<usize> {
    let mut runs = 0;
    for spec in registry.suite_specs(t.size()) {
        runs += collective_suite_for(t, registry, &spec)?;
    }
    Ok(runs)
}

/// The suite for one algorithm of `registry` (a user's own included),
/// built from `spec` afresh for every input of the matrix with the input's
/// budget as its default ([`budget`]). Checks what every algorithm promises, on
/// three calls of the same instance (its state kept across calls):
/// identical results on every rank, bit for bit, and the exact sum
/// or exact conservation on integer-valued inputs; on real-valued inputs
/// (where sums depend on the order of additions) identical bits on every
/// rank and the sum within a rounding bound. `allreduce_into` must give
/// what `allreduce` gives. The traffic a call reports (its body's and its
/// entry round's, [`Reduced::total`]) must add up to what the transport
/// counted during the call, and the entry round be an agreement: at least
/// `ceil(lg P)` rounds of one message each way, as many bytes sent as
/// received; a rank whose result holds what its input does not must report
/// receiving something. Its [`crate::SparseAllreduce::cost`] must be finite
/// and non-negative (rounds and words), and within
/// [`COST_FACTOR`] of the bytes the busiest rank receives in a first call
/// (the planner trusts it). Also what the algorithm
/// says of itself: its result's bound
/// ([`crate::Promises::max_result_entries`]), and in a first call
/// its rounds and bytes where it names them
/// ([`crate::Promises::expected_rounds`],
/// [`crate::Promises::expected_bytes`]). Last, that no message is
/// left unread on any link.
///
/// Run it on [`crate::ThreadCluster::synchronous`] threads: sends then
/// wait for their receive, as MPI's do past its eager limit, so a scheme
/// that sends before it receives on both sides fails here (a timeout)
/// instead of passing and deadlocking under MPI.
/// Returns the number of inputs checked.
///
/// # Errors
/// Transport errors and the algorithm's errors. Failed checks panic.
pub fn collective_suite_for(
    t: &mut dyn Transport,
    registry: &Registry<f32>,
    spec: &str,
) -> Result<usize> {
    let (p, r) = (t.size(), t.rank());
    let mut runs = 0;
    // Kept across the cases, as a caller of `allreduce_into` keeps it.
    let mut reused = Reduced::default();
    let integer = cases(p).into_iter().map(|c| (c, true));
    let real = real_cases(p).into_iter().map(|c| (c, false));
    for (case, exact) in integer.chain(real) {
        let ins = inputs_of(p, &case, exact)?;
        let defaults = budget(&case);
        let mut algo = registry.build(spec, defaults)?;
        // What the algorithm promises of a first call, by rank (no rounds
        // on one rank), and of its result.
        let promises = registry.promises(spec, defaults)?;
        let expected: Vec<_> = (0..p)
            .map(|q| {
                let Some(pr) = &promises else {
                    return (None, None);
                };
                let rounds = pr.expected_rounds(p, q).map(|n| if p == 1 { 0 } else { n });
                (rounds, pr.expected_bytes(&ins, q))
            })
            .collect();
        // What the fresh instance predicts of its first call (for the
        // planner, the cost of what it ran, as it chose from an estimate).
        let prof = Profile::of(&ins);
        let kind = if exact { "integer" } else { "real" };
        let ctx = format!("{spec} P={p} rank {r} {case:?} {kind} values");
        let mut predicted = check_cost(&ctx, algo.cost(&prof)).bytes();
        for call in [1, 2, 3] {
            let ctx = format!("{ctx}, call {call}");
            let before = t.traffic();
            let red = algo.allreduce(t, &ins[r])?;
            check_entry_cost(&ctx, p, &t.traffic().since(&before), &red);
            // A rank whose result holds what its own input does not learned
            // it from a message, which the call must report.
            let own = &ins[r];
            let learned = red.result.iter().any(|(i, x)| {
                own.indices()
                    .binary_search(&i)
                    .map_or(true, |at| own.values()[at].to_bits() != x.to_bits())
            });
            if learned && p > 1 {
                assert!(
                    red.traffic.bytes_recv > 0 && red.traffic.rounds > 0,
                    "{ctx}: the result holds other ranks' entries, but the call reports \
                     receiving nothing: {:?}",
                    red.traffic
                );
            }
            if call == 1
                && let Some(ran) = algo.ran()
            {
                predicted = check_cost(&ctx, registry.build(&ran, defaults)?.cost(&prof)).bytes();
            }
            if call == 1 {
                // `allreduce_into` on a second, fresh instance, into an
                // outcome that still holds the last case's: the same bits
                // and traffic.
                registry
                    .build(spec, defaults)?
                    .allreduce_into(t, &ins[r], &mut reused)?;
                assert!(
                    same_bits(&reused.result, &red.result),
                    "{ctx}: allreduce_into's result"
                );
                assert!(
                    same_bits(&reused.dropped, &red.dropped),
                    "{ctx}: allreduce_into's dropped"
                );
                assert_eq!(
                    (reused.traffic, reused.entry),
                    (red.traffic, red.entry),
                    "{ctx}: allreduce_into's traffic"
                );
            }
            let outcome = Outcome {
                ins: &ins,
                most: promises
                    .as_ref()
                    .and_then(|pr| pr.max_result_entries(case.dim)),
                expected: &expected,
                predicted,
                lossless: algo.lossless(),
                exact,
                first: call == 1,
            };
            check_outcome(t, &ctx, &outcome, &red)?;
        }
        check_state(t, registry, spec, defaults, algo.as_mut(), &ins[r], &ctx)?;
        runs += 1;
    }
    check_nothing_unread(t, spec)?;
    Ok(runs)
}

/// The suite's check of an instance's state
/// ([`crate::SparseAllreduce::save_state`]) after its calls: a fresh
/// instance of `spec` given the state makes the same next call as `algo`,
/// bit for bit (result and dropped); a state the instance refuses is
/// none of this; and after [`crate::SparseAllreduce::reset`] its state is
/// a fresh instance's.
///
/// # Errors
/// Transport errors and the algorithm's errors. Failed checks panic.
fn check_state(
    t: &mut dyn Transport,
    registry: &Registry<f32>,
    spec: &str,
    defaults: Defaults,
    algo: &mut dyn crate::SparseAllreduce<f32>,
    input: &SparseVec<f32>,
    ctx: &str,
) -> Result<()> {
    let saved = algo.save_state()?;
    let mut restored = registry.build(spec, defaults)?;
    let fresh = restored.save_state()?;
    restored.load_state(&saved)?;
    assert!(
        restored.save_state()?.same_bits(&saved),
        "{ctx}: the restored instance saves another state"
    );
    let want = algo.allreduce(t, input)?;
    let got = restored.allreduce(t, input)?;
    assert!(
        same_bits(&got.result, &want.result) && same_bits(&got.dropped, &want.dropped),
        "{ctx}: a fresh instance given the saved state calls otherwise than the saved one"
    );
    algo.reset();
    assert!(
        algo.save_state()?.same_bits(&fresh),
        "{ctx}: after reset the state is not a fresh instance's"
    );
    Ok(())
}

/// Whether two vectors are equal bit for bit.
fn same_bits(a: &SparseVec<f32>, b: &SparseVec<f32>) -> bool {
    a.dim() == b.dim()
        && a.indices() == b.indices()
        && a.values()
            .iter()
            .map(|x| x.to_bits())
            .eq(b.values().iter().map(|x| x.to_bits()))
}

/// What a call reported against what the transport counted during it:
/// its body's and its entry round's traffic add up to the count exactly
/// ([`Reduced::total`]), and the entry round (a Bruck allgather of equal
/// blocks) is symmetric, one message each way per round, and at least
/// `ceil(lg P)` rounds.
fn check_entry_cost(ctx: &str, p: usize, counted: &Traffic, red: &Reduced<f32>) {
    assert_eq!(
        red.total(),
        *counted,
        "{ctx}: the body's traffic {:?} and the entry round's {:?} do not add up to what the \
         transport counted",
        red.traffic,
        red.entry
    );
    let entry = red.entry;
    let shape = (entry.msgs_sent, entry.msgs_recv, entry.bytes_sent);
    assert_eq!(
        shape,
        (entry.rounds, entry.rounds, entry.bytes_recv),
        "{ctx}: the entry round is not an agreement: {entry:?}"
    );
    if p > 1 {
        assert!(
            entry.rounds >= lg(p),
            "{ctx}: no entry agreement ({entry:?}): ranks that disagree would hang"
        );
    }
}

/// `cost`, where both its counts are finite and at least zero; else a
/// failed check naming the field: the planner adds and compares costs,
/// and a NaN compares false both ways.
fn check_cost(ctx: &str, cost: sparse_core::cost::Cost) -> sparse_core::cost::Cost {
    for (field, x) in [("rounds", cost.rounds), ("words", cost.words)] {
        assert!(
            x.is_finite() && x >= 0.0,
            "{ctx}: cost() predicts {x} {field}: a cost must be finite and at least 0 \
             (the planner compares them)"
        );
    }
    cost
}

/// How far a scheme's [`crate::SparseAllreduce::cost`] may be from the
/// bytes its busiest rank receives, in the collective suite: a factor of
/// [`COST_FACTOR`] either way, past [`COST_SLACK`] bytes (headers, and
/// inputs so small that a formula's rounding dominates). The planner
/// ([`crate::Auto`]) chooses by `cost`, so a scheme that claims a tenth of
/// what it sends would win every choice.
pub const COST_FACTOR: f64 = 4.0;
/// See [`COST_FACTOR`].
pub const COST_SLACK: f64 = 1024.0;

/// One call's inputs and what its algorithm promises.
struct Outcome<'a> {
    ins: &'a [SparseVec<f32>],
    /// The most entries a result may hold.
    most: Option<usize>,
    /// Each rank's rounds and bytes in a first call, where known.
    expected: &'a [(Option<u64>, Option<u64>)],
    /// The bytes the busiest rank receives in a first call, by the
    /// algorithm's cost model.
    predicted: f64,
    lossless: bool,
    /// Integer-valued inputs: sums are exact in any order.
    exact: bool,
    /// A first call of a fresh instance: the expected traffic holds.
    first: bool,
}

/// Checks one call's outcome `red` on every rank: every rank's result and
/// dropped part are gathered, the results compared bit for bit, the sum or
/// its conservation checked (exactly, or within a rounding bound), and a
/// algorithm's budget and traffic.
fn check_outcome(
    t: &mut dyn Transport,
    ctx: &str,
    o: &Outcome<'_>,
    red: &Reduced<f32>,
) -> Result<()> {
    let p = t.size();
    let dim = o.ins[0].dim();
    // The dense sum in f64, and the sum of magnitudes: f32 additions in
    // any order of at most `P` terms per coordinate (and as many dropped
    // parts) stay within `4 P eps` of it.
    let mut oracle = vec![0.0f64; dim];
    let mut mags = vec![0.0f64; dim];
    for v in o.ins {
        for (i, x) in v.iter() {
            oracle[i as usize] += f64::from(x);
            mags[i as usize] += f64::from(x.abs());
        }
    }
    let bound = |i: usize| 4.0 * p as f64 * f64::from(f32::EPSILON) * mags[i];
    let (total, traffic) = gather_outcomes(t, ctx, dim, red)?;
    let off = |got: &[f64]| {
        (0..dim).find(|&i| {
            if o.exact {
                got[i] != oracle[i]
            } else {
                (got[i] - oracle[i]).abs() > bound(i)
            }
        })
    };
    if o.lossless {
        assert_eq!(red.dropped.nnz(), 0, "{ctx}: lossless drops nothing");
        let got: Vec<f64> = red.result.to_dense().into_iter().map(f64::from).collect();
        if let Some(i) = off(&got) {
            panic!(
                "{ctx}: coordinate {i}: result {}, inputs sum to {}",
                got[i], oracle[i]
            );
        }
    } else {
        if let Some(i) = off(&total) {
            panic!(
                "{ctx}: coordinate {i}: result + dropped = {}, inputs sum to {}",
                total[i], oracle[i]
            );
        }
        if let Some(most) = o.most {
            assert!(
                red.result.nnz() <= most,
                "{ctx}: {} > {most}",
                red.result.nnz()
            );
        }
    }
    if o.first {
        let busiest = traffic.iter().map(|t| t.bytes_recv).max().unwrap_or(0) as f64;
        let near = |a: f64, b: f64| a <= COST_FACTOR * b + COST_SLACK;
        assert!(
            near(o.predicted, busiest) && near(busiest, o.predicted),
            "{ctx}: cost() predicts {:.0} bytes received by the busiest rank, which received \
             {busiest:.0}: more than a factor of {COST_FACTOR} apart",
            o.predicted
        );
        for (q, (tr, &(rounds, bytes))) in traffic.iter().zip(o.expected).enumerate() {
            if let Some(rounds) = rounds {
                assert_eq!(tr.rounds, rounds, "{ctx}: rank {q}'s rounds");
            }
            if let Some(b) = bytes {
                assert_eq!(tr.bytes_recv, b, "{ctx}: rank {q}'s bytes");
            }
        }
    }
    Ok(())
}

/// Every rank's result, dropped part and traffic (vectors of dimension
/// `dim`), on every rank: checks
/// that every rank's result has this rank's bits, and returns the sum of
/// rank 0's result and every rank's dropped part (in f64), and every
/// rank's traffic (bytes received and rounds).
fn gather_outcomes(
    t: &mut dyn Transport,
    ctx: &str,
    dim: usize,
    red: &Reduced<f32>,
) -> Result<(Vec<f64>, Vec<Traffic>)> {
    let mut mine = Vec::new();
    put_block(&mut mine, &red.result);
    put_block(&mut mine, &red.dropped);
    for x in [red.traffic.bytes_recv, red.traffic.rounds] {
        mine.extend_from_slice(&x.to_le_bytes());
    }
    let all = bruck_allgather(t, &mine)?;
    let mut total = vec![0.0f64; dim];
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
        assert!(same_bits(&result, &red.result), "{ctx}: rank {q}'s bits");
        if q == 0 {
            result
                .iter()
                .for_each(|(i, x)| total[i as usize] += f64::from(x));
        }
        dropped
            .iter()
            .for_each(|(i, x)| total[i as usize] += f64::from(x));
    }
    Ok((total, traffic))
}

/// Checks that every entry of `registry` states its facts
/// ([`crate::Facts`]) truly, so that the checks that read them test what
/// they should: lossless exactly as an instance built from the name alone
/// (with a budget of 4) says; stateful exactly when its state after a call
/// on three thread ranks is not the stateless one; a budget exactly when
/// `name:k=4` builds; values exactly when `name:values=f16` builds;
/// planned only if lossless. (Warm calls are held to their promise under
/// MPI, by `mpi-suite warm`.) Returns the number of entries checked.
///
/// # Panics
/// On the first entry whose facts do not hold, naming it and the fact.
pub fn check_facts(registry: &Registry<f32>) -> usize {
    let defaults = Defaults::k(4).expect("a budget");
    for e in registry.entries() {
        let (name, facts) = (e.name(), e.facts());
        let built = |spec: &str| registry.build(spec, defaults);
        let algo = built(name).unwrap_or_else(|err| panic!("{name} does not build: {err}"));
        assert_eq!(algo.lossless(), facts.lossless, "{name}: lossless");
        let states = crate::ThreadCluster::new(3).run(|t| {
            let mut algo = built(name)?;
            let v = SparseVec::new(100, vec![t.rank() as u32, 50], vec![1.0f32, 2.0])?;
            algo.allreduce(t, &v)?;
            algo.save_state()
        });
        for state in states {
            let state = state.unwrap_or_else(|err| panic!("{name}: a call failed: {err}"));
            assert_eq!(!state.is_stateless(), facts.stateful, "{name}: stateful");
        }
        let takes = |param: &str| built(&format!("{name}:{param}")).is_ok();
        assert_eq!(takes("k=4"), facts.budget, "{name}: budget");
        assert_eq!(takes("values=f16"), facts.values, "{name}: values");
        assert!(
            !facts.planned || facts.lossless,
            "{name}: planned but lossy"
        );
    }
    registry.entries().len()
}

/// The ways a vector built with `SparseVec::new_unchecked` can break its
/// invariants.
pub const BAD_INPUTS: [&str; 5] = [
    "out of range",
    "unsorted",
    "duplicate",
    "lengths differ",
    "dimension too large",
];

/// An invalid vector of dimension `dim >= 4` of the given kind
/// ([`BAD_INPUTS`]); of dimension `usize::MAX`, past `u32` indices, for
/// "dimension too large".
pub fn bad_input(kind: &str, dim: usize) -> SparseVec<f32> {
    let d = dim as u32;
    if kind == "dimension too large" {
        return SparseVec::new_unchecked(usize::MAX, Vec::new(), Vec::new());
    }
    let (idx, val) = match kind {
        "out of range" => (vec![0, d - 1, d + 5], vec![1.0, 2.0, 3.0]),
        "unsorted" => (vec![2, 1, 3], vec![1.0, 2.0, 3.0]),
        "duplicate" => (vec![1, 1, 3], vec![1.0, 2.0, 3.0]),
        _ => (vec![0, 1, 2], vec![1.0, 2.0]),
    };
    SparseVec::new_unchecked(dim, idx, val)
}

/// Every built-in algorithm (DSAR with QSGD included) through
/// [`bad_input_suite_for`]. Returns the number of calls checked.
///
/// # Errors
/// Transport errors. Failed checks panic.
pub fn bad_input_suite(t: &mut dyn Transport) -> Result<usize> {
    let registry = Registry::<f32>::builtin();
    let mut calls = 0;
    for name in registry.names() {
        calls += bad_input_suite_for(t, &registry, name)?;
    }
    Ok(calls)
}

/// One algorithm of `registry` (a user's own included) with an invalid
/// input on one rank (each kind of [`BAD_INPUTS`], on the ranks in turn):
/// every rank returns an error, the bad rank its own
/// ([`sparse_core::Error::IndexOutOfRange`], `NotStrictlyIncreasing`,
/// `LengthMismatch` or `DimensionTooLarge`), the others
/// [`sparse_core::Error::PeerError`] naming it; then a valid call on the
/// same instance and transport succeeds (the failed call left no message
/// behind). Returns the number of calls checked.
///
/// # Errors
/// Transport errors. Failed checks panic.
pub fn bad_input_suite_for(
    t: &mut dyn Transport,
    registry: &Registry<f32>,
    spec: &str,
) -> Result<usize> {
    use sparse_core::Error;
    let (p, r) = (t.size(), t.rank());
    let dim = 97;
    let good = SparseVec::new(dim, vec![3, 50], vec![1.0f32, -2.0])?;
    let mut calls = 0;
    for (n, kind) in BAD_INPUTS.iter().enumerate() {
        let bad = (n + spec.len()) % p;
        let input = if r == bad {
            bad_input(kind, dim)
        } else {
            good.clone()
        };
        let ctx = format!("{spec} P={p} rank {r}, {kind} on rank {bad}");
        let mut runner = registry.build(spec, Defaults::k(4)?)?;
        match runner.allreduce(t, &input) {
            Ok(red) => panic!("{ctx}: accepted ({} entries)", red.result.nnz()),
            Err(Error::PeerError { rank, .. }) if r != bad => {
                assert_eq!(rank, bad, "{ctx}: names the bad rank");
            }
            Err(
                Error::IndexOutOfRange { .. }
                | Error::NotStrictlyIncreasing { .. }
                | Error::LengthMismatch { .. }
                | Error::DimensionTooLarge { .. },
            ) if r == bad => {}
            Err(e) => panic!("{ctx}: unexpected error {e}"),
        }
        let red = runner.allreduce(t, &good)?;
        if runner.lossless() {
            let want = SparseVec::new(dim, vec![3, 50], vec![p as f32, -2.0 * p as f32])?;
            assert_eq!(red.result, want, "{ctx}: the next call works");
        }
        calls += 1;
    }
    Ok(calls)
}

/// A transport that corrupts one message of this rank: its `nth` send or
/// exchange (counting from 1) loses its last byte (an empty message gets
/// one), which every decoder of this crate rejects: their formats have
/// exact lengths. Everything else goes to the inner transport: the
/// intercepting transport with [`Corruption`] as its hook.
pub type Corrupting<'a> = Intercepting<'a, dyn Transport + 'a, Corruption>;

/// The hook of [`Corrupting`]: which message to corrupt, and whether it
/// was.
#[derive(Debug, Clone, Copy, Default)]
pub struct Corruption {
    nth: Option<u64>,
    sent: u64,
    fired: bool,
}

impl<'a> Intercepting<'a, dyn Transport + 'a, Corruption> {
    /// Corrupts the `nth` message `inner` sends (`None`: none).
    pub fn new(inner: &'a mut dyn Transport, nth: Option<u64>) -> Self {
        Self::wrap(
            inner,
            Corruption {
                nth,
                ..Corruption::default()
            },
        )
    }
    /// Whether the message was corrupted (this rank sent `nth` messages).
    pub fn fired(&self) -> bool {
        self.hook().fired
    }
}

impl Intercept for Corruption {
    /// `data`, or its corruption when this is the `nth` message.
    fn outgoing<'d>(&mut self, data: &'d [u8]) -> std::borrow::Cow<'d, [u8]> {
        self.sent += 1;
        if Some(self.sent) != self.nth {
            return data.into();
        }
        self.fired = true;
        match data {
            [] => vec![0xA5].into(),
            [rest @ .., _] => rest.into(),
        }
    }
}

/// The input of [`corrupt_case`]: 1,000 coordinates, 2% per rank, half
/// of them shared.
pub const CORRUPT_CASE: Case = Case {
    dim: 1000,
    density: 0.02,
    overlap: 0.5,
    skew: false,
    seed: 7,
};

/// One rank's account of [`corrupt_case`]: whether its message was
/// corrupted, and how each of the two calls ended ([`CALL_EXACT`], ...).
pub type CorruptOutcome = [u8; 3];
/// The call returned the exact sum (a lossless algorithm).
pub const CALL_EXACT: u8 = 0;
/// The call returned a result that is not the exact sum.
pub const CALL_WRONG: u8 = 1;
/// The call returned (a lossy algorithm: not checked).
pub const CALL_LOSSY: u8 = 2;
/// The call failed with a timeout: a rank waited in vain.
pub const CALL_TIMEOUT: u8 = 3;
/// The call failed otherwise.
pub const CALL_FAILED: u8 = 4;

/// Runs `spec` twice on [`CORRUPT_CASE`], with the `nth` message of rank
/// `victim` corrupted in the first call ([`Corrupting`]), and reports how
/// it went on this rank; [`check_corrupt`] judges all ranks' reports.
///
/// # Errors
/// Building the algorithm or the input (the calls' errors are reported).
pub fn corrupt_case(
    t: &mut dyn Transport,
    registry: &Registry<f32>,
    spec: &str,
    victim: usize,
    nth: u64,
) -> Result<CorruptOutcome> {
    use sparse_core::Error;
    let (p, r) = (t.size(), t.rank());
    let ins = inputs(p, &CORRUPT_CASE)?;
    let mut oracle = vec![0.0f32; CORRUPT_CASE.dim];
    for v in &ins {
        v.add_to_dense(&mut oracle);
    }
    let mut algo = registry.build(spec, budget(&CORRUPT_CASE))?;
    let lossless = algo.lossless();
    let mut call = |t: &mut dyn Transport| match algo.allreduce(t, &ins[r]) {
        Ok(_) if !lossless => CALL_LOSSY,
        Ok(red) if red.result.to_dense() == oracle => CALL_EXACT,
        Ok(_) => CALL_WRONG,
        Err(Error::Timeout { .. }) => CALL_TIMEOUT,
        Err(_) => CALL_FAILED,
    };
    let mut corrupting = Corrupting::new(t, (r == victim).then_some(nth));
    let first = call(&mut corrupting);
    let fired = corrupting.fired();
    let second = call(t);
    Ok([u8::from(fired), first, second])
}

/// Judges every rank's [`corrupt_case`] report (by rank): without a
/// corrupted message both calls succeed everywhere; with one, the
/// corruption is caught (some rank's first call fails), no rank waits in
/// vain (no timeout), every rank fails by its second call, and a lossless
/// result returned despite the failure is exact. Returns whether a message
/// was corrupted.
///
/// # Errors
/// What went wrong, for the caller's panic.
pub fn check_corrupt(outcomes: &[CorruptOutcome]) -> std::result::Result<bool, String> {
    let fired = outcomes.iter().any(|o| o[0] == 1);
    let ok = |c: u8| c == CALL_EXACT || c == CALL_LOSSY;
    let fine = if !fired {
        outcomes.iter().all(|o| ok(o[1]) && ok(o[2]))
    } else {
        outcomes.iter().any(|o| o[1] == CALL_FAILED)
            && outcomes.iter().all(|o| {
                o[1..].iter().all(|&c| c != CALL_TIMEOUT && c != CALL_WRONG)
                    && (o[1] == CALL_FAILED || o[2] == CALL_FAILED)
            })
    };
    if fine {
        Ok(fired)
    } else {
        Err(format!(
            "outcomes by rank (fired, first call, second call; 0 exact, 1 wrong, 2 lossy, 3 timeout, 4 failed): {outcomes:?}"
        ))
    }
}

/// How long a rank of [`corrupt_sweep`] may wait for a message: far above
/// any call of the sweep, so that reaching it means a rank waited in vain.
pub const CORRUPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Corrupts each message of the first and of the last of `p` thread ranks
/// in turn, until the victim sends no more: runs `case(t, victim, nth)` on
/// every rank of a fresh [`crate::ThreadCluster`] (its receives time out
/// after [`CORRUPT_TIMEOUT`]) and judges the reports with
/// [`check_corrupt`]; `case` is [`corrupt_case`] on the transport or on a
/// group over it, or a caller's own. Returns the number of corrupted
/// messages.
///
/// # Panics
/// When `case` fails to build, when [`check_corrupt`] finds a fault, or
/// when a run lasts [`CORRUPT_TIMEOUT`]; the message names `what`, `p`,
/// the victim and the message.
pub fn corrupt_sweep(
    what: &str,
    p: usize,
    case: impl Fn(&mut dyn Transport, usize, u64) -> Result<CorruptOutcome> + Sync,
) -> usize {
    let mut corrupted = 0;
    for victim in [0, p - 1] {
        for nth in 1.. {
            let start = std::time::Instant::now();
            let outcomes: Vec<_> = crate::ThreadCluster::new(p)
                .timeout(CORRUPT_TIMEOUT)
                .run(|t| case(t, victim, nth))
                .into_iter()
                .collect::<Result<_>>()
                .unwrap_or_else(|e| panic!("{what} P={p}: the case does not build: {e}"));
            let ctx = format!("{what} P={p}, message {nth} of rank {victim}");
            let fired = check_corrupt(&outcomes).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let took = start.elapsed();
            assert!(took < CORRUPT_TIMEOUT, "{ctx}: took {took:?}");
            if !fired {
                break;
            }
            corrupted += 1;
        }
    }
    corrupted
}

/// A global allocator that counts, per thread, the bytes asked of it
/// (allocations, growth in place, and the whole of a moved reallocation),
/// for tests that hold code to what it allocates: install it with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;` and read
/// [`CountingAlloc::asked`] around the code. It forwards to the system
/// allocator.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

thread_local! {
    static ASKED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl CountingAlloc {
    /// The bytes this thread has asked for so far.
    pub fn asked() -> u64 {
        ASKED.with(std::cell::Cell::get)
    }

    fn track(bytes: usize) {
        // `try_with`: the thread-local may be gone while a thread exits.
        let _ = ASKED.try_with(|a| a.set(a.get() + bytes as u64));
    }
}

// SAFETY: forwards to the system allocator; the counter touches only a
// thread-local cell initialised without allocating.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::track(layout.size());
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let moved = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        Self::track(if moved == ptr {
            new_size.saturating_sub(layout.size())
        } else {
            new_size
        });
        moved
    }
}
