//! Every algorithm behind its name, and the `Auto` planner against
//! measured traffic.

mod common;
use common::{assert_all_disagree, assert_conserved, inputs, oracle, run};
use sparse_coll::{Algorithm, Allreduce, Auto, Profile, Reduced, ThreadCluster};
use sparse_core::SparseVec;

#[test]
fn every_named_algorithm_keeps_the_contract() {
    for p in [1usize, 2, 3, 4, 6, 8] {
        let ins = inputs(p, 2003, 0.03, 0.5, true, p as u64);
        for name in Algorithm::NAMES {
            let algo = Algorithm::from_name(name, 40, if p % 2 == 0 { 2 } else { 1 }).unwrap();
            assert_eq!(algo.name(), name);
            let out = run(p, &ins, |t, v| Allreduce::new(algo)?.run(t, v));
            let ctx = format!("{name} P={p}");
            if algo.lossless() {
                for red in &out {
                    assert_eq!(red.result.to_dense(), oracle(&ins), "{ctx}");
                    assert_eq!(red.dropped.nnz(), 0, "{ctx}");
                }
            } else if name != "dsar_qsgd" {
                // Integer inputs: exact conservation (QSGD's is checked
                // within float tolerance in tests/sparse.rs).
                assert_conserved(&ins, &out, &ctx);
            }
        }
    }
    assert!(Algorithm::from_name("nope", 1, 1).is_err());
}

/// Each lossless candidate's largest per-rank received bytes on `ins`.
fn measured(p: usize, ins: &[SparseVec<f32>], algos: &[Algorithm]) -> Vec<(Algorithm, u64, u64)> {
    algos
        .iter()
        .map(|&a| {
            let out = run(p, ins, |t, v| Allreduce::new(a)?.run(t, v));
            let bytes = out.iter().map(|r| r.traffic.bytes_recv).max().unwrap();
            let rounds = out.iter().map(|r| r.traffic.rounds).max().unwrap();
            (a, bytes, rounds)
        })
        .collect()
}

/// Runs `calls` planned allreduces and returns the choices.
fn plan(p: usize, ins: &[SparseVec<f32>], alpha: f64, beta: f64, calls: usize) -> Vec<Algorithm> {
    let out: Vec<Vec<(Reduced<f32>, Algorithm)>> = ThreadCluster::new(p)
        .run(|t| {
            let mut auto = Auto::lossless(alpha, beta)?;
            (0..calls)
                .map(|_| {
                    let red = auto.allreduce(t, &ins[sparse_coll::Transport::rank(t)])?;
                    Ok((red, auto.last_choice().unwrap()))
                })
                .collect()
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for o in &out {
        for (c, (red, a)) in o.iter().enumerate() {
            assert_eq!(*a, out[0][c].1, "every rank chose the same");
            assert_eq!(red.result.to_dense(), oracle(ins));
        }
    }
    out[0].iter().map(|x| x.1).collect()
}

#[test]
fn auto_picks_within_a_quarter_of_the_fewest_bytes_once_profiled() {
    for (p, n, density, overlap) in [
        (8usize, 4096usize, 0.12, 0.0),
        (8, 100_000, 0.001, 1.0),
        (8, 100_000, 0.001, 0.0),
        (6, 50_000, 0.05, 0.5),
        (16, 20_000, 0.02, 0.9),
    ] {
        let ins: Vec<SparseVec<f32>> = inputs(p, n, density, overlap, false, 3)
            .into_iter()
            .enumerate()
            .map(|(r, v)| {
                // Every rank contributes here.
                if v.nnz() == 0 {
                    inputs(p, n, density, overlap, false, 3)[(r + 1) % p].clone()
                } else {
                    v
                }
            })
            .collect();
        let m = measured(p, &ins, &Algorithm::LOSSLESS);
        let best = m.iter().map(|x| x.1).min().unwrap();
        let choices = plan(p, &ins, 0.0, 1.0, 3);
        let chosen = m.iter().find(|x| x.0 == choices[2]).unwrap();
        assert!(
            chosen.1 as f64 <= 1.25 * best as f64,
            "P={p} n={n} density={density} overlap={overlap}: chose {} with {} bytes, best {best}: {m:?}",
            chosen.0.name(),
            chosen.1
        );
    }
}

#[test]
fn auto_picks_the_fewest_rounds_when_latency_dominates() {
    for p in [3usize, 8, 9] {
        let ins = inputs(p, 1000, 0.01, 0.5, false, 9);
        let m = measured(p, &ins, &Algorithm::LOSSLESS);
        let fewest = m.iter().map(|x| x.2).min().unwrap();
        let choice = plan(p, &ins, 1.0, 0.0, 2)[1];
        let chosen = m.iter().find(|x| x.0 == choice).unwrap();
        assert_eq!(chosen.2, fewest, "P={p}: {} in {m:?}", choice.name());
    }
}

#[test]
fn profiles_place_inputs_between_full_and_no_overlap() {
    let prof = |union| Profile {
        p: 4,
        n: 1000,
        value_bytes: 4,
        k_max: 10,
        k_sum: 40,
        union,
    };
    assert_eq!(prof(10).overlap(), 1.0);
    assert_eq!(prof(40).overlap(), 0.0);
    assert_eq!(prof(25).overlap(), 0.5);
    assert_eq!(prof(20).densification(), 0.5);
    // Between the bounds of SSAR_Recursive_double: 2k lg P .. 2k (P - 1).
    let c = Algorithm::SsarRecursiveDouble.model(&prof(25));
    assert_eq!(c.words, 0.5 * (2.0 * 10.0 * 2.0) + 0.5 * (2.0 * 10.0 * 3.0));
}

#[test]
fn ranks_running_different_algorithms_all_get_an_error() {
    for a in Algorithm::NAMES {
        for b in Algorithm::NAMES {
            // dsar_qsgd is dsar_split_allgather with quantization: it
            // disagrees on the quantization, not on the algorithm.
            if a == b || (a.starts_with("dsar") && b.starts_with("dsar")) {
                continue;
            }
            let out = ThreadCluster::new(2).run(|t| {
                let name = if sparse_coll::Transport::rank(t) == 0 {
                    a
                } else {
                    b
                };
                let algo = Algorithm::from_name(name, 8, 2)?;
                Allreduce::new(algo)?.run(t, &SparseVec::<f32>::zeros(64)?)
            });
            assert_all_disagree(&out, "algorithm", &format!("{a} vs {b}"));
        }
    }
}

#[test]
fn overlapped_collectives_equal_blocking_ones() {
    use sparse_coll::nonblocking::overlap;
    for p in [1usize, 3, 4] {
        let ins = inputs(p, 5000, 0.02, 0.5, false, 21);
        for name in ["spardl", "ssar_split_allgather", "zen_balanced_parallelism"] {
            let algo = Algorithm::from_name(name, 60, 1).unwrap();
            let blocking = run(p, &ins, |t, v| Allreduce::new(algo)?.run(t, v));
            let overlapped = run(p, &ins, |t, v| {
                // Compute while the allreduce runs on the progress thread.
                let (red, sum) = overlap(
                    t,
                    |t| Allreduce::new(algo)?.run(t, v),
                    || (0..200_000u64).map(|x| x * x % 7).sum::<u64>(),
                );
                assert_eq!(sum, (0..200_000u64).map(|x| x * x % 7).sum::<u64>());
                red
            });
            for (a, b) in blocking.iter().zip(&overlapped) {
                assert_eq!(a.result, b.result, "{name} P={p}");
                assert_eq!(a.dropped, b.dropped, "{name} P={p}");
                assert_eq!(a.traffic, b.traffic, "{name} P={p}");
            }
        }
    }
}

#[test]
fn started_collectives_return_the_transport() {
    use sparse_coll::nonblocking::start;
    let p = 4;
    let ins = inputs(p, 3000, 0.02, 0.5, false, 8);
    let blocking = run(p, &ins, |t, v| sparse_coll::spardl(t, v, 50));
    // Owned transports, each rank on a thread of its own: start, compute,
    // wait, then use the transport again.
    let handles: Vec<_> = ThreadCluster::new(p)
        .transports()
        .into_iter()
        .map(|t| {
            let v = ins[sparse_coll::Transport::rank(&t)].clone();
            std::thread::spawn(move || {
                let w = v.clone();
                let pending = start(t, move |t| sparse_coll::spardl(t, &w, 50));
                let busy: u64 = (0..100_000u64).map(|x| x ^ (x >> 3)).sum();
                let (mut t, first) = pending.wait();
                let again = sparse_coll::spardl(&mut t, &v, 50);
                (first.unwrap(), again.unwrap(), busy)
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let (first, again, _) = h.join().unwrap();
        assert_eq!(first.result, blocking[r].result, "rank {r}");
        assert_eq!(first.dropped, blocking[r].dropped, "rank {r}");
        assert_eq!(
            again.result, blocking[r].result,
            "rank {r}: the transport works after"
        );
    }
}
