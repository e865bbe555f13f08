//! `sparse-bench step`: the scaled simulation agrees with an unscaled one,
//! a step of a small model gives every scheme a finite speedup and the
//! dense baseline the ring allreduce's closed form, and the keep-dense
//! rules are RedSync's threshold and DGC's dimensions; `--dense mpich` is
//! MPICH's allreduce's closed form at any P; the device phases
//! are the passes-over-memory formula, and the headline columns say they
//! are modelled on the device, the CPU's measured ones apart.

use bench::models::{self, Layer, ModelPreset};
use bench::step::{self, Call, DenseAlgo, SimSettings, StepArgs};
use bench::train::{Family, Run};
use sparse_coll::sim;

/// A layer of `2^18` simulated whole against the same layer simulated at
/// `2^14` (scale 16) and scaled, for every collective of the schemes and
/// the ring, at 8 ranks on Gigabit Ethernet, density 1%: within 8%.
///
/// Why 8%: the proportional part is fitted from the bandwidth parts at
/// `2^14` and `2^13` (see `bench::step`), so headers, length prefixes and
/// the entry round's words stay out of what is scaled; what remains is the
/// sums' and the encodings' sizes, which depend on the random indices
/// drawn at each dimension (the same-sign-mean encoding's most: 1.9% with
/// FIFO links; the ring and TopkA under 0.1%), and, since links are shared
/// max-min, which messages overlap on a link: their start times keep the
/// unscaled latencies, so at `2^14` messages overlap differently than at
/// `2^18` (the same-sign-mean encoding: 5.8% when links became shared). The bandwidth part is
/// checked to be at least 30% of each call's time, so the comparison is
/// not decided by the latency alone.
#[test]
fn scaling_agrees_with_an_unscaled_run() {
    let net = sim::preset("1gbe").unwrap();
    let n = 1 << 18;
    let settings = |max_dim| SimSettings {
        ranks: 8,
        density: 0.01,
        overlap: 0.2,
        max_dim,
        seed: 3,
        dense: DenseAlgo::Ring,
    };
    let calls = [
        Call::Dense,
        Call::Sparse("topk_a"),
        Call::Sparse("topk_a:values=ssmean"),
        Call::Sparse("ssar_recursive_double"),
        Call::Sparse("spardl"),
    ];
    for call in calls {
        let whole = step::comm_time(&*net, call, n, &settings(n)).unwrap();
        let scaled = step::comm_time(&*net, call, n, &settings(1 << 14)).unwrap();
        assert_eq!((whole.sim_dim, whole.scale), (n, 1.0));
        assert_eq!((scaled.sim_dim, scaled.scale), (1 << 14, 16.0));
        assert!(
            whole.bandwidth > 0.3 * whole.seconds,
            "{call:?}: bandwidth {} of {}",
            whole.bandwidth,
            whole.seconds
        );
        let err = (scaled.seconds - whole.seconds).abs() / whole.seconds;
        eprintln!(
            "{call:?}: scaled {:.3e} s, whole {:.3e} s, {:.2}%",
            scaled.seconds,
            whole.seconds,
            err * 100.0
        );
        assert!(
            err < 0.08,
            "{call:?}: scaled {} s, whole {} s ({:.1}%)",
            scaled.seconds,
            whole.seconds,
            err * 100.0
        );
    }
}

/// Two compressed layers (a 3x3 conv of 147,456 bytes, a 512 x 256
/// matrix), one conv below RedSync's threshold, two biases.
fn tiny() -> ModelPreset {
    let layer = |name: &str, shape: &[usize]| Layer {
        name: name.into(),
        shape: shape.to_vec(),
    };
    let layers = vec![
        layer("conv0.weight", &[8, 8, 3, 3]),
        layer("conv1.weight", &[64, 64, 3, 3]),
        layer("conv1.bias", &[64]),
        layer("fc.weight", &[512, 256]),
        layer("fc.bias", &[512]),
    ];
    let total = layers.iter().map(Layer::len).sum();
    ModelPreset {
        name: "tiny",
        layers,
        published_total: total,
        source: "tests/step.rs",
        forward_gflop: 0.01,
        batch: 4,
    }
}

/// Every scheme and baseline gets a row per rank count with a finite
/// positive speedup, the baselines 1; the dense rows' communication is the
/// ring allreduce's closed form `2 (P - 1) (alpha + 4 n / P beta)` (the
/// whole model scaled from `--max-dim`).
#[test]
fn a_small_model_steps_every_scheme() {
    let model = tiny();
    let a = StepArgs {
        ranks: vec![2, 4],
        max_dim: 1 << 12,
        reps: 1,
        ..StepArgs::new("tiny")
    };
    let rep = step::run(&model, &a).unwrap();
    let runs = bench::train::schemes().len() + 2;
    assert_eq!(rep.rows.len(), runs * 2);
    assert!(
        rep.network.starts_with("simulated (25gbe"),
        "{}",
        rep.network
    );
    let route = sim::preset("25gbe").unwrap().route(0, 1);
    for r in &rep.rows {
        for x in [
            r.speedup,
            r.speedup_overlapped,
            r.speedup_comm,
            r.speedup_cpu,
            r.step_ms,
            r.cpu_step_ms,
        ] {
            assert!(x.is_finite() && x > 0.0, "{r:?}");
        }
        assert!(r.comm_ms() > 0.0 && r.cpu_select_ms >= 0.0, "{r:?}");
        if r.density == 1.0 {
            assert_eq!((r.speedup, r.speedup_cpu), (1.0, 1.0));
            assert_eq!(r.device_select_ms, 0.0, "a dense baseline selects nothing");
            assert_eq!(r.comm_sparse_ms, 0.0);
            let p = r.ranks as f64;
            let n = model.total() as f64;
            let want = 2.0 * (p - 1.0) * (route.alpha + 4.0 * n / p * route.beta) * 1e3;
            assert!(
                (r.comm_dense_ms - want).abs() <= 1e-9 * want,
                "P = {}: {} ms != {want} ms",
                r.ranks,
                r.comm_dense_ms
            );
            assert_eq!(r.scaled_calls, 1);
        } else {
            // The two compressed layers, scaled from 4096; the fused
            // dense layers (2,048 or fewer parameters) simulated whole.
            assert_eq!(r.scaled_calls, 2, "{r:?}");
        }
    }
}

/// `--dense mpich` simulates MPICH's `MPI_Allreduce` (Rabenseifner's,
/// with MPICH's fold where P is not a power of two): at a power of two its
/// time is the closed form `2 lg P alpha + 2 (P - 1) / P 4 n beta` (the
/// ring's bytes in fewer rounds); elsewhere (`p'` the largest power of two
/// below P) the same among `p'` ranks plus `2 (alpha + 4 n beta)` for the
/// fold and its return (`scripts/wire-table.py`'s formula), and at most
/// the partners' early reduce-scatter bytes more, `(p' - 1) / p' 4 n beta`,
/// which share the folded rank's link with the fold; more than 1.5x the
/// ring's time there.
#[test]
fn dense_mpich_is_mpichs_allreduce_closed_form() {
    let net = sim::preset("25gbe").unwrap();
    let route = net.route(0, 1);
    // Divisible by every P below, so that the ring's blocks are even.
    let n = 105usize << 12;
    for ranks in [2usize, 3, 4, 5, 6, 7, 8] {
        let settings = |dense| SimSettings {
            ranks,
            density: 0.01,
            overlap: 0.0,
            max_dim: 1 << 20,
            seed: 1,
            dense,
        };
        let mpich = step::comm_time(&*net, Call::Dense, n, &settings(DenseAlgo::Mpich)).unwrap();
        let ring = step::comm_time(&*net, Call::Dense, n, &settings(DenseAlgo::Ring)).unwrap();
        let pof2 = 1usize << (usize::BITS - 1 - ranks.leading_zeros());
        let (pp, p, nb) = (pof2 as f64, ranks as f64, 4.0 * n as f64);
        let mut want = 2.0 * pp.log2() * route.alpha + 2.0 * (pp - 1.0) / pp * nb * route.beta;
        if pof2 != ranks {
            want += 2.0 * (route.alpha + nb * route.beta);
        }
        let ring_want = 2.0 * (p - 1.0) * (route.alpha + nb / p * route.beta);
        if pof2 == ranks {
            assert!(
                (mpich.seconds - want).abs() <= 1e-9 * want,
                "P = {ranks}: {} s != {want} s",
                mpich.seconds
            );
        } else {
            // The unfolded partners' reduce-scatter messages, sent before
            // the fold is in, share the folded rank's link with it (links
            // are shared max-min): a delay of at most their bytes.
            let most = want + (pp - 1.0) / pp * nb * route.beta;
            assert!(
                mpich.seconds >= want * (1.0 - 1e-9) && mpich.seconds <= most * (1.0 + 1e-9),
                "P = {ranks}: {} s not in [{want}, {most}] s",
                mpich.seconds
            );
        }
        assert!(
            (ring.seconds - ring_want).abs() <= 1e-9 * ring_want,
            "P = {ranks}: ring"
        );
        if pof2 != ranks {
            assert!(
                mpich.seconds > 1.5 * ring.seconds,
                "P = {ranks}: the fold costs"
            );
        }
    }
}

/// Under the RGC schemes the layers kept dense by RedSync's threshold are
/// exactly those of at most 128 KiB, and the other one-dimensional ones
/// by DGC's rule; top-k SGD has no threshold, so only the
/// one-dimensional layers go dense.
#[test]
fn the_keep_dense_rules_are_redsyncs_threshold_and_dgcs_dimensions() {
    for model in [models::resnet50(), models::alexnet(), models::bert_base()] {
        for scheme in bench::train::schemes() {
            let family = scheme.family;
            let run = Run::Sparse {
                scheme,
                density: 0.001,
            };
            let plan = step::plan(&run, &model).unwrap();
            for l in &plan.layers {
                let small = 4 * l.spec.len <= step::REDSYNC_COMPRESS_THRESHOLD;
                let rule = l.kept_dense.as_ref().map(step::rule_name);
                let want = if family != Family::TopK && small {
                    Some("threshold")
                } else if l.spec.dims < 2 {
                    Some("dims")
                } else {
                    None
                };
                assert_eq!(rule, want, "{} {}", model.name, l.spec.name);
            }
        }
    }
}

/// Unknown names are errors that list the known ones.
#[test]
fn unknown_names_are_errors() {
    let bad = |a: StepArgs| step::run_named(&a).unwrap_err().to_string();
    assert!(bad(StepArgs::new("gpt")).contains("vgg16"));
    let e = bad(StepArgs {
        network: "token-ring".into(),
        ..StepArgs::new("alexnet")
    });
    assert!(e.contains("25gbe"), "{e}");
    let e = bad(StepArgs {
        schemes: vec!["adam".into()],
        ..StepArgs::new("alexnet")
    });
    assert!(e.contains("redsync_rgc"), "{e}");
}

/// The device phases (issue 40): on the default P100 at 732 GB/s, the
/// tiny model under RGC at 1% on 4 ranks, overlap 0.25, written out layer
/// by layer from the formula's parts: compressed `conv1.weight` (36,864)
/// and `fc.weight` (131,072) select with 6 passes of momentum correction
/// plus radix top-k's reads measured on the H200 at 2^24, 1% (1.279 ms
/// over a read of 0.098 ms), and apply `k (1 + 3 (1 - 0.25))` entries of
/// 16 bytes; the dense `conv0.weight` (576, below RedSync's threshold),
/// `conv1.bias` (64) and `fc.bias` (512) take 5 passes of momentum SGD.
/// The dense momentum baseline: 5 passes over all 168,128 parameters.
#[test]
fn device_phases_are_passes_over_memory_at_the_devices_bandwidth() {
    let model = tiny();
    let dev = step::device("p100").unwrap();
    assert_eq!(dev.bandwidth, 732e9);
    let scheme = bench::train::schemes_named(&["redsync_rgc".into()]).unwrap()[0].clone();
    let rgc = step::plan(
        &Run::Sparse {
            scheme,
            density: 0.01,
        },
        &model,
    )
    .unwrap();
    let (select, update) = step::device_phases(&rgc, &dev, 4, 0.25);
    let reads = 1.279 / 0.098;
    let entries = |n: f64| (0.01 * n) * (1.0 + 3.0 * 0.75);
    let (c1, fc) = (36_864.0, 131_072.0);
    let want_select = (6.0 + reads) * 4.0 * (c1 + fc) / 732e9 * 1e3;
    let want_update =
        (5.0 * 4.0 * (576.0 + 64.0 + 512.0) + 16.0 * (entries(c1) + entries(fc))) / 732e9 * 1e3;
    assert!(
        (select - want_select).abs() <= 1e-12 * want_select,
        "{select} {want_select}"
    );
    assert!(
        (update - want_update).abs() <= 1e-12 * want_update,
        "{update} {want_update}"
    );
    let dense = step::plan(&Run::Dense { momentum: true }, &model).unwrap();
    let (select, update) = step::device_phases(&dense, &dev, 4, 0.25);
    assert_eq!(select, 0.0);
    let want = 5.0 * 4.0 * model.total() as f64 / 732e9 * 1e3;
    assert!((update - want).abs() <= 1e-12 * want, "{update} {want}");
    // The reduced result never exceeds the layer.
    assert_eq!(step::reduced_entries(100, 0.5, 8, 0.0), 100.0);
    assert!(
        step::device("tpu")
            .unwrap_err()
            .to_string()
            .contains("h200")
    );
}

/// The headline columns say they are modelled on the device and come
/// first; this CPU's measured select and update are apart and labelled;
/// the rows' device figures are `device_phases`'; the JSON names both.
#[test]
fn the_headline_columns_say_modelled_and_the_cpus_apart() {
    let h = step::HEADER;
    let pos = |name: &str| h.iter().position(|c| *c == name).unwrap();
    let headline = h.iter().position(|c| c.starts_with("speedup")).unwrap();
    assert_eq!(h[headline], "speedup (device, modelled)");
    assert!(pos("select ms (device, modelled)") < headline);
    assert!(pos("select ms (CPU, measured)") > headline);
    assert!(pos("speedup (CPU phases)") > pos("select ms (CPU, measured)"));
    let model = tiny();
    let a = StepArgs {
        ranks: vec![4],
        max_dim: 1 << 12,
        reps: 1,
        device: "h200".into(),
        schemes: vec!["redsync_rgc".into()],
        ..StepArgs::new("tiny")
    };
    let rep = step::run(&model, &a).unwrap();
    assert_eq!(rep.device.name, "h200");
    assert!(rep.compute.1.contains("h200"), "{}", rep.compute.1);
    for (r, p) in rep.rows.iter().zip(&rep.plans) {
        let (s, u) = step::device_phases(p, &rep.device, 4, a.overlap);
        assert_eq!((r.device_select_ms, r.device_update_ms), (s, u));
        let want = r.compute_ms + s + u + r.comm_ms();
        assert!((r.step_ms - want).abs() <= 1e-12 * want);
    }
    let note = step::device_note(&rep.device);
    assert!(
        note.contains("modelled") && note.contains("4800 GB/s"),
        "{note}"
    );
    let json = step::json_rows(&rep);
    assert_eq!(json[0]["device"], "h200");
    assert!(json[0]["cpu_phases"].as_str().unwrap().contains("CPU"));
    assert!(
        json[0].get("select_ms").is_none(),
        "no unlabelled select_ms"
    );
}

/// `Trainer::step` enters its calls in one round: the simulator times
/// each call's body alone (`Call::SparseBody`) and the joint round apart
/// (`Call::Joint`). The oracle is the agreement round alone
/// (`Call::Agree`, one field): a call less its body is one entry round,
/// which carries a few more words than the one-field agreement (its
/// algorithm, dimension, element type and parameters: at most 28 bytes
/// more a rank and round) and so takes at least as long and at most 10%
/// longer on Gigabit Ethernet (alpha dominates), as does the joint round
/// (two more words); at P = 2 to 8, for four collectives.
#[test]
fn a_call_less_its_body_is_one_entry_round() {
    let net = sim::preset("1gbe").unwrap();
    for ranks in 2..=8 {
        let s = SimSettings {
            ranks,
            density: 0.01,
            overlap: 0.2,
            max_dim: 1 << 16,
            seed: 5,
            dense: DenseAlgo::Ring,
        };
        let time = |call| step::comm_time(&*net, call, 1 << 14, &s).unwrap().seconds;
        let agree = time(Call::Agree);
        let joint = time(Call::Joint);
        assert!(
            joint >= agree && joint <= 1.1 * agree,
            "P = {ranks}: joint {joint:e} s, agreement {agree:e} s"
        );
        for spec in ["topk_a", "ssar_recursive_double", "spardl", "gtopk"] {
            let whole = time(Call::Sparse(spec));
            let body = time(Call::SparseBody(spec));
            let entry = whole - body;
            assert!(
                entry >= agree * 0.999 && entry <= 1.1 * agree,
                "{spec}, P = {ranks}: call {whole:e} s, body {body:e} s, agreement {agree:e} s"
            );
        }
    }
}
