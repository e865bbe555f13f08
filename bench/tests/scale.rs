//! `sparse-bench scale`: its byte and round counts are the thread
//! transport's for the same inputs, a run over the memory cap is refused
//! before anything runs, and the report names its network as simulated.

mod svg;

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
        mem_cap_gib: Some(16.0),
        svg: None,
        compute_factor: None,
        warm: false,
        gap_ms: 0.0,
        reps: 1,
        floors: false,
        simgrid: Default::default(),
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
    a.mem_cap_gib = Some(1e-6);
    let e = scale::run(&a).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { .. }), "{e}");
    assert!(
        e.to_string().contains("nothing was run") && e.to_string().contains("GiB"),
        "{e}"
    );
    // A bad overlap and a spec the dimension cannot hold are errors before
    // anything runs (the estimate derives from the same checked split).
    a.mem_cap_gib = Some(16.0);
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

/// A report of `algos` (each with whether it is lossless) at `ranks`, the
/// time of algorithm `a` at `P` being `(a + 1) P` microseconds: distinct,
/// positive, spread over the axis.
fn synthetic(algos: &[(&str, bool)], ranks: &[usize]) -> scale::ScaleReport {
    let mut rows = Vec::new();
    for &p in ranks {
        for (a, &(algo, lossless)) in algos.iter().enumerate() {
            rows.push(scale::ScaleRow {
                ranks: p,
                algo: algo.into(),
                sim_s: 1e-6 * ((a + 1) * p) as f64,
                busiest: Traffic::default(),
                call_bytes_max: 1,
                rounds_max: 1,
                total: Traffic::default(),
                lossless,
                model_bytes: 1.0,
                model_rounds: 1.0,
                result_nnz: 1,
                mem_estimate: 1,
                peak_rss: None,
                wall: std::time::Duration::ZERO,
            });
        }
    }
    scale::ScaleReport {
        network: "25gbe: full bisection, a test".into(),
        mem_cap: scale::mem_cap(Some(1.0), Ok(String::new())).unwrap(),
        rows,
        referee: Vec::new(),
        planner: Vec::new(),
    }
}

/// The plot written and rendered to pixels (`resvg`, without text): the
/// SVG's text and the RGB pixels.
fn draw(report: &scale::ScaleReport, name: &str) -> (String, resvg::tiny_skia::Pixmap) {
    let dir = std::env::temp_dir().join(format!("scale-plot-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("scale.svg");
    scale::plot(report, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    let pixmap = svg::render(&svg, "the scale plot");
    pixmap.save_png(dir.join("scale.png")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (svg, pixmap)
}

/// Pixels of exactly `rgb`.
fn pixels_of(pixmap: &resvg::tiny_skia::Pixmap, (r, g, b): (u8, u8, u8)) -> usize {
    pixmap
        .pixels()
        .iter()
        .filter(|p| p.alpha() == 255 && (p.red(), p.green(), p.blue()) == (r, g, b))
        .count()
}

/// The `<text>` elements' contents and x positions of the SVG.
fn texts(svg: &str) -> Vec<(String, f64)> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let x = t.split("x=\"").nth(1).unwrap().split('"').next().unwrap();
            let body = t.split('>').nth(1).unwrap().split('<').next().unwrap();
            (body.trim().to_string(), x.parse().unwrap())
        })
        .collect()
}

/// Issue 40: the scale plot a person can read. Every registered algorithm
/// (14 lines): each colour of the palette present in the rendered pixels
/// for the lines drawn and absent for the others; every marker distinct;
/// lossless lines solid and lossy ones dashed (the legend's samples: one
/// path, or several dashes); one legend entry per algorithm asked for and
/// no other; a labelled tick at every P of the sweep.
#[test]
fn the_scale_plot_draws_each_line_apart_with_a_tick_at_every_p() {
    let registry = Registry::<f32>::builtin();
    let algos: Vec<(&str, bool)> = registry
        .names()
        .into_iter()
        .filter(|n| *n != "auto")
        .map(|n| {
            (
                n,
                registry
                    .build(n, Defaults::k(8).unwrap())
                    .unwrap()
                    .lossless(),
            )
        })
        .collect();
    assert!(algos.iter().any(|a| a.1) && algos.iter().any(|a| !a.1));
    let ranks = [2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
    let (svg, pixmap) = draw(&synthetic(&algos, &ranks), "all");
    let markers: std::collections::HashSet<_> =
        (0..algos.len()).map(scale::figure::marker).collect();
    assert_eq!(markers.len(), algos.len(), "a marker per line");
    for (i, &rgb) in scale::figure::PALETTE.iter().enumerate() {
        let n = pixels_of(&pixmap, rgb);
        if i < algos.len() {
            assert!(n >= 60, "line {i} ({}): {n} pixels of {rgb:?}", algos[i].0);
        } else {
            assert!(n < 3, "colour {i} of no line: {n} pixels");
        }
    }
    let shown = texts(&svg);
    for (i, &(name, lossless)) in algos.iter().enumerate() {
        let entries = shown.iter().filter(|t| t.0 == name).count();
        assert_eq!(entries, 1, "{name}: one legend entry");
        let (r, g, b) = scale::figure::PALETTE[i];
        let sample = format!("stroke=\"#{r:02X}{g:02X}{b:02X}\" stroke-width=\"3\"");
        let paths = svg.matches(&sample).count();
        if lossless {
            assert_eq!(paths, 1, "{name}: a solid line");
        } else {
            assert!(paths >= 3, "{name}: dashes, {paths} paths");
        }
    }
    for p in ranks {
        assert!(
            shown.iter().any(|t| t.0 == p.to_string()),
            "no tick label {p}"
        );
    }
}

/// Tick labels never overlap: of P = 16, 100 to 104 and 1024 (100 to 104
/// a pixel or two apart), 16 and 1024 are labelled, and of the others
/// only those that clear the label before; those left are at least their
/// half-widths apart. Only the algorithms asked for are in the legend.
#[test]
fn the_scale_plots_tick_labels_do_not_collide() {
    let ranks = [16, 100, 101, 102, 103, 104, 1024];
    let (svg, _) = draw(
        &synthetic(&[("topk_a", true), ("gtopk", false)], &ranks),
        "close",
    );
    let ticks: Vec<(String, f64)> = texts(&svg)
        .into_iter()
        .filter(|t| t.0.parse::<usize>().is_ok_and(|p| ranks.contains(&p)))
        .collect();
    assert!(ticks.iter().any(|t| t.0 == "16") && ticks.iter().any(|t| t.0 == "1024"));
    assert!(
        ticks.len() < ranks.len(),
        "close labels were left out: {ticks:?}"
    );
    for w in ticks.windows(2) {
        let room = 7.5 * (w[0].0.len() + w[1].0.len()) as f64 / 2.0;
        assert!(w[1].1 - w[0].1 >= room, "{ticks:?}");
    }
    let registry = Registry::<f32>::builtin();
    let names: Vec<&str> = registry.names();
    let legend: Vec<String> = texts(&svg)
        .into_iter()
        .map(|t| t.0)
        .filter(|t| names.contains(&t.as_str()))
        .collect();
    assert_eq!(legend, ["topk_a", "gtopk"]);
}

/// The memory cap: 3/4 of `MemAvailable` (kB in /proc/meminfo), the flag
/// over it, a fallback that says why where the line is absent or
/// unreadable, and a bad flag an error.
#[test]
fn the_memory_cap_comes_from_meminfo_or_the_flag() {
    let meminfo = "MemTotal:       16303820 kB\nMemFree:         1000000 kB\nMemAvailable:   12582912 kB\nBuffers: 1 kB\n";
    assert_eq!(scale::mem_available(meminfo), Some(12_582_912 * 1024));
    let cap = scale::mem_cap(None, Ok(meminfo.into())).unwrap();
    assert_eq!(cap.gib, 0.75 * 12.0);
    assert!(
        cap.from.contains("MemAvailable") && cap.from.contains("12.0 GiB"),
        "{}",
        cap.from
    );
    let cap = scale::mem_cap(Some(2.5), Ok(meminfo.into())).unwrap();
    assert_eq!((cap.gib, cap.from.as_str()), (2.5, "--mem-cap-gib"));
    for bad in [
        "MemTotal: 1 kB\n",
        "MemAvailable: lots kB\n",
        "MemAvailable: 12 MB\n",
        "MemAvailable: 12\n",
    ] {
        assert_eq!(scale::mem_available(bad), None, "{bad}");
        let cap = scale::mem_cap(None, Ok(bad.into())).unwrap();
        assert_eq!(cap.gib, scale::MEM_CAP_FALLBACK_GIB);
        assert!(cap.from.contains("no MemAvailable"), "{}", cap.from);
    }
    let gone = std::io::Error::new(std::io::ErrorKind::NotFound, "not here");
    let cap = scale::mem_cap(None, Err(gone)).unwrap();
    assert!(
        cap.from.contains("cannot be read") && cap.from.contains("--mem-cap-gib"),
        "{}",
        cap.from
    );
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            scale::mem_cap(Some(bad), Ok(meminfo.into())).is_err(),
            "{bad}"
        );
    }
}

/// The benchmark's loop in the model (`--reps`, `--floors`, `--gap-ms`):
/// on a link whose token bucket the calls and their floors drain, later
/// calls are slower than the first; a pause long enough to refill the
/// bucket before each call gives every call the first one's time; on a
/// link without a bucket the calls of a stateless algorithm all take the
/// same time, floors or not. Communication only, so times are exact
/// functions of the inputs.
#[test]
fn the_benchmark_loop_drains_and_a_pause_refills_the_bucket() {
    let dir = std::env::temp_dir().join(format!("scale-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 100 Mb/s after a 20 KB bucket at 1 GB/s: topk_a's exchange at P = 2,
    // n = 2^16 and 1% (655 pairs, 5 KB) and its floors drain it in a few
    // calls.
    let shaped = dir.join("shaped.net");
    std::fs::write(
        &shaped,
        "name = shaped\nmodel = full_bisection\nalpha_s = 1e-5\nbytes_per_s = 1.25e7\n\
         bucket_bytes = 20000\npeak_bytes_per_s = 1e9\n",
    )
    .unwrap();
    let plain = dir.join("plain.net");
    std::fs::write(
        &plain,
        "name = plain\nmodel = full_bisection\nalpha_s = 1e-5\nbytes_per_s = 1.25e7\n",
    )
    .unwrap();
    let time = |net: &std::path::Path, reps: u64, floors: bool, gap_ms: f64| {
        let mut a = args(vec![2]);
        a.n = 1 << 16;
        a.algos = vec!["topk_a".into()];
        a.network = net.display().to_string();
        a.warm = true;
        (a.reps, a.floors, a.gap_ms) = (reps, floors, gap_ms);
        let rep = scale::run(&a).unwrap();
        assert_eq!(rep.rows.len(), 1);
        rep.rows[0].sim_s
    };
    // The warm call leaves the bucket partly drained; the first timed call
    // after a full refill is the reference.
    let fresh = time(&shaped, 1, false, 1000.0);
    let drained = time(&shaped, 9, true, 0.0);
    assert!(
        drained > 1.5 * fresh,
        "drained {drained} s, fresh {fresh} s"
    );
    let refilled = time(&shaped, 9, true, 1000.0);
    assert!(
        (refilled - fresh).abs() <= 1e-9 * fresh,
        "refilled {refilled} s, fresh {fresh} s"
    );
    // Without a bucket nothing carries over from call to call.
    let one = time(&plain, 1, false, 0.0);
    for (reps, floors) in [(5, false), (5, true)] {
        let t = time(&plain, reps, floors, 0.0);
        assert!(
            (t - one).abs() <= 1e-9 * one,
            "{reps} reps, floors {floors}: {t} s against {one} s"
        );
    }
    // A negative or absurd pause is refused.
    let mut a = args(vec![2]);
    a.gap_ms = -1.0;
    assert!(scale::run(&a).is_err());
    std::fs::remove_dir_all(&dir).ok();
}
