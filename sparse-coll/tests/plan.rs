//! Every algorithm behind its name, and the `Auto` planner against
//! measured traffic.

mod common;
use common::{assert_all_disagree, assert_conserved, inputs, oracle, run};
use sparse_coll::{
    Auto, Budget, Defaults, Entered, Profile, Reduced, Registry, Spardl, SparseAllreduce,
    ThreadCluster, TopkA,
};
use sparse_core::SparseVec;

fn registry() -> Registry<f32> {
    Registry::builtin()
}

#[test]
fn every_registered_algorithm_keeps_the_contract() {
    let reg = registry();
    for p in [1usize, 2, 3, 4, 6, 8] {
        let ins = inputs(p, 2003, 0.03, 0.5, true, p as u64);
        for name in reg.names() {
            let spec = match name {
                "spardl_rsag" if p % 2 == 1 => "spardl_rsag:d=1".to_string(),
                _ => name.to_string(),
            };
            let d = Defaults::k(40).unwrap();
            let built = reg.build(&spec, d).unwrap();
            assert_eq!(built.name(), name);
            // The spec it reports parses back into the same algorithm.
            assert_eq!(reg.build(&built.spec(), d).unwrap().spec(), built.spec());
            let out = run(p, &ins, |t, v| reg.build(&spec, d)?.allreduce(t, v));
            let ctx = format!("{spec} P={p}");
            if built.lossless() {
                for red in &out {
                    assert_eq!(red.result.to_dense(), oracle(&ins), "{ctx}");
                    assert_eq!(red.dropped.nnz(), 0, "{ctx}");
                }
            } else {
                // Integer inputs: exact conservation, QSGD's included.
                assert_conserved(&ins, &out, &ctx);
            }
        }
    }
}

#[test]
fn names_and_parameters_parse_or_fail_clearly() {
    let reg = registry();
    let d = Defaults::k(10).unwrap();
    let bsag = reg.build("spardl_bsag:d=2,k=40", d).unwrap();
    assert_eq!(bsag.spec(), "spardl_bsag:k=40,d=2");
    let q = reg
        .build("dsar_split_allgather:qsgd=8,bucket=64", d)
        .unwrap();
    assert_eq!((q.name(), q.lossless()), ("dsar_qsgd".to_string(), false));
    assert!(q.params().starts_with("bits=8,bucket=64"));
    assert_eq!(reg.build("gtopk", d).unwrap().params(), "k=10");
    for (bad, says) in [
        ("nope", "unknown \"nope\""),
        ("gtopk:k=ten", "k=\"ten\""),
        ("gtopk:kk=3", "unknown parameter \"kk\""),
        ("gtopk:k", "not key=value"),
        ("gtopk:k=1,k=2", "given twice"),
        ("dsar_qsgd:bits=3", "bits"),
        ("omnireduce_blocks:block=0", "block"),
        ("spardl_bsag:d=0", "teams"),
        ("ok_topk:period=0", "period"),
        ("", "no name"),
    ] {
        let e = reg
            .build(bad, d)
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(e.to_string().contains(says), "{bad:?}: {e}");
    }
    // The unknown-name error lists every known name.
    let e = reg.build("nope", d).err().unwrap().to_string();
    assert!(reg.names().iter().all(|n| e.contains(n)), "{e}");
    // --help lists every entry with its parameters.
    let help = reg.help();
    for e in reg.entries() {
        assert!(help.contains(e.name()) && help.contains(e.help()));
    }
}

/// Each candidate's largest per-rank received bytes and rounds on `ins`.
fn measured(p: usize, ins: &[SparseVec<f32>], names: &[&str]) -> Vec<(String, u64, u64)> {
    let reg = registry();
    names
        .iter()
        .map(|&name| {
            let out = run(p, ins, |t, v| {
                reg.build(name, Defaults::lossless())?.allreduce(t, v)
            });
            let bytes = out.iter().map(|r| r.traffic.bytes_recv).max().unwrap();
            let rounds = out.iter().map(|r| r.traffic.rounds).max().unwrap();
            (name.to_string(), bytes, rounds)
        })
        .collect()
}

/// Runs `calls` planned allreduces and returns the choices.
fn plan(p: usize, ins: &[SparseVec<f32>], alpha: f64, beta: f64, calls: usize) -> Vec<String> {
    let out: Vec<Vec<(Reduced<f32>, String)>> = ThreadCluster::new(p)
        .run(|t| {
            let mut auto = Auto::lossless(alpha, beta)?.reprofile_every(1)?;
            (0..calls)
                .map(|_| {
                    let v = &ins[sparse_coll::Transport::rank(t)];
                    let red = auto.allreduce(t, v)?;
                    Ok((red, auto.last_name().unwrap()))
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
    out[0].iter().map(|x| x.1.clone()).collect()
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
        let m = measured(p, &ins, &registry().auto_candidates());
        let best = m.iter().map(|x| x.1).min().unwrap();
        let choices = plan(p, &ins, 0.0, 1.0, 3);
        let chosen = m.iter().find(|x| x.0 == choices[2]).unwrap();
        assert!(
            chosen.1 as f64 <= 1.25 * best as f64,
            "P={p} n={n} density={density} overlap={overlap}: chose {} with {} bytes, best {best}: {m:?}",
            chosen.0,
            chosen.1
        );
    }
}

#[test]
fn auto_picks_the_fewest_rounds_when_latency_dominates() {
    for p in [3usize, 8, 9] {
        let ins = inputs(p, 1000, 0.01, 0.5, false, 9);
        let m = measured(p, &ins, &registry().auto_candidates());
        let fewest = m.iter().map(|x| x.2).min().unwrap();
        let choice = plan(p, &ins, 1.0, 0.0, 2).swap_remove(1);
        let chosen = m.iter().find(|x| x.0 == choice).unwrap();
        assert_eq!(chosen.2, fewest, "P={p}: {choice} in {m:?}");
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
    // The paper's formula: between the bounds of SSAR_Recursive_double,
    // 2k lg P .. 2k (P - 1) words.
    let ssar = sparse_coll::SsarRecursiveDouble::default();
    let c = SparseAllreduce::<f32>::paper_cost(&ssar, &prof(25)).unwrap();
    assert_eq!(c.words, 0.5 * (2.0 * 10.0 * 2.0) + 0.5 * (2.0 * 10.0 * 3.0));
    // The prediction: the partner's stream at each of the lg P = 2 steps,
    // the union of 1 and then 2 ranks (10 and 15 of 25 by the overlap
    // model), an 8-byte stream header and 8 bytes per pair.
    let c = SparseAllreduce::<f32>::cost(&ssar, &prof(25));
    assert_eq!(c.bytes(), (8.0 + 8.0 * 10.0) + (8.0 + 8.0 * 15.0));
}

#[test]
fn ranks_running_different_algorithms_all_get_an_error() {
    let reg = registry();
    let names: Vec<&str> = reg.names().into_iter().filter(|&n| n != "auto").collect();
    for &a in &names {
        for &b in &names {
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
                reg.build(name, Defaults::k(8)?)?
                    .allreduce(t, &SparseVec::<f32>::zeros(64)?)
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
        let reg = registry();
        let d = Defaults::k(60).unwrap();
        for name in reg.names() {
            let blocking = run(p, &ins, |t, v| reg.build(name, d)?.allreduce(t, v));
            let overlapped = run(p, &ins, |t, v| {
                let mut algo = reg.build(name, d)?;
                // Compute while the allreduce runs on the progress thread.
                let (red, sum) = overlap(t, |t| algo.allreduce(t, v), || squares_mod_7(200_000));
                // Squares mod 7 repeat 0, 1, 4, 2, 2, 4, 1 (14 per period):
                // 28,571 periods and 0 + 1 + 4.
                assert_eq!(sum, 14 * 28_571 + 5, "the overlapped computation ran");
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
    let blocking = run(p, &ins, |t, v| Spardl::new(Budget::k(50)?).allreduce(t, v));
    // Owned transports, each rank on a thread of its own: start, compute,
    // wait, then use the transport again.
    let handles: Vec<_> = ThreadCluster::new(p)
        .transports()
        .into_iter()
        .map(|t| {
            let v = ins[sparse_coll::Transport::rank(&t)].clone();
            std::thread::spawn(move || {
                let w = v.clone();
                let pending = start(t, move |t| Spardl::new(Budget::k(50)?).allreduce(t, &w));
                let busy = squares_mod_7(100_000);
                let (mut t, first) = pending.wait();
                let again = Spardl::new(Budget::k(50).unwrap()).allreduce(&mut t, &v);
                (first.unwrap(), again.unwrap(), busy)
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let (first, again, busy) = h.join().unwrap();
        // 14,285 periods of 14, then 0 + 1 + 4 + 2 + 2.
        assert_eq!(busy, 14 * 14_285 + 9, "rank {r}: the computation ran");
        assert_eq!(first.result, blocking[r].result, "rank {r}");
        assert_eq!(first.dropped, blocking[r].dropped, "rank {r}");
        assert_eq!(
            again.result, blocking[r].result,
            "rank {r}: the transport works after"
        );
    }
}

/// Busy work with a closed form: the sum of `x^2 mod 7` for `x < n`.
fn squares_mod_7(n: u64) -> u64 {
    (0..n).map(|x| x * x % 7).sum()
}

/// Planners out of step get a disagreement on every rank, not a misread
/// message, and the transport stays usable: planners built with different
/// `every`, and one planner a call ahead of the others, so that it runs its
/// last choice while they profile.
#[test]
fn planners_out_of_step_all_get_an_error() {
    let reg = registry();
    let v = SparseVec::new(40, vec![1, 5], vec![1.0f32, 2.0]).unwrap();
    for p in [2usize, 3] {
        let out = ThreadCluster::new(p).run(|t| {
            let spec = if sparse_coll::Transport::rank(t) == 0 {
                "auto:every=1"
            } else {
                "auto:every=2"
            };
            let differs = reg.build(spec, Defaults::k(8)?)?.allreduce(t, &v);
            // The same transport still works for planners in step.
            let again = reg.build("auto", Defaults::k(8)?)?.allreduce(t, &v)?;
            assert_eq!(again.result.to_dense()[5], 2.0 * p as f32);
            differs
        });
        assert_all_disagree(&out, "every", &format!("every=1 vs 2, P={p}"));
        let out = ThreadCluster::new(p).run(|t| {
            let auto = std::sync::Mutex::new(reg.build("auto:every=2", Defaults::k(8)?)?);
            if sparse_coll::Transport::rank(t) == p - 1 {
                // This rank's planner has profiled once on its own.
                ThreadCluster::new(1)
                    .run(|solo| auto.lock().unwrap().allreduce(solo, &v).map(drop))
                    .pop()
                    .unwrap()?;
            }
            let ahead = auto.into_inner().unwrap().allreduce(t, &v);
            let again = reg.build("auto", Defaults::k(8)?)?.allreduce(t, &v)?;
            assert_eq!(again.result.to_dense()[1], p as f32);
            ahead
        });
        assert_all_disagree(&out, "algorithm", &format!("one planner ahead, P={p}"));
    }
}

/// A user's scheme under its own name: TopkA, wrapped.
struct MyTopk(TopkA<f32>);

impl SparseAllreduce<f32> for MyTopk {
    fn name(&self) -> String {
        "my_topk".into()
    }
    fn lossless(&self) -> bool {
        true
    }
    fn cost(&self, prof: &Profile) -> sparse_core::cost::Cost {
        sparse_core::cost::Cost::new(0.0, prof.k_sum as f64)
    }
    fn enter(
        &mut self,
        t: &mut dyn sparse_coll::Transport,
        v: &SparseVec<f32>,
    ) -> sparse_core::Result<Entered> {
        self.0.enter(t, v)
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn sparse_coll::Transport,
        v: &SparseVec<f32>,
        entered: Entered,
        out: &mut Reduced<f32>,
    ) -> sparse_core::Result<sparse_core::Result<()>> {
        self.0.agreed_body(t, v, entered, out)
    }
}

/// `auto` by name plans over the candidates a spec names, a user's own
/// included, and reports them in its spec; bad candidate lists are errors.
#[test]
fn auto_by_name_plans_over_named_candidates() {
    let mut reg = registry();
    reg.register("my_topk", "", "TopkA, wrapped", |_, _| {
        Ok(Box::new(MyTopk(TopkA::default())))
    })
    .unwrap();
    let d = Defaults::lossless();
    let auto = reg
        .build("auto:candidates=my_topk+ssar_split_allgather,every=3", d)
        .unwrap();
    assert_eq!(
        auto.spec(),
        format!(
            "auto:alpha={},beta={},every=3,candidates=my_topk+ssar_split_allgather",
            sparse_coll::AUTO_ALPHA,
            sparse_coll::AUTO_BETA
        )
    );
    assert_eq!(reg.build(&auto.spec(), d).unwrap().spec(), auto.spec());
    assert_eq!(
        reg.build("auto", d).unwrap().spec(),
        "auto:alpha=0.000005,beta=0.0000000004,every=16"
    );
    for bad in [
        "auto:candidates=nope",
        "auto:candidates=auto",
        "auto:candidates=auto:every=2",
        "auto:candidates=topk_a:values=f16",
        "topk_a:candidates=my_topk",
        "auto:candidates=",
    ] {
        assert!(reg.build(bad, d).is_err(), "{bad}");
    }
    let ins = inputs(3, 500, 0.05, 0.5, false, 9);
    let out = ThreadCluster::new(3).run(|t| {
        let mut auto = reg.build("auto:candidates=my_topk", d)?;
        let r = sparse_coll::Transport::rank(t);
        let red = auto.allreduce(t, &ins[r])?;
        assert_eq!(auto.ran().as_deref(), Some("my_topk"));
        Ok(red)
    });
    for red in out {
        assert_eq!(red.unwrap().result.to_dense(), oracle(&ins));
    }
}

/// The first call assumes no overlap; where the ranks' indices overlap,
/// that can pick another candidate than the cost model picks for the true
/// overlap (the oracle: [`Auto::choose`] on the inputs' exact profile).
/// The planner revises its choice once the first call has measured the
/// overlap: the second call, which does not profile (`every` 16), already
/// runs the oracle's choice, on every rank, and [`SparseAllreduce::cost`]
/// before it is that candidate's cost (what `sparse-bench allreduce`
/// prints as `auto`'s model bytes).
#[test]
fn auto_revises_a_first_choice_made_on_an_assumed_overlap() {
    use sparse_core::generate::{GradientSpec, ValueDist};
    for (p, density, overlap, alpha, beta) in [
        (
            4usize,
            0.01,
            0.5,
            sparse_coll::AUTO_ALPHA,
            sparse_coll::AUTO_BETA,
        ),
        (8, 0.01, 1.0, 0.0, 1.0),
    ] {
        let ins = GradientSpec {
            overlap,
            values: ValueDist::Integer { max: 100 },
            ..GradientSpec::new(100_000, density, 3)
        }
        .generate::<f32>(p)
        .unwrap();
        let truth = Profile::of(&ins);
        let judge = Auto::<f32>::lossless(alpha, beta).unwrap();
        let names: Vec<String> = judge.candidates().iter().map(|c| c.name()).collect();
        let best = &names[judge.choose(&truth)];
        let assumed = &names[judge.choose(&Profile {
            union: truth.k_sum,
            ..truth
        })];
        let ctx = format!("P={p} density={density} overlap={overlap}");
        assert_ne!(assumed, best, "{ctx}: the case must need a revision");
        let out = ThreadCluster::new(p).run(|t| {
            let mut auto = Auto::<f32>::lossless(alpha, beta)?;
            let v = &ins[sparse_coll::Transport::rank(t)];
            let mut seen = Vec::new();
            for _ in 0..3 {
                let before = auto.cost(&truth);
                let red = auto.allreduce(t, v)?;
                seen.push((auto.last_name().unwrap(), before, red));
            }
            Ok(seen)
        });
        for seen in out {
            let seen = seen.unwrap();
            let ran: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
            assert_eq!(ran, [assumed, best, best], "{ctx}");
            for (name, before, red) in &seen {
                assert_eq!(red.result.to_dense(), oracle(&ins), "{ctx}");
                let c = &judge.candidates()[names.iter().position(|n| n == name).unwrap()];
                assert_eq!(
                    *before,
                    c.cost(&truth),
                    "{ctx}: {name}'s cost before its call"
                );
            }
        }
    }
}
