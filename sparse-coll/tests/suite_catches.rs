//! The collective suite against rogue schemes (issue 27, item 7): each
//! breaks one promise that an earlier suite let through, and the suite
//! must fail it. The honest variant of the same scheme must pass, so the
//! failures come from the planted bug and nothing else.

use sparse_coll::dense::bruck_allgather;
use sparse_coll::testing::collective_suite_for;
use sparse_coll::{
    Entered, Profile, Reduced, Registry, SparseAllreduce, ThreadCluster, Transport, wire,
};
use sparse_core::cost::{Cost, ceil_log2};
use sparse_core::{Element, Result, SparseVec};

/// The bug a scheme carries.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// Sums the gathered blocks starting from its own rank's.
    RankDependentOrder,
    /// Sends the next rank a message nobody reads, once per call.
    StrayMessage,
    /// Sends itself a message it never reads, once per call.
    StrayToSelf,
    /// Drops its own entries from the result from its third call on.
    BreaksOnThirdCall,
    /// Claims a tenth of the bytes it receives, so that a planner would
    /// choose it.
    LyingCost,
    /// A cost of NaN rounds (its words honest): a planner's comparison of
    /// times is then false both ways.
    NanRounds,
    /// A cost of NaN words.
    NanWords,
    /// A cost of infinite rounds.
    InfiniteRounds,
}

/// Every rank's pairs allgathered and summed, with a planted bug.
struct Rogue {
    bug: Bug,
    calls: u64,
}

impl<E: Element> SparseAllreduce<E> for Rogue {
    fn name(&self) -> String {
        "rogue".into()
    }
    fn lossless(&self) -> bool {
        true
    }
    fn cost(&self, prof: &Profile) -> Cost {
        let mut bytes = prof.others() * (8.0 + prof.pair_bytes() * prof.k_avg() as f64);
        if self.bug == Bug::LyingCost {
            bytes /= 10.0;
        }
        let rounds = f64::from(ceil_log2(prof.p));
        match self.bug {
            Bug::NanRounds => Cost::new(f64::NAN, bytes / 4.0),
            Bug::NanWords => Cost::new(rounds, f64::NAN),
            Bug::InfiniteRounds => Cost::new(f64::INFINITY, bytes / 4.0),
            _ => Cost::new(rounds, bytes / 4.0),
        }
    }
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        wire::enter(t, "rogue", v, &[], Ok(()))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        self.calls += 1;
        let (p, r) = (t.size(), t.rank());
        let mut msg = Vec::new();
        wire::put_block(&mut msg, v);
        let blocks = bruck_allgather(t, &msg)?;
        let mut parts = Vec::with_capacity(p);
        for b in &blocks {
            let mut rest: &[u8] = b;
            parts.push(wire::take_block(&mut rest, v.dim(), 0, v.dim(), "rogue")?);
        }
        let order: Vec<usize> = match self.bug {
            Bug::RankDependentOrder => (0..p).map(|i| (r + i) % p).collect(),
            _ => (0..p).collect(),
        };
        let mut result = SparseVec::zeros(v.dim())?;
        for q in order {
            if self.bug == Bug::BreaksOnThirdCall && self.calls >= 3 && q == r {
                continue;
            }
            result = result.merge_sum(&parts[q])?;
        }
        if self.bug == Bug::StrayMessage && p > 1 {
            // Sent after the allgather and never received: with buffered
            // sends nothing waits for it.
            t.send((r + 1) % p, b"stray")?;
        }
        if self.bug == Bug::StrayToSelf {
            t.send(r, b"stray")?;
        }
        *out = Reduced {
            result,
            dropped: SparseVec::zeros(v.dim())?,
            ..Reduced::default()
        };
        Ok(Ok(()))
    }
}

/// Runs the suite on `p` buffered thread ranks over a registry whose
/// `rogue` carries `bug`; true if every rank passed.
fn passes(bug: Bug, p: usize) -> bool {
    run(bug, p).iter().all(Result::is_ok)
}

/// Every rank's outcome of the suite on `rogue` with `bug`.
fn run(bug: Bug, p: usize) -> Vec<Result<usize>> {
    let mut registry = Registry::<f32>::builtin();
    registry
        .register("rogue", "", "a rogue scheme", move |_, _| {
            Ok(Box::new(Rogue { bug, calls: 0 }))
        })
        .unwrap();
    ThreadCluster::new(p)
        .timeout(std::time::Duration::from_secs(5))
        .run(|t| collective_suite_for(t, &registry, "rogue"))
}

#[test]
fn the_honest_scheme_passes() {
    for p in [1, 2, 3, 4] {
        assert!(passes(Bug::None, p), "P = {p}");
    }
}

#[test]
fn a_rank_dependent_summation_order_fails_at_three_ranks() {
    assert!(!passes(Bug::RankDependentOrder, 3));
}

#[test]
fn a_message_left_unread_fails() {
    for p in [2, 3, 4] {
        assert!(!passes(Bug::StrayMessage, p), "P = {p}");
    }
}

#[test]
fn a_message_to_itself_left_unread_fails() {
    for p in [1, 3] {
        assert!(!passes(Bug::StrayToSelf, p), "P = {p}");
    }
}

#[test]
fn a_scheme_that_breaks_on_its_third_call_fails() {
    assert!(!passes(Bug::BreaksOnThirdCall, 2));
}

/// A `cost()` a factor of ten below what the scheme sends fails, and the
/// failure comes back as what it is: a failed check (a panic on the rank),
/// naming the cost.
#[test]
fn a_scheme_whose_cost_lies_fails_as_a_failed_check() {
    let out = run(Bug::LyingCost, 3);
    assert!(out.iter().all(Result::is_err));
    assert!(
        out.iter().any(|r| matches!(
            r,
            Err(sparse_core::Error::Panicked { message, .. }) if message.contains("cost() predicts")
        )),
        "{out:?}"
    );
}

/// A `cost()` that is not a finite, non-negative count (NaN rounds or
/// words, infinite rounds) fails as a failed check naming `cost()` and the
/// field; the planner could not compare it.
#[test]
fn a_scheme_whose_cost_is_not_finite_fails() {
    for (bug, field) in [
        (Bug::NanRounds, "rounds"),
        (Bug::NanWords, "words"),
        (Bug::InfiniteRounds, "rounds"),
    ] {
        for p in [1, 3] {
            let out = run(bug, p);
            assert!(out.iter().all(Result::is_err), "{bug:?} P = {p}: {out:?}");
            assert!(
                out.iter().any(|r| matches!(
                    r,
                    Err(sparse_core::Error::Panicked { message, .. })
                        if message.contains("cost()") && message.contains(field)
                )),
                "{bug:?} P = {p}: {out:?}"
            );
        }
    }
}

/// Set in the child process of [`a_failing_suite_prints_one_panic_per_cluster`].
const CHILD: &str = "SUITE_CATCHES_PRINTING_CHILD";

/// In the child process only (a no-op otherwise): the suite fails on every
/// rank of a 4-rank thread cluster and of a 4-rank simulated one.
#[test]
fn child_runs_a_failing_suite_on_two_clusters() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    assert!(run(Bug::LyingCost, 4).iter().all(Result::is_err));
    let mut registry = Registry::<f32>::builtin();
    registry
        .register("rogue", "", "a rogue scheme", |_, _| {
            Ok(Box::new(Rogue {
                bug: Bug::LyingCost,
                calls: 0,
            }))
        })
        .unwrap();
    let sim = sparse_coll::SimCluster::new(4)
        .unwrap()
        .run(|t| collective_suite_for(t, &registry, "rogue"))
        .unwrap();
    assert!(sim.results.iter().all(Result::is_err));
}

/// A suite that fails on every rank prints one panic (and one backtrace)
/// per cluster, not one per rank: the test binary runs
/// [`child_runs_a_failing_suite_on_two_clusters`] in a child process and
/// counts what it printed.
#[test]
fn a_failing_suite_prints_one_panic_per_cluster() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_runs_a_failing_suite_on_two_clusters",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("panicked at").count(), 2, "{stderr}");
    assert_eq!(stderr.matches("stack backtrace").count(), 2, "{stderr}");
    assert!(stderr.contains("cost() predicts"), "{stderr}");
}
