//! `allreduce_jointly`: several calls with one entry round. The oracle is
//! the same calls made one by one (`allreduce_into`) on fresh instances
//! of the same specs: the results and what each rank drops bit for bit
//! and each call's body traffic equal, and the rounds one agreement plus
//! the bodies' where the calls one by one take an agreement a call. Every
//! built-in algorithm of the suite (and the planner, between and on its
//! profiling calls) on 2 to 5 thread ranks, three calls a step for three
//! steps (state across calls: Ok-Topk's thresholds, DSAR's probe, the
//! planner's choice). Errors: a non-finite input or a disagreement in one
//! call fails every rank before any body runs, with the transport usable.

use sparse_coll::testing::algorithms;
use sparse_coll::{
    Defaults, JointCall, Reduced, Registry, SparseAllreduce, ThreadCluster, Traffic, Transport,
    agree_or_fail, allreduce_jointly,
};
use sparse_core::{Error, Result, SparseVec};

/// The dimensions of a step's three calls.
const DIMS: [usize; 3] = [1000, 37, 4096];
const STEPS: usize = 3;

/// Rank `r`'s input to call `c` of step `s`: about 3 entries in 11, small
/// integers (sums exact in any order), different on every rank, call and
/// step.
fn input(r: usize, c: usize, s: usize, dim: usize) -> SparseVec<f32> {
    let (idx, val): (Vec<u32>, Vec<f32>) = (0..dim)
        .filter(|i| (i * 31 + r * 17 + c * 5 + s * 3) % 11 < 3)
        .map(|i| (i as u32, ((i + r + s) % 9) as f32 - 4.0))
        .unzip();
    SparseVec::new(dim, idx, val).expect("a valid input")
}

fn build(specs: &[String]) -> Result<Vec<Box<dyn SparseAllreduce<f32>>>> {
    let registry = Registry::<f32>::builtin();
    specs
        .iter()
        .map(|s| registry.build(s, Defaults::density(0.1)?))
        .collect()
}

/// What a step's calls gave on one rank: each call's outcome and the
/// transport's traffic over the step.
type Outcome = (Vec<Reduced<f32>>, Traffic);

/// `STEPS` steps of `specs`' calls, one by one or jointly.
fn run(t: &mut dyn Transport, specs: &[String], joint: bool) -> Result<Vec<Outcome>> {
    let mut algs = build(specs)?;
    let mut steps = Vec::new();
    for s in 0..STEPS {
        let ins: Vec<SparseVec<f32>> = (0..specs.len())
            .map(|c| input(t.rank(), c, s, DIMS[c % DIMS.len()]))
            .collect();
        let mut outs: Vec<Reduced<f32>> = ins.iter().map(|_| Reduced::default()).collect();
        let before = t.traffic();
        if joint {
            let mut calls = JointCall::zip(&mut algs, &ins, &mut outs);
            allreduce_jointly(t, &mut calls)?;
        } else {
            for ((alg, v), out) in algs.iter_mut().zip(&ins).zip(outs.iter_mut()) {
                alg.allreduce_into(t, v, out)?;
            }
        }
        steps.push((outs, t.traffic().since(&before)));
    }
    Ok(steps)
}

/// The rounds of one agreement of three fields on `p` ranks.
fn agreement_rounds(p: usize) -> u64 {
    let out = ThreadCluster::new(p).run(|t| {
        let before = t.traffic().rounds;
        agree_or_fail(t, &[("a", 1), ("b", 2), ("c", 3)], Ok(()))?;
        Ok(t.traffic().rounds - before)
    });
    out.into_iter()
        .map(|r| r.expect("an agreement"))
        .max()
        .expect("ranks")
}

fn check(p: usize, specs: &[String]) {
    let cluster = ThreadCluster::new(p);
    let alone = cluster.run(|t| run(t, specs, false));
    let joint = cluster.run(|t| run(t, specs, true));
    let agreement = agreement_rounds(p);
    for (r, (a, j)) in alone.into_iter().zip(joint).enumerate() {
        let (a, j) = (a.expect("calls one by one"), j.expect("joint calls"));
        for (s, ((a_outs, a_all), (j_outs, j_all))) in a.iter().zip(&j).enumerate() {
            let at = format!("{specs:?} P = {p}, rank {r}, step {s}");
            let profiling = specs.iter().any(|s| s.starts_with("auto")) && s % 2 == 0;
            let mut bodies = Traffic::default();
            let mut entries = Traffic::default();
            for (c, (ao, jo)) in a_outs.iter().zip(j_outs).enumerate() {
                assert_eq!(ao.result, jo.result, "{at}, call {c}: result");
                assert_eq!(ao.dropped, jo.dropped, "{at}, call {c}: dropped");
                assert_eq!(ao.traffic, jo.traffic, "{at}, call {c}: body traffic");
                bodies = bodies.plus(&jo.traffic);
                entries = entries.plus(&jo.entry);
                if c > 0 && !profiling {
                    assert_eq!(jo.entry, Traffic::default(), "{at}, call {c}: entry");
                }
            }
            // The calls' totals are what the transport counted.
            assert_eq!(bodies.plus(&entries), *j_all, "{at}: totals");
            // The agreements one by one less those of the calls admitted,
            // plus the joint one (the planner's profiling calls, every
            // other step with `every=2`, make their own rounds, the
            // profile's and their candidate's, and are not checked here).
            let own: u64 = a_outs.iter().map(|o| o.entry.rounds).sum();
            if !profiling {
                assert_eq!(entries.rounds, agreement, "{at}: the joint round");
                assert_eq!(
                    j_all.rounds,
                    a_all.rounds - own + agreement,
                    "{at}: rounds (one by one {})",
                    a_all.rounds
                );
            }
        }
    }
}

#[test]
fn joint_calls_equal_the_calls_one_by_one_with_one_agreement() {
    for p in 2..=5 {
        let specs = algorithms(p);
        // Each spec once as the first, second and third of a step's calls.
        for i in 0..specs.len() {
            let three: Vec<String> = (0..3)
                .map(|c| specs[(i + c * 7) % specs.len()].clone())
                .collect();
            check(p, &three);
        }
    }
}

#[test]
fn the_planner_enters_jointly_between_its_profiles() {
    for p in 2..=4 {
        let specs = vec![
            "auto:every=2".to_string(),
            "topk_a".to_string(),
            "auto:every=2".to_string(),
        ];
        check(p, &specs);
    }
}

/// A non-finite input on one rank, or one rank's call of another
/// dimension, fails every rank in the joint round: no body runs (no
/// traffic beyond the round), and the next joint step succeeds.
#[test]
fn an_error_in_one_call_fails_every_rank_before_any_body() {
    for p in 2..=4 {
        for (fault, bad_rank) in [("nan", p - 1), ("dimension", 0)] {
            let out = ThreadCluster::new(p).run(|t| {
                let specs = [
                    "topk_a".to_string(),
                    "spardl".to_string(),
                    "ok_topk".to_string(),
                ];
                let mut algs = build(&specs)?;
                let mut step = |t: &mut dyn Transport, broken: bool| {
                    let mut ins: Vec<SparseVec<f32>> =
                        (0..3).map(|c| input(t.rank(), c, 0, DIMS[c])).collect();
                    if broken && t.rank() == bad_rank {
                        ins[1] = match fault {
                            "nan" => {
                                let v = &ins[1];
                                let mut vals = v.values().to_vec();
                                vals[0] = f32::NAN;
                                SparseVec::new(v.dim(), v.indices().to_vec(), vals)?
                            }
                            _ => input(t.rank(), 1, 0, DIMS[1] + 1),
                        };
                    }
                    let mut outs: Vec<Reduced<f32>> = (0..3).map(|_| Reduced::default()).collect();
                    let mut calls = JointCall::zip(&mut algs, &ins, &mut outs);
                    let before = t.traffic();
                    let done = allreduce_jointly(t, &mut calls);
                    Ok::<_, Error>((done, t.traffic().since(&before)))
                };
                let (failed, spent) = step(t, true)?;
                let (next, _) = step(t, false)?;
                Ok((failed, spent, next))
            });
            let agreement = agreement_rounds(p);
            for (r, o) in out.into_iter().enumerate() {
                let (failed, spent, next) = o.expect("the test's own steps");
                let at = format!("{fault} at rank {bad_rank}, P = {p}, rank {r}");
                match (fault, failed) {
                    ("nan", Err(Error::NonFinite { .. })) if r == bad_rank => {}
                    ("nan", Err(Error::PeerError { .. })) if r != bad_rank => {}
                    ("dimension", Err(Error::Disagreement { what, .. })) => {
                        assert_eq!(what, "dimension", "{at}")
                    }
                    (_, other) => panic!("{at}: {other:?}"),
                }
                // The joint round, and where the word differed the fields'
                // round: no body.
                assert!(spent.rounds <= 2 * agreement, "{at}: {spent:?}");
                next.unwrap_or_else(|e| panic!("{at}: the next step failed: {e}"));
            }
        }
    }
}

/// One joint step of `specs` on this rank's inputs `ins`: its outcome and
/// the transport's traffic over it.
fn joint_step(
    t: &mut dyn Transport,
    specs: &[&str],
    ins: &[SparseVec<f32>],
) -> Result<(Result<Vec<Reduced<f32>>>, Traffic)> {
    let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    let mut algs = build(&specs)?;
    let mut outs: Vec<Reduced<f32>> = ins.iter().map(|_| Reduced::default()).collect();
    let before = t.traffic();
    let done = allreduce_jointly(t, &mut JointCall::zip(&mut algs, ins, &mut outs));
    Ok((done.map(|()| outs), t.traffic().since(&before)))
}

/// DSAR with QSGD fails on every rank alike where a partition sum cannot
/// be scaled, with the transport usable: joint as alone (its
/// `guarded_body`), so the next joint step succeeds.
#[test]
fn an_error_every_rank_agrees_on_in_a_body_leaves_the_transport_usable() {
    for p in 2..=3 {
        let out = ThreadCluster::new(p).run(|t| {
            let specs = ["topk_a", "dsar_split_allgather:qsgd=4"];
            let huge = SparseVec::new(4, vec![0, 2], vec![3e38f32, 3e38])?;
            let bad = [input(t.rank(), 0, 0, DIMS[0]), huge];
            let (failed, _) = joint_step(t, &specs, &bad)?;
            let good = [input(t.rank(), 0, 0, DIMS[0]), input(t.rank(), 1, 0, 4)];
            let (next, _) = joint_step(t, &specs, &good)?;
            Ok((failed.map(drop), next.map(drop)))
        });
        for (r, o) in out.into_iter().enumerate() {
            let (failed, next) = o.expect("the test's own steps");
            assert!(failed.is_err(), "P = {p}, rank {r}: {failed:?}");
            next.unwrap_or_else(|e| panic!("P = {p}, rank {r}: the next step failed: {e}"));
        }
    }
}

/// Calls admitted at other positions on other ranks (a fresh planner,
/// which enters alone on its profiling call, and TopkA, in swapped
/// orders) fail on every rank in the joint round, where the counts and
/// the fields alone agree, with the transport usable; and where no call
/// is admitted the joint round's traffic is the first call's, so the
/// totals are what the transport counted.
#[test]
fn calls_admitted_at_other_positions_fail_every_rank_and_no_traffic_is_lost() {
    for p in 2..=4 {
        let out = ThreadCluster::new(p).run(|t| {
            let ins = [
                input(t.rank(), 0, 0, DIMS[0]),
                input(t.rank(), 1, 0, DIMS[0]),
            ];
            let specs = if t.rank() == 0 {
                ["auto", "topk_a"]
            } else {
                ["topk_a", "auto"]
            };
            let (swapped, spent) = joint_step(t, &specs, &ins)?;
            let (alone, counted) = joint_step(t, &["auto"], &ins[..1])?;
            let (next, _) = joint_step(t, &["topk_a", "auto"], &ins)?;
            Ok((swapped.map(drop), spent, alone?, counted, next.map(drop)))
        });
        let agreement = agreement_rounds(p);
        for (r, o) in out.into_iter().enumerate() {
            let (swapped, spent, alone, counted, next) = o.expect("the test's own steps");
            let at = format!("P = {p}, rank {r}");
            match swapped {
                Err(Error::Disagreement { what, .. }) => assert_eq!(what, "calls' fields", "{at}"),
                other => panic!("{at}: {other:?}"),
            }
            // The joint round and the fields' round: no body ran.
            assert!(spent.rounds <= 2 * agreement, "{at}: {spent:?}");
            assert_eq!(alone[0].total(), counted, "{at}: the planner alone");
            next.unwrap_or_else(|e| panic!("{at}: the next step failed: {e}"));
        }
    }
}
