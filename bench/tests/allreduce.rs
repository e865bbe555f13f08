//! `sparse-bench allreduce` rows against the collectives run directly.

use bench::allreduce::{AllreduceArgs, run_threads};
use sparse_coll::{Defaults, Registry, ThreadCluster};

#[test]
fn rows_match_the_collectives_and_the_oracle() {
    for ranks in [1usize, 3, 4] {
        let a = AllreduceArgs {
            ranks,
            n: 20_000,
            density: 0.01,
            overlap: 0.5,
            algos: Vec::new(),
            seed: 7,
            reps: 1,
        };
        let rep = run_threads(&a).unwrap();
        let registry = Registry::<f32>::builtin();
        assert_eq!(
            rep.rows.len(),
            registry.names().len(),
            "every registered algorithm, auto included"
        );
        let ins = bench::allreduce::inputs(&a).unwrap();
        for row in &rep.rows {
            let ctx = format!("P={ranks} {}", row.algo);
            if row.lossless {
                assert!(row.max_abs_err < 1e-4, "{ctx}: {}", row.max_abs_err);
                assert_eq!(row.result_nnz, rep.profile.union, "{ctx}");
            }
            if row.algo == "auto" || row.algo == "ok_topk" || row.algo == "spardl_bsag" {
                continue; // stateful: the row shows a later call
            }
            // The busiest rank's bytes equal a direct run's.
            let spec = format!("{}:{}", row.algo, row.params);
            let direct = ThreadCluster::new(ranks)
                .run(|t| {
                    let mut algo = registry.build(&spec, Defaults::k(ins[0].nnz())?)?;
                    let v = &ins[sparse_coll::Transport::rank(t)];
                    algo.allreduce(t, v)
                })
                .into_iter()
                .map(|r| r.unwrap().traffic.bytes_recv)
                .max()
                .unwrap();
            assert_eq!(row.bytes_recv_max, Some(direct), "{ctx}");
        }
    }
    let bad = AllreduceArgs {
        ranks: 2,
        n: 100,
        density: 0.1,
        overlap: 0.0,
        algos: vec!["nope".into()],
        seed: 1,
        reps: 1,
    };
    assert!(run_threads(&bad).is_err());
}
