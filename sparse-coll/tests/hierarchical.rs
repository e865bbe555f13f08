//! The hierarchical allreduce (issue 29, item 6): both collective suites
//! for nodes of 2, 3 and 4 ranks (most rank counts leave a smaller last
//! node, whose members hold several shards), and the planner choosing it.

use sparse_coll::testing::{bad_input_suite_for, collective_suite_for};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::SparseVec;

const RANKS: [usize; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17];

#[test]
fn the_collective_suite_passes_with_nodes_of_2_3_and_4() {
    let registry = Registry::<f32>::builtin();
    let specs = registry
        .entries()
        .iter()
        .find(|e| e.name() == "hierarchical")
        .expect("registered")
        .suite_specs(4);
    assert_eq!(specs.len(), 3);
    for p in RANKS {
        for spec in &specs {
            for r in ThreadCluster::new(p)
                .synchronous(true)
                .run(|t| collective_suite_for(t, &registry, spec))
            {
                r.unwrap_or_else(|e| panic!("{spec} P={p}: {e}"));
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors_on_every_rank() {
    let registry = Registry::<f32>::builtin();
    for p in [1, 3, 5] {
        for r in
            ThreadCluster::new(p).run(|t| bad_input_suite_for(t, &registry, "hierarchical:node=2"))
        {
            r.unwrap();
        }
    }
}

/// Nodes of 4 over 8 ranks: each rank's inter-node call carries a quarter
/// of the dimension, and the result is the exact sum on every rank.
#[test]
fn two_nodes_of_four_sum_exactly() {
    let (p, n) = (8, 1000);
    let out = ThreadCluster::new(p).run(|t| {
        let rank = t.rank() as u32;
        let idx: Vec<u32> = (0..50).map(|i| (i * 19 + rank * 7) % n as u32).collect();
        let mut idx = idx;
        idx.sort_unstable();
        idx.dedup();
        let v = SparseVec::new(n, idx.clone(), vec![1.0f32; idx.len()])?;
        let mut h = Registry::builtin().build("hierarchical:node=4", Defaults::lossless())?;
        let red = h.allreduce(t, &v)?;
        Ok((v, red))
    });
    let out: Vec<_> = out.into_iter().map(Result::unwrap).collect();
    let mut sum = vec![0.0f32; n];
    for (v, _) in &out {
        v.add_to_dense(&mut sum);
    }
    for (_, red) in &out {
        assert_eq!(red.result.to_dense(), sum);
        assert_eq!(red.dropped.nnz(), 0);
    }
}

/// The planner chooses among it and the flat schemes when listed.
#[test]
fn the_planner_can_choose_it() {
    let out = ThreadCluster::new(6).run(|t| {
        let rank = t.rank() as u32;
        let v = SparseVec::new(10_000, vec![rank, 5000 + rank], vec![1.0f32, 2.0])?;
        let mut auto = Registry::builtin().build(
            "auto:candidates=hierarchical+ssar_recursive_double",
            Defaults::lossless(),
        )?;
        let red = auto.allreduce(t, &v)?;
        assert_eq!(red.result.nnz(), 12);
        Ok(auto.ran())
    });
    for r in out {
        let ran = r.unwrap().expect("the planner ran a candidate");
        assert!(
            ran.starts_with("hierarchical") || ran.starts_with("ssar_recursive_double"),
            "{ran}"
        );
    }
}

/// Simulated times on a two-level network (`nvlink8-25gbe`: 8 ranks per
/// node on NVLink, nodes on 25 Gb/s Ethernet) for 2 to 8 nodes: the
/// hierarchical allreduce against the flat schemes, printed (run with
/// `--nocapture`); the makespans are simulated, so deterministic.
#[test]
fn simulated_on_a_two_level_network() {
    use sparse_coll::SimCluster;
    use sparse_coll::sim::preset;
    use sparse_core::testing::generate::GradientSpec;
    let net = preset("nvlink8-25gbe").unwrap();
    let registry = Registry::<f32>::builtin();
    let specs = [
        "hierarchical:node=8",
        "ssar_split_allgather",
        "ssar_recursive_double",
        "topk_a",
    ];
    let mut rows = Vec::new();
    for p in [16usize, 32, 64] {
        let ins = GradientSpec {
            overlap: 0.5,
            ..GradientSpec::new(1 << 18, 0.01, p as u64)
        }
        .generate::<f32>(p)
        .unwrap();
        let mut times = Vec::new();
        for spec in specs {
            let run = SimCluster::new(p)
                .unwrap()
                .run(|t| {
                    let mut a = registry.build(spec, Defaults::lossless())?;
                    let rank = t.rank();
                    t.mark();
                    a.allreduce(t, &ins[rank]).map(|r| r.result.nnz())
                })
                .unwrap();
            let nnz: Vec<usize> = run.results.into_iter().map(Result::unwrap).collect();
            assert!(nnz.iter().all(|&x| x == nnz[0]), "{spec}");
            let time = sparse_coll::sim::replay(&run.traces, net.as_ref()).unwrap();
            times.push(time.makespan());
            if spec == specs[0] {
                println!("{}", time.label());
            }
            println!("P={p:3} {spec:24} {:9.3} ms", time.makespan() * 1e3);
        }
        rows.push((p, times));
    }
    // The finding this test keeps: across nodes, every rank's NIC carries
    // its shard of the node's sum once, where a flat scheme sends every
    // rank's pairs over the nodes' links; the gain grows with the nodes.
    let mut last = f64::MAX;
    for (p, times) in &rows {
        let best_flat = times[1..].iter().copied().fold(f64::MAX, f64::min);
        let ratio = times[0] / best_flat;
        println!("P={p}: hierarchical / best flat = {ratio:.2}");
        assert!(ratio < 1.0 && ratio < last, "P={p}: {ratio}");
        last = ratio;
    }
}
