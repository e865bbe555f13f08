//! `sparse-bench allreduce` rows against the collectives run directly.

use bench::allreduce::{AllreduceArgs, run_threads};
use sparse_coll::{AUTO_ALPHA, AUTO_BETA, Auto, Defaults, Profile, Registry, ThreadCluster};

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
            gap_ms: 0.0,
            settle_ms: 0.0,
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
        gap_ms: 0.0,
        settle_ms: 0.0,
    };
    assert!(run_threads(&bad).is_err());
}

/// `auto`'s row prints the candidate it ran and that candidate's model
/// bytes (it printed the bytes of the cost model's pick for the true
/// overlap while it ran its first call's pick). At overlap 0.5 the first
/// call, which assumes none, picks another candidate than the true overlap
/// does; the warm-up call measures the overlap, so the timed call runs the
/// cost model's pick for the input's exact profile.
#[test]
fn the_auto_row_shows_its_choice_and_that_choices_model_bytes() {
    let a = AllreduceArgs {
        ranks: 4,
        n: 100_000,
        density: 0.01,
        overlap: 0.5,
        algos: vec!["auto".into()],
        seed: 3,
        reps: 2,
        gap_ms: 0.0,
        settle_ms: 0.0,
    };
    let rep = run_threads(&a).unwrap();
    let row = &rep.rows[0];
    let chose = row.chose.as_deref().expect("auto names what it ran");
    let registry = Registry::<f32>::builtin();
    let ran = registry.build(chose, Defaults::lossless()).unwrap();
    assert_eq!(row.model_bytes, ran.cost(&rep.profile).bytes(), "{chose}");
    let judge = Auto::<f32>::lossless(AUTO_ALPHA, AUTO_BETA).unwrap();
    let pick = |prof: &Profile| judge.candidates()[judge.choose(prof)].name();
    let assumed = Profile {
        union: rep.profile.k_sum,
        ..rep.profile
    };
    assert_ne!(
        pick(&assumed),
        pick(&rep.profile),
        "the case needs a revision"
    );
    assert_eq!(chose, pick(&rep.profile));
    // The model bytes are the bytes of the call.
    let bytes = row.bytes_recv_max.unwrap() as f64;
    assert!((row.model_bytes - bytes).abs() <= 0.1 * bytes, "{row:?}");
}

/// The overlap measurement reports a saving only where each rank had a CPU
/// for its step and one for its allreduce, and only a positive one; with
/// 4 thread ranks on this machine's CPUs it says how many each had.
#[test]
fn the_overlap_report_shows_no_saving_it_cannot_have() {
    use bench::allreduce::OverlapReport;
    let report = |cpus_per_rank: f64, overlapped_ms: f64| OverlapReport {
        algo: "spardl".into(),
        cpus_per_rank,
        compute_ms: 1.0,
        allreduce_ms: 1.0,
        sequential_ms: 2.0,
        overlapped_ms,
    };
    assert_eq!(report(2.0, 1.5).saved(), Some(0.25));
    assert_eq!(
        report(2.0, 2.5).saved(),
        None,
        "a slower overlapped run saved nothing"
    );
    assert_eq!(report(2.0, 2.0).saved(), None);
    let crowded = report(0.5, 1.0);
    assert!(!crowded.can_overlap() && crowded.saved().is_none());

    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let a = AllreduceArgs {
        ranks: 4,
        n: 20_000,
        density: 0.01,
        overlap: 0.5,
        algos: vec!["spardl".into()],
        seed: 7,
        reps: 1,
        gap_ms: 0.0,
        settle_ms: 0.0,
    };
    let o = run_threads(&a)
        .unwrap()
        .overlap
        .expect("spardl is overlapped");
    assert_eq!(o.cpus_per_rank, cpus as f64 / 4.0);
    assert_eq!(o.can_overlap(), cpus >= 8);
    assert!(o.saved().is_none_or(|s| s > 0.0 && s < 1.0), "{o:?}");
}
