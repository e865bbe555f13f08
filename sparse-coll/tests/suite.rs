//! The collective suite (`sparse_coll::testing`) on the thread transport,
//! for P = 1..=9, 16 and 17.

mod common;

use sparse_coll::testing::{algorithms, check_facts};
use sparse_coll::{Registry, ThreadCluster};

/// Every built-in algorithm at every `P`, each pair a run of its own, with
/// synchronous sends (each send waits until its message is received, as
/// MPI's do past the eager limit: an algorithm that sent before receiving
/// on both sides would time out here, as it would deadlock under MPI); all
/// failures are collected and reported together (a failed check panics on
/// its rank, which the thread cluster turns into that rank's error).
#[test]
fn collective_suite_on_threads() {
    let registry = Registry::builtin();
    let mut failures = Vec::new();
    let mut runs = 0;
    for p in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17] {
        for spec in algorithms(p) {
            runs += common::suite_on_threads(&registry, p, &spec, &mut failures);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(runs > 0);
}

/// Every registered algorithm but the planner runs in the suite: a new
/// registry entry cannot be left out by hand.
#[test]
fn the_suite_runs_every_registered_algorithm() {
    let names: Vec<String> = algorithms(4)
        .iter()
        .map(|s| s.split(':').next().unwrap().to_string())
        .collect();
    for n in Registry::<f32>::builtin().names() {
        assert!(
            n == "auto" || names.iter().any(|x| x == n),
            "{n} is not in the suite"
        );
    }
}

/// What each registry entry says of itself (`Entry::facts`) is what its
/// algorithm does (`testing::check_facts`), so that the tests that read
/// the facts test what they should.
#[test]
fn every_registry_entry_states_its_facts_truly() {
    let registry = Registry::<f32>::builtin();
    assert_eq!(check_facts(&registry), registry.entries().len());
}

/// Issue 11.4: vectors built with `new_unchecked` from bad parts (out of
/// range, unsorted, duplicate, lengths that differ) on one rank make every
/// rank of every algorithm return an error; before, seven algorithms lost
/// the entries silently and Zen and OmniReduce panicked.
#[test]
fn bad_inputs_are_errors_on_every_rank() {
    use sparse_coll::testing::bad_input_suite;
    for p in 1..=9usize {
        for (r, res) in ThreadCluster::new(p)
            .run(|t| bad_input_suite(t))
            .into_iter()
            .enumerate()
        {
            match res {
                Ok(calls) => assert!(calls > 0, "P={p} rank {r}"),
                Err(e) => panic!("P={p} rank {r}: {e}"),
            }
        }
    }
}

/// Two ranks that send to each other before receiving: buffered sends let
/// it pass; with synchronous ones a rank times out (MPI would hang) and the
/// other fails with it; exchanges work either way.
#[test]
fn sending_first_on_both_sides_times_out_with_synchronous_sends() {
    use sparse_coll::Transport;
    use sparse_core::Error;
    for synchronous in [false, true] {
        let out = ThreadCluster::new(2)
            .synchronous(synchronous)
            .timeout(std::time::Duration::from_millis(300))
            .run(|t| {
                let peer = 1 - t.rank();
                let got = t.exchange(peer, &[t.rank() as u8; 5], peer)?;
                assert_eq!(got, vec![peer as u8; 5]);
                t.send(peer, &[7; 3])?;
                t.recv(peer)
            });
        if synchronous {
            assert!(out.iter().all(Result::is_err), "{out:?}");
            assert!(
                out.iter().any(|r| matches!(r, Err(Error::Timeout { .. }))),
                "{out:?}"
            );
        } else {
            for res in out {
                assert_eq!(res.unwrap(), vec![7; 3]);
            }
        }
    }
}

/// The suite's state check is not vacuous: for each collective that keeps
/// state across calls (QSGD's call counter, Ok-Topk's thresholds and
/// regions, B-SAG's h, the planner's choice and its candidates), a fresh
/// instance without the state makes a different fourth call than the
/// instance that made three, and the same one with the state; a state
/// refused (another algorithm's) leaves the instance as it was.
#[test]
fn stateful_collectives_need_their_state() {
    use sparse_core::generate::GradientSpec;
    let registry = Registry::<f32>::builtin();
    let p = 4;
    for spec in [
        "dsar_qsgd:bits=2",
        "ok_topk:period=8",
        "spardl_bsag:d=2",
        "hierarchical:node=2,inter=dsar_qsgd",
    ] {
        let defaults = sparse_coll::Defaults::density(0.02).unwrap();
        let out = ThreadCluster::new(p).run(|t| {
            let r = sparse_coll::Transport::rank(t);
            let mut algo = registry.build(spec, defaults)?;
            let mut last = None;
            for call in 0..4u64 {
                let g = GradientSpec {
                    overlap: 0.3,
                    ..GradientSpec::new(4000, 0.05, 10 + call)
                }
                .generate::<f32>(p)?;
                if call < 3 {
                    algo.allreduce(t, &g[r])?;
                    continue;
                }
                let saved = algo.save_state()?;
                assert!(!saved.is_stateless(), "{spec}");
                let mut blank = registry.build(spec, defaults)?;
                let before = blank.save_state()?;
                let other = registry.build("ok_topk", defaults)?.save_state()?;
                if !spec.starts_with("ok_topk") {
                    assert!(blank.load_state(&other).is_err(), "{spec}");
                    assert!(blank.save_state()?.same_bits(&before), "{spec}");
                }
                let mut restored = registry.build(spec, defaults)?;
                restored.load_state(&saved)?;
                let want = algo.allreduce(t, &g[r])?;
                let with = restored.allreduce(t, &g[r])?;
                let without = blank.allreduce(t, &g[r])?;
                let bits = |v: &sparse_core::SparseVec<f32>| {
                    (
                        v.indices().to_vec(),
                        v.values().iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    )
                };
                assert_eq!(bits(&with.result), bits(&want.result), "{spec}");
                assert_eq!(bits(&with.dropped), bits(&want.dropped), "{spec}");
                last = Some(
                    bits(&without.result) != bits(&want.result)
                        || bits(&without.dropped) != bits(&want.dropped),
                );
            }
            Ok::<_, sparse_core::Error>(last.unwrap())
        });
        let differs: Vec<bool> = out.into_iter().collect::<Result<_, _>>().unwrap();
        assert!(
            differs.iter().any(|&d| d),
            "{spec}: the state changed nothing"
        );
    }
}
