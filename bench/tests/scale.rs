//! `sparse-bench scale`: its byte and round counts are the thread
//! transport's for the same inputs, a run over the memory cap is refused
//! before anything runs, and the report names its network as simulated.

use bench::scale::{self, ScaleArgs};
use sparse_coll::{Defaults, Registry, ThreadCluster, Traffic};
use sparse_core::Error;
use sparse_core::generate::{GradientSpec, ValueDist};

fn args(ranks: Vec<usize>) -> ScaleArgs {
    ScaleArgs {
        ranks,
        network: "25gbe".into(),
        n: 1 << 14,
        density: 0.01,
        overlap: 0.5,
        algos: Vec::new(),
        seed: 3,
        mem_cap_gib: 16.0,
        svg: None,
        compute_factor: None,
        warm: false,
    }
}

/// At several P, every registered algorithm's per-rank traffic in the
/// simulation equals what the thread transport counts for the same inputs.
#[test]
fn simulated_counts_equal_the_thread_transports() {
    let registry = Registry::<f32>::builtin();
    let net = sparse_coll::sim::network("25gbe").unwrap();
    for p in [3usize, 5, 16] {
        let a = args(vec![p]);
        let pool = GradientSpec {
            overlap: a.overlap,
            values: ValueDist::Normal { std: 1.0 },
            ..GradientSpec::new(a.n, a.density, a.seed)
        }
        .pool(p)
        .unwrap();
        let k = pool.shared() + pool.private();
        for name in registry.names().into_iter().filter(|n| *n != "auto") {
            let (row, sim) = scale::run_one(name, &pool, a.n, &*net).unwrap();
            let threads: Vec<Traffic> = ThreadCluster::new(p)
                .run(|t| {
                    let v = pool.rank::<f32>(sparse_coll::Transport::rank(t))?;
                    let mut algo = registry.build(name, Defaults::k(k)?)?;
                    Ok(algo.allreduce(t, &v)?.total())
                })
                .into_iter()
                .collect::<sparse_core::Result<_>>()
                .unwrap();
            assert_eq!(sim, threads, "{name} at P = {p}");
            assert_eq!(
                row.rounds_max,
                threads.iter().map(|t| t.rounds).max().unwrap()
            );
            assert!(row.sim_s > 0.0, "{name} at P = {p}");
        }
    }
}

/// A run estimated above the cap is refused up front, the estimate in the
/// error; the same run under a larger cap goes through with a row per
/// algorithm and a planner row per P, every row simulated.
#[test]
fn the_memory_cap_refuses_up_front_and_reports_say_simulated() {
    let mut a = args(vec![4, 8]);
    a.mem_cap_gib = 1e-6;
    let e = scale::run(&a).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { .. }), "{e}");
    assert!(
        e.to_string().contains("nothing was run") && e.to_string().contains("GiB"),
        "{e}"
    );
    // A bad overlap and a spec the dimension cannot hold are errors before
    // anything runs (the estimate derives from the same checked split).
    a.mem_cap_gib = 16.0;
    for (overlap, density, says) in [(1.5, 0.01, "overlap"), (0.0, 0.2, "distinct indices")] {
        let bad = ScaleArgs {
            overlap,
            density,
            ..a.clone()
        };
        let e = scale::run(&bad).unwrap_err();
        assert!(
            matches!(e, Error::InvalidParameter { .. }) && e.to_string().contains(says),
            "{e}"
        );
    }
    let dir = std::env::temp_dir().join(format!("scale-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    a.svg = Some(dir.join("scale.svg"));
    let report = scale::run(&a).unwrap();
    let algos = Registry::<f32>::builtin().names().len() - 1;
    assert_eq!(report.rows.len(), 2 * algos);
    assert_eq!(report.planner.len(), 2);
    for p in &report.planner {
        let regret = p.regret.expect("the planner's choice ran");
        assert!(regret >= 1.0, "{p:?}");
    }
    for v in scale::json(&report) {
        assert_eq!(v["simulated"], true);
        assert!(v["network"].as_str().unwrap().contains("25gbe"));
    }
    scale::plot(&report, a.svg.as_ref().unwrap()).unwrap();
    let svg = std::fs::read_to_string(dir.join("scale.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("topk_a"));
    std::fs::remove_dir_all(&dir).unwrap();
}
