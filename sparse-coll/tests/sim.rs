//! The simulated cluster: the real code gives the thread transport's
//! results and traffic, the collective suite passes on it, and its times
//! follow the alpha-beta model's closed forms.

use sparse_coll::sim::{AlphaBeta, FullBisection, Network, Op, TwoLevel, preset, replay};
use sparse_coll::testing::{self, Case};
use sparse_coll::{Defaults, Registry, SimCluster, ThreadCluster, Transport, dense};
use sparse_core::{Error, Result};

fn ethernet() -> FullBisection {
    FullBisection::new("test", AlphaBeta::new(10e-6, 1e9).unwrap())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// One message alone takes `alpha + m beta`, a send returns when its
/// message has left (`m beta`), and a rank that sends nothing stays at 0.
#[test]
fn one_message_takes_alpha_plus_m_beta() {
    let m = 1_000_000;
    let run = SimCluster::new(3)
        .unwrap()
        .run(|t| match t.rank() {
            0 => t.send(1, &vec![7u8; m]),
            1 => t.recv(0).map(|got| assert_eq!(got.len(), m)),
            _ => Ok(()),
        })
        .unwrap();
    assert!(run.results.iter().all(Result::is_ok));
    let net = ethernet();
    let time = run.timeline(&net).unwrap();
    assert!(close(time.finish[0], m as f64 * 1e-9), "{time:?}");
    assert!(close(time.finish[1], 10e-6 + m as f64 * 1e-9), "{time:?}");
    assert_eq!(time.finish[2], 0.0);
    assert!(time.label().starts_with("simulated (test: full bisection"));
}

/// The ring allreduce's 2 (P - 1) exchanges of n / P elements each take
/// `2 (P - 1) (alpha + 4 n / P beta)` on a full-bisection network: each
/// rank's ports carry one message per round.
#[test]
fn ring_allreduce_follows_its_closed_form() {
    for p in [2usize, 3, 5, 8] {
        let n = 1200 * p;
        let run = SimCluster::new(p)
            .unwrap()
            .run(|t| {
                let x = vec![t.rank() as f32; n];
                dense::ring_allreduce(t, &x)
            })
            .unwrap();
        let sum = (0..p).sum::<usize>() as f32;
        for r in &run.results {
            assert!(r.as_ref().unwrap().iter().all(|&v| v == sum));
        }
        let time = run.timeline(&ethernet()).unwrap();
        let want = 2.0 * (p - 1) as f64 * (10e-6 + (4 * n / p) as f64 * 1e-9);
        for (r, &f) in time.finish.iter().enumerate() {
            assert!(close(f, want), "P = {p} rank {r}: {f} != {want}");
        }
    }
}

/// Two nodes of four ranks: the four messages from node 0 to node 1 queue
/// on the node's NIC (`alpha + 4 m beta` for the last), while the same
/// messages within a node take `alpha + m beta` each, in parallel.
#[test]
fn a_shared_nic_serialises_the_nodes_messages() {
    let nvlink = AlphaBeta::new(2e-6, 100e9).unwrap();
    let nic = AlphaBeta::new(20e-6, 1e9).unwrap();
    let net = TwoLevel::new("test", 4, nvlink, nic).unwrap();
    let m = 100_000;
    // Across nodes: rank r sends to r + 4.
    let across = SimCluster::new(8)
        .unwrap()
        .run(|t| {
            let r = t.rank();
            if r < 4 {
                t.send(r + 4, &vec![1u8; m])
            } else {
                t.recv(r - 4).map(drop)
            }
        })
        .unwrap();
    let time = across.timeline(&net).unwrap();
    let last = (4..8).map(|r| time.finish[r]).fold(0.0, f64::max);
    assert!(close(last, 20e-6 + 4.0 * m as f64 * 1e-9), "{time:?}");
    // Within nodes: rank r sends to r ^ 1.
    let within = SimCluster::new(8)
        .unwrap()
        .run(|t| {
            let r = t.rank();
            if r % 2 == 0 {
                t.send(r + 1, &vec![1u8; m])
            } else {
                t.recv(r - 1).map(drop)
            }
        })
        .unwrap();
    let time = within.timeline(&net).unwrap();
    for r in (1..8).step_by(2) {
        assert!(close(time.finish[r], 2e-6 + m as f64 * 1e-11), "{time:?}");
    }
}

/// Every registered algorithm gives on the simulated cluster what it gives
/// on threads: the same results and dropped entries, bit for bit, and the
/// same bytes, messages and rounds on every rank.
#[test]
fn every_algorithm_matches_the_thread_transport_exactly() {
    let registry = Registry::<f32>::builtin();
    for p in [2usize, 3, 5, 8, 16] {
        let case = Case {
            dim: 4099,
            density: 0.02,
            overlap: 0.3,
            skew: true,
            seed: 7 + p as u64,
        };
        let ins = testing::inputs(p, &case).unwrap();
        let defaults = testing::budget(&case);
        for spec in testing::algorithms(p) {
            let call = |t: &mut dyn Transport| {
                let mut a = registry.build(&spec, defaults)?;
                let mine = &ins[t.rank()];
                let red = a.allreduce(t, mine)?;
                Ok((red, t.traffic()))
            };
            let threads = ThreadCluster::new(p).run(|t| call(t));
            let sim = SimCluster::new(p).unwrap().run(|t| call(t)).unwrap();
            for (r, (a, b)) in threads.iter().zip(&sim.results).enumerate() {
                let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
                assert_eq!(a.0.result, b.0.result, "{spec} P = {p} rank {r}");
                assert_eq!(a.0.dropped, b.0.dropped, "{spec} P = {p} rank {r}");
                assert_eq!(a.1, b.1, "{spec} P = {p} rank {r}: traffic");
                assert_eq!(sim.traffic[r], b.1, "{spec} P = {p} rank {r}");
            }
        }
    }
}

/// The collective suite passes on the simulated transport.
#[test]
fn the_collective_suite_passes_on_the_simulated_cluster() {
    for p in [2, 3, 5] {
        let run = SimCluster::new(p)
            .unwrap()
            .run(|t| testing::collective_suite(t))
            .unwrap();
        for (r, out) in run.results.into_iter().enumerate() {
            assert!(out.unwrap() > 0, "P = {p} rank {r}");
        }
    }
}

/// With computation off, times depend on the inputs only: two runs of the
/// same calls give the same times bit for bit, on both network kinds, at
/// a rank count where the threads far outnumber the cores.
#[test]
fn simulated_times_are_deterministic() {
    let registry = Registry::<f32>::builtin();
    let p = 64;
    let case = Case {
        dim: 1 << 14,
        density: 0.01,
        overlap: 0.5,
        skew: false,
        seed: 3,
    };
    let ins = testing::inputs(p, &case).unwrap();
    for spec in ["topk_a", "spardl", "ssar_recursive_double"] {
        let times = || {
            let run = SimCluster::new(p)
                .unwrap()
                .run(|t| {
                    let mut a = registry.build(spec, Defaults::k(100)?)?;
                    let mine = &ins[t.rank()];
                    t.mark();
                    a.allreduce(t, mine)?;
                    t.mark();
                    Ok(())
                })
                .unwrap();
            assert!(run.results.iter().all(Result::is_ok));
            let flat = run.timeline(&*preset("25gbe").unwrap()).unwrap();
            let nodes = run.timeline(&*preset("nvlink8-25gbe").unwrap()).unwrap();
            (flat, nodes)
        };
        let (a, b) = (times(), times());
        assert_eq!(a, b, "{spec}");
        let call = a.0.span(0).unwrap();
        assert!(call > 0.0 && call == a.0.makespan(), "{spec}: {call}");
    }
}

/// A rank that fails makes its peers' waits fail instead of hanging, and a
/// replay of traces that do not match is an error naming the waiting rank.
#[test]
fn failures_end_waits_and_bad_traces_are_errors() {
    let run = SimCluster::new(2)
        .unwrap()
        .run(|t| {
            if t.rank() == 1 {
                return Err(Error::invalid("test", "rank 1 gives up"));
            }
            t.recv(1).map(drop)
        })
        .unwrap();
    assert!(matches!(
        run.results[0],
        Err(Error::PeerFailed { rank: 0, peer: 1 })
    ));
    let net = ethernet();
    let err = replay(&[vec![Op::Recv { from: 1 }], vec![]], &net).unwrap_err();
    assert!(err.to_string().contains("[0]"), "{err}");
    assert!(matches!(
        replay(&[vec![Op::Send { to: 5, bytes: 1 }]], &net),
        Err(Error::NoSuchRank { rank: 5, size: 1 })
    ));
    assert!(preset("token-ring").is_err());
    assert!(AlphaBeta::new(-1.0, 1.0).is_err() && AlphaBeta::new(0.0, 0.0).is_err());
}

/// Every preset builds and names itself in its label.
#[test]
fn presets_build_and_label_themselves() {
    for (name, _) in sparse_coll::sim::PRESETS {
        let net: Box<dyn Network> = preset(name).unwrap();
        assert!(net.label().starts_with(name), "{}", net.label());
    }
}

/// A replay refuses what the model cannot time: negative or non-finite
/// computation, a route with a negative or non-finite latency or time per
/// byte, and a message sent but never received; `span` counts the ranks
/// that made both marks.
#[test]
fn replay_refuses_invalid_traces_and_spans_the_ranks_that_marked() {
    #[derive(Debug)]
    struct Broken;
    impl Network for Broken {
        fn label(&self) -> String {
            "broken".into()
        }
        fn route(&self, from: usize, to: usize) -> sparse_coll::sim::Route {
            sparse_coll::sim::Route {
                alpha: -3.0,
                beta: f64::NAN,
                out: sparse_coll::sim::Link::RankOut(from),
                into: sparse_coll::sim::Link::RankIn(to),
            }
        }
    }
    let net = ethernet();
    let recv = vec![Op::Recv { from: 0 }];
    for secs in [-5.0, f64::NAN, f64::INFINITY] {
        let traces = [
            vec![Op::Compute(secs), Op::Send { to: 1, bytes: 1 }],
            recv.clone(),
        ];
        assert!(replay(&traces, &net).is_err(), "{secs}");
    }
    let traces = [vec![Op::Send { to: 1, bytes: 1 }], recv.clone()];
    assert!(replay(&traces, &net).is_ok());
    assert!(replay(&traces, &Broken).is_err());
    let unreceived = [vec![Op::Send { to: 1, bytes: 5 }], vec![]];
    let err = replay(&unreceived, &net).unwrap_err();
    assert!(err.to_string().contains("never received"), "{err}");
    let marked = [vec![Op::Mark, Op::Compute(2.0), Op::Mark], vec![]];
    let time = replay(&marked, &net).unwrap();
    assert_eq!(time.span(0), Some(2.0));
    assert_eq!(time.span(1), None);
}

/// A network file round-trips (the replay over it equals the replay over
/// the link it was written from), and hostile files are errors naming the
/// line and the key, never a panic.
#[test]
fn network_files_round_trip_and_reject_bad_lines() {
    use sparse_coll::sim::{full_bisection_file, parse_network};
    let link = AlphaBeta::new(3.5e-6, 2.5e9).unwrap();
    let text = full_bisection_file("calibrated", link, "measured\nby a test");
    let net = parse_network(&text).unwrap();
    let direct = FullBisection::new("calibrated", link);
    assert_eq!(net.route(0, 1), direct.route(0, 1));
    assert_eq!(net.label(), direct.label());
    let two = "model = two_level\nranks_per_node = 4\nintra_alpha_s = 1e-6\nintra_bytes_per_s = 1e11\ninter_alpha_s = 2e-5 # comment\ninter_bytes_per_s = 3e9\n";
    let net = parse_network(two).unwrap();
    let (within, across) = (net.route(0, 3), net.route(0, 4));
    assert!(close(within.alpha, 1e-6) && close(across.alpha, 2e-5));
    for (bad, says) in [
        ("model = full_bisection\nalpha_s = 1e-6\n", "no bytes_per_s"),
        (
            "model = full_bisection\nalpha_s = x\nbytes_per_s = 1e9\n",
            "line 2: alpha_s",
        ),
        (
            "model = full_bisection\nalpha_s = -1\nbytes_per_s = 1e9\n",
            "alpha",
        ),
        (
            "model = full_bisection\nalpha_s = 1\nbytes_per_s = 0\n",
            "bandwidth",
        ),
        (
            "model = full_bisection\nalpha_s = 1\nalpha_s = 1\n",
            "line 3: alpha_s given twice",
        ),
        (
            "model = full_bisection\nalpha_s = 1\nbytes_per_s = 1\nmtu = 9000\n",
            "line 4: unknown key \"mtu\"",
        ),
        ("model = torus\n", "torus"),
        ("alpha_s 1\n", "line 1"),
        (
            "model = two_level\nranks_per_node = 0\nintra_alpha_s = 1\nintra_bytes_per_s = 1\ninter_alpha_s = 1\ninter_bytes_per_s = 1\n",
            "ranks_per_node",
        ),
        ("", "no model"),
    ] {
        let e = parse_network(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad:?} parsed"));
        assert!(matches!(e, Error::InvalidParameter { .. }), "{e}");
        assert!(e.to_string().contains(says), "{bad:?}: {e}");
    }
    // A path that is no preset and no file says the file was not found.
    let e = sparse_coll::sim::network("/nonexistent/net.txt").unwrap_err();
    assert!(e.to_string().contains("file not found"), "{e}");
}

/// `SimTransport::idle` records its time as computation (a bad time is an
/// error), and a mark between two calls does not count the CPU time
/// before it twice: the computation recorded never exceeds the wall time
/// it was measured in.
#[test]
fn idle_is_recorded_and_marks_do_not_count_twice() {
    use sparse_coll::sim::Compute;
    let run = SimCluster::new(2)
        .unwrap()
        .compute(Compute::Measured { factor: 1.0 })
        .run(|t| {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < std::time::Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            t.mark();
            t.mark();
            t.mark();
            let wall = start.elapsed().as_secs_f64();
            t.exchange(1 - t.rank(), &[1], 1 - t.rank())?;
            assert!(t.idle(-1.0).is_err() && t.idle(f64::NAN).is_err());
            t.idle(0.5)?;
            Ok(wall)
        })
        .unwrap();
    for (r, (res, trace)) in run.results.iter().zip(&run.traces).enumerate() {
        let wall = *res.as_ref().unwrap();
        let before: f64 = trace
            .iter()
            .take_while(|op| !matches!(op, Op::Exchange { .. }))
            .filter_map(|op| {
                if let Op::Compute(s) = *op {
                    Some(s)
                } else {
                    None
                }
            })
            .sum();
        assert!(
            before > 0.0 && before <= wall + 1e-3,
            "rank {r}: {before} s computed in {wall} s"
        );
        assert!(trace.contains(&Op::Compute(0.5)), "rank {r}: {trace:?}");
    }
}
