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

/// Stateful inter-node parts where the smaller last node's members hold
/// several shards (one instance runs each shard from that shard's own
/// state): the suite's three calls, saved state and reset hold.
#[test]
fn stateful_parts_keep_each_shards_state() {
    let registry = Registry::<f32>::builtin();
    for p in [5, 7] {
        for spec in [
            "hierarchical:node=4,inter=spardl_bsag",
            "hierarchical:node=3,inter=ok_topk",
        ] {
            for r in ThreadCluster::new(p)
                .synchronous(true)
                .run(|t| collective_suite_for(t, &registry, spec))
            {
                r.unwrap_or_else(|e| panic!("{spec} P={p}: {e}"));
            }
        }
    }
}

/// A state in the earlier layout (a part for every shard of a node, those
/// a rank never ran fresh) loads, and the next call is the same as the
/// saved instance's, bit for bit.
#[test]
fn a_state_with_a_part_for_every_shard_loads() {
    use sparse_core::state::State;
    let (p, spec) = (5, "hierarchical:node=4,inter=spardl_bsag");
    let defaults = Defaults::k(6).unwrap();
    let out = ThreadCluster::new(p).run(|t| {
        let registry = Registry::<f32>::builtin();
        let r = t.rank() as u32;
        let input = |c: u32| {
            let idx: Vec<u32> = (0..30).map(|i| (i * 7 + r * 3 + c) % 200).collect();
            let mut idx = idx;
            idx.sort_unstable();
            idx.dedup();
            let val = idx.iter().map(|&i| (i % 13) as f32 - 6.0).collect();
            SparseVec::new(200, idx, val)
        };
        let mut a = registry.build(spec, defaults)?;
        for c in 0..2 {
            a.allreduce(t, &input(c)?)?;
        }
        let saved = a.save_state()?;
        let fresh = registry.build("spardl_bsag", defaults)?.save_state()?;
        let mut old = State::new(saved.kind(), saved.version());
        old.put_child("part.0", saved.child("part.0")?.clone());
        for s in 1..=4 {
            let part = format!("part.{s}");
            let child = saved.child(&part).unwrap_or(&fresh).clone();
            old.put_child(part, child);
        }
        let mut b = registry.build(spec, defaults)?;
        b.load_state(&old)?;
        let v = input(2)?;
        let (want, got) = (a.allreduce(t, &v)?, b.allreduce(t, &v)?);
        Ok(want.result == got.result && want.dropped == got.dropped)
    });
    for (r, o) in out.into_iter().enumerate() {
        assert!(o.unwrap(), "rank {r}");
    }
}
