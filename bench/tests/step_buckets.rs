//! `sparse-bench step --bucket-mib B` (issue 44, item 4): the step as DDP
//! runs it. A three-layer step computed by hand (bucket boundaries, ready
//! times, the queue on the network, the step's end); the overlapped step
//! between `max(compute, comm)` and the step with nothing overlapped, on
//! random steps; the per-layer rows equal to the headline table's step, the
//! dense baseline in one bucket equal to today's dense step, per-layer
//! buckets (B = 0) equal to today's per-layer step; the SVG timeline parsed
//! by `usvg` with one rectangle per phase.

use bench::models::{Layer, ModelPreset};
use bench::step::bucket::{self, Mode};
use bench::step::timeline::{self, BucketCost, Kind, Lane, StepCosts, Timeline};
use bench::step::{self, Call, StepArgs};
use bench::train::Run;
use rand::{Rng, SeedableRng};

/// A model of `shapes`, named `layer{i}.weight`.
fn model(shapes: &[&[usize]]) -> ModelPreset {
    let layers: Vec<Layer> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Layer {
            name: format!("layer{i}.weight"),
            shape: s.to_vec(),
        })
        .collect();
    let total = layers.iter().map(Layer::len).sum();
    ModelPreset {
        name: "test",
        layers,
        published_total: total,
        source: "tests/step_buckets.rs",
        forward_gflop: 0.01,
        batch: 4,
    }
}

/// A run of `scheme` at 1%.
fn sparse(scheme: &str) -> Run {
    Run::Sparse {
        scheme: bench::train::schemes_named(&[scheme.into()]).unwrap()[0].clone(),
        density: 0.01,
    }
}

/// The `(start, end)` of the phases of `kind` on `lane`, in placing order.
fn spans(tl: &Timeline, lane: Lane, kind: Kind) -> Vec<(f64, f64)> {
    tl.on(lane)
        .filter(|p| p.kind == kind)
        .map(|p| (p.start, p.end))
        .collect()
}

/// Three layers of 1, 2 and 1 MiB (f32) at a cap of 3 MiB: backward walks
/// layer 2 (1 MiB, opens bucket 0), layer 1 (1 + 2 = 3 MiB, fits), layer 0
/// (3 + 1 > 3, opens bucket 1). Costs by hand: forward 10 ms, backward 20
/// ms shared by parameters 5 / 10 / 5; selections 2 and 1 ms, calls 8 and
/// 4 ms, update 3 ms. On the device: forward 0-10, layer 2 10-15, layer 1
/// 15-25, select 0 25-27, layer 0 27-32, select 1 32-33. On the network:
/// bucket 0 ready at 27, sent 27-35; bucket 1 ready at 33, queued behind
/// it, sent 35-39. Update 39-42: the step is 42 ms. Nothing overlapped:
/// 10 + 20 + 2 + 1 + 8 + 4 + 3 = 48 ms.
#[test]
fn a_three_layer_step_computed_by_hand() {
    let m = model(&[&[512, 512], &[1024, 512], &[512, 512]]);
    let plan = step::plan(&sparse("sparcml_topk_sgd"), &m).unwrap();
    let cap = bucket::cap_bytes(3.0).unwrap();
    assert_eq!(cap, 3 << 20);
    let b = bucket::buckets(&plan, cap, cap);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!((b[0].layers.clone(), b[0].len), (vec![2, 1], 3 << 18));
    assert_eq!((b[1].layers.clone(), b[1].len), (vec![0], 1 << 18));
    assert_eq!((b[0].last_layer(), b[1].last_layer()), (1, 0));
    assert_eq!(b[0].call, Call::Sparse("ssar_recursive_double"));
    let costs = StepCosts {
        forward_ms: 10.0,
        backward_ms: vec![5.0, 10.0, 5.0],
        buckets: vec![
            BucketCost {
                last_layer: 1,
                select_ms: 2.0,
                comm_ms: 8.0,
            },
            BucketCost {
                last_layer: 0,
                select_ms: 1.0,
                comm_ms: 4.0,
            },
        ],
        update_ms: 3.0,
        agree_ms: 0.0,
    };
    let tl = timeline::overlapped(&costs).unwrap();
    let dev = |k| spans(&tl, Lane::Device, k);
    assert_eq!(dev(Kind::Forward), [(0.0, 10.0)]);
    assert_eq!(dev(Kind::Backward), [(10.0, 25.0), (27.0, 32.0)]);
    assert_eq!(dev(Kind::Select), [(25.0, 27.0), (32.0, 33.0)]);
    assert_eq!(
        spans(&tl, Lane::Network, Kind::Comm),
        [(27.0, 35.0), (35.0, 39.0)]
    );
    assert_eq!(dev(Kind::Update), [(39.0, 42.0)]);
    assert_eq!(tl.step_ms(), 42.0);
    assert_eq!(timeline::sequential(&costs).unwrap().step_ms(), 48.0);
    // The dense baseline, the same buckets without selections: bucket 0
    // ready at 25 (25-33), bucket 1 at 30, queued (33-37); update 37-40.
    let dense = StepCosts {
        buckets: costs
            .buckets
            .iter()
            .map(|b| BucketCost {
                select_ms: 0.0,
                ..*b
            })
            .collect(),
        ..costs.clone()
    };
    let tl = timeline::overlapped(&dense).unwrap();
    assert_eq!(
        spans(&tl, Lane::Network, Kind::Comm),
        [(25.0, 33.0), (33.0, 37.0)]
    );
    assert_eq!(spans(&tl, Lane::Device, Kind::Backward), [(10.0, 30.0)]);
    assert_eq!(tl.step_ms(), 40.0);
    // With agreement rounds of 1 ms: the entry round after the forward
    // pass (10-11) moves the rest 1 ms on: backward 11-26 and 28-33,
    // selections 26-28 and 33-34, calls 28-36 and 36-40; the commit round
    // 40-41, the update 41-44. Nothing overlapped: 48 + 2 rounds = 50.
    let agreeing = StepCosts {
        agree_ms: 1.0,
        ..costs.clone()
    };
    let tl = timeline::overlapped(&agreeing).unwrap();
    let dev = |k| spans(&tl, Lane::Device, k);
    assert_eq!(dev(Kind::Backward), [(11.0, 26.0), (28.0, 33.0)]);
    assert_eq!(dev(Kind::Select), [(26.0, 28.0), (33.0, 34.0)]);
    assert_eq!(
        spans(&tl, Lane::Network, Kind::Comm),
        [(28.0, 36.0), (36.0, 40.0)]
    );
    assert_eq!(
        spans(&tl, Lane::Network, Kind::Agree),
        [(10.0, 11.0), (40.0, 41.0)]
    );
    assert_eq!(dev(Kind::Update), [(41.0, 44.0)]);
    assert_eq!(tl.step_ms(), 44.0);
    let seq = timeline::sequential(&agreeing).unwrap();
    assert_eq!(
        spans(&seq, Lane::Network, Kind::Agree),
        [(30.0, 31.0), (46.0, 47.0)]
    );
    assert_eq!(seq.step_ms(), 50.0);
    let plan = step::plan(&Run::Dense { momentum: false }, &m).unwrap();
    let b = bucket::buckets(&plan, cap, cap);
    assert_eq!(
        b.iter().map(|b| b.layers.clone()).collect::<Vec<_>>(),
        [vec![2, 1], vec![0]]
    );
    assert!(b.iter().all(|b| b.call == Call::Dense));
}

/// Random steps (1 to 40 layers, 1 to 12 buckets, costs and agreement
/// rounds from 0 to 10 ms):
/// the overlapped step is never longer than the same step with nothing
/// overlapped (`compute + select + comm + update + 2 agree`), and never
/// shorter than `forward + max(backward + select, comm) + update + 2
/// agree` (so never shorter than `max(compute, comm)`); the
/// device and the network each do one thing at a time, and no call starts
/// before its bucket's last layer and its selection are done.
#[test]
fn the_overlapped_step_is_between_its_bounds() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(44);
    for case in 0..2000 {
        let layers = rng.random_range(1..=40);
        let nb = rng.random_range(1..=12);
        let ms = |rng: &mut rand_chacha::ChaCha8Rng| rng.random_range(0.0..10.0);
        let mut c = StepCosts {
            forward_ms: ms(&mut rng),
            backward_ms: (0..layers).map(|_| ms(&mut rng)).collect(),
            buckets: Vec::new(),
            update_ms: ms(&mut rng),
            agree_ms: if rng.random_bool(0.5) {
                ms(&mut rng)
            } else {
                0.0
            },
        };
        for _ in 0..nb {
            let select_ms = if rng.random_bool(0.5) {
                ms(&mut rng)
            } else {
                0.0
            };
            c.buckets.push(BucketCost {
                last_layer: rng.random_range(0..layers),
                select_ms,
                comm_ms: ms(&mut rng),
            });
        }
        let over = timeline::overlapped(&c).unwrap();
        let seq = timeline::sequential(&c).unwrap();
        let backward: f64 = c.backward_ms.iter().sum();
        let rounds = |n: f64| n * c.agree_ms;
        let low =
            c.forward_ms + (backward + c.select_ms()).max(c.comm_ms()) + c.update_ms + rounds(2.0);
        let eps = 1e-9 * seq.step_ms();
        assert!(over.step_ms() <= seq.step_ms() + eps, "case {case}");
        assert!(over.step_ms() >= low - eps, "case {case}");
        assert!(over.step_ms() >= c.compute_ms().max(c.comm_ms()) - eps);
        let want = c.compute_ms() + c.select_ms() + c.comm_ms() + c.update_ms + rounds(2.0);
        assert!((seq.step_ms() - want).abs() <= eps, "case {case}");
        for lane in [Lane::Device, Lane::Network] {
            let mut p: Vec<_> = over.on(lane).collect();
            p.sort_by(|a, b| a.start.total_cmp(&b.start));
            assert!(
                p.windows(2).all(|w| w[0].end <= w[1].start + eps),
                "case {case}"
            );
        }
        for call in over.on(Lane::Network).filter(|p| p.kind == Kind::Comm) {
            let j = call.bucket.unwrap();
            let layer_done = c.forward_ms
                + c.agree_ms
                + c.backward_ms[c.buckets[j].last_layer..].iter().sum::<f64>();
            assert!(call.start >= layer_done - eps, "case {case}");
            if let Some(sel) = over
                .phases
                .iter()
                .find(|p| p.kind == Kind::Select && p.bucket == Some(j))
            {
                assert!(call.start >= sel.end - eps, "case {case}");
            }
        }
    }
}

/// A small model: conv weights above and below RedSync's threshold,
/// biases, a matrix; DGC's one-dimension rule and RedSync's threshold keep
/// some layers dense.
fn tiny() -> ModelPreset {
    let mut m = model(&[&[8, 8, 3, 3], &[64, 64, 3, 3], &[64], &[512, 256], &[512]]);
    m.layers[2].name = "layer1.bias".into();
    m.layers[4].name = "layer3.bias".into();
    m
}

/// `sparse-bench step` of `m` with `bucket_mib`, at 2 and 4 ranks.
fn run(m: &ModelPreset, bucket_mib: f64) -> step::StepReport {
    let a = StepArgs {
        ranks: vec![2, 4],
        max_dim: 1 << 12,
        reps: 1,
        bucket_mib,
        ..StepArgs::new("test")
    };
    step::run(m, &a).unwrap()
}

/// The bucketed row of `scheme` in `mode` at `ranks`.
fn row<'a>(
    rep: &'a step::StepReport,
    ranks: usize,
    scheme: &str,
    mode: Mode,
) -> &'a bucket::BucketRow {
    rep.bucket_rows
        .iter()
        .find(|r| r.ranks == ranks && r.scheme == scheme && r.mode == mode)
        .unwrap()
}

/// Equal within rounding.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// The per-layer rows are the headline table's step (computed apart, by
/// `comm_of` and `device_phases`) for every run; with every layer in one
/// bucket (a cap larger than the model) the dense baseline's fused step is
/// today's dense step, one ring of the whole model; and with per-layer
/// buckets (B = 0) a model with no layer kept dense steps as today's
/// per-layer rows, call for call.
#[test]
fn per_layer_and_one_bucket_are_todays_steps() {
    for (m, mib) in [(tiny(), 25.0), (tiny(), 1e6), (tiny(), 0.0)] {
        let rep = run(&m, mib);
        assert_eq!(rep.bucket_rows.len(), 3 * rep.rows.len());
        for r in &rep.rows {
            let per_layer = row(&rep, r.ranks, &r.scheme, Mode::PerLayer);
            assert!(close(per_layer.step_ms, r.step_ms), "{r:?} {per_layer:?}");
            assert!(close(per_layer.comm_ms, r.comm_ms()));
            if r.density == 1.0 && mib > 1.0 {
                let fused = row(&rep, r.ranks, &r.scheme, Mode::Fused);
                assert_eq!(fused.calls, 1);
                assert!(close(fused.step_ms, r.step_ms), "{r:?} {fused:?}");
            }
        }
    }
    // Only matrices: top-k SGD (no threshold) keeps no layer dense.
    let m = model(&[&[64, 64, 3, 3], &[256, 128], &[512, 256]]);
    let a = StepArgs {
        ranks: vec![4],
        max_dim: 1 << 12,
        reps: 1,
        bucket_mib: 0.0,
        schemes: vec!["sparcml_topk_sgd".into()],
        ..StepArgs::new("test")
    };
    let rep = step::run(&m, &a).unwrap();
    let today = rep
        .rows
        .iter()
        .find(|r| r.scheme == "sparcml_topk_sgd")
        .unwrap();
    let fused = row(&rep, 4, "sparcml_topk_sgd", Mode::Fused);
    assert_eq!(fused.calls, 3);
    assert!(close(fused.step_ms, today.step_ms), "{today:?} {fused:?}");
}

/// The trainer's agreement rounds in every row, against the closed form
/// of one: `sparse_coll::agree_or_fail` is a Bruck allgather of 16 bytes a
/// rank (20 with its 4-byte length in the frame), `ceil(lg P)` rounds,
/// round `k` sending `min(2^k, P - 2^k)` blocks, on 25gbe's full bisection
/// `alpha + bytes beta` each; two rounds (entry and commit) in every row,
/// the headline's and every mode's.
#[test]
fn every_step_has_the_trainers_agreement_rounds() {
    let rep = run(&tiny(), 25.0);
    let route = sparse_coll::sim::preset("25gbe").unwrap().route(0, 1);
    for r in &rep.rows {
        let p = r.ranks;
        let one: f64 = (0..)
            .map(|k| 1usize << k)
            .take_while(|&d| d < p)
            .map(|d| route.alpha + (20 * d.min(p - d)) as f64 * route.beta)
            .sum::<f64>()
            * 1e3;
        assert!(close(r.agree_ms, 2.0 * one), "{r:?}: one round {one} ms");
        for mode in Mode::ALL {
            let b = row(&rep, p, &r.scheme, mode);
            assert!(close(b.agree_ms, 2.0 * one), "{b:?}");
            assert!(b.comm_ms >= b.agree_ms, "{b:?}");
        }
    }
}

/// Every bucketed row: overlapped no longer than fused with an entry
/// round a call (the fused step enters its calls in one round, the
/// overlapped one each call as its bucket is ready: at most 10% more than
/// an agreement round each, `tests/step.rs`), fused+overlap at least
/// `max(compute, comm)`; the dense baseline's rows have speedup 1; the
/// speedup over DDP is the baseline's fused+overlap step over the row's. A
/// negative cap is an error naming the flag.
#[test]
fn bucketed_rows_keep_their_bounds() {
    let rep = run(&tiny(), 0.5);
    for r in &rep.bucket_rows {
        let fused = row(&rep, r.ranks, &r.scheme, Mode::Fused);
        let over = row(&rep, r.ranks, &r.scheme, Mode::Overlapped);
        let entries = if r.scheme == r.baseline {
            0.0
        } else {
            (fused.calls - 1) as f64 * 1.1 * fused.agree_ms / 2.0
        };
        assert!(
            over.step_ms <= (fused.step_ms + entries) * (1.0 + 1e-12),
            "{r:?}"
        );
        assert!(over.step_ms >= over.compute_ms.max(over.comm_ms), "{r:?}");
        let ddp = row(&rep, r.ranks, &r.baseline, Mode::Overlapped);
        assert!(close(r.speedup_vs_ddp, ddp.step_ms / r.step_ms));
        if r.scheme == r.baseline {
            assert_eq!(r.speedup, 1.0);
            assert_eq!(r.select_ms, 0.0);
        }
    }
    let e = step::run(
        &tiny(),
        &StepArgs {
            bucket_mib: -1.0,
            ..StepArgs::new("test")
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bucket-mib"), "{e}");
}

/// The SVG timeline parses (`usvg`) and holds one rectangle per phase of
/// every run's `fused+overlap` step at the largest P, each as wide as its
/// phase is long (up to the 0.5 px floor), and a legend swatch per kind.
#[test]
fn the_timeline_has_one_rectangle_per_phase() {
    let rep = run(&tiny(), 0.05);
    assert_eq!(rep.timeline_ranks, 4);
    assert_eq!(rep.timelines.len(), rep.plans.len());
    let path = std::env::temp_dir().join(format!("step-timeline-{}.svg", std::process::id()));
    step::write_timeline(&rep, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let tree = resvg::usvg::Tree::from_str(&svg, &resvg::usvg::Options::default()).unwrap();
    let mut boxes = std::collections::HashMap::new();
    collect(tree.root(), &mut boxes);
    let phases: usize = rep.timelines.iter().map(|t| t.phases.len()).sum();
    let drawn = boxes.keys().filter(|id| id.starts_with("phase-")).count();
    assert_eq!(drawn, phases);
    assert_eq!(
        boxes.keys().filter(|id| id.starts_with("legend-")).count(),
        6
    );
    assert!(
        rep.timelines
            .iter()
            .all(|t| t.phases.iter().filter(|p| p.kind == Kind::Agree).count() == 2),
        "the entry and commit rounds of every fused+overlap step"
    );
    let max = rep
        .timelines
        .iter()
        .map(Timeline::step_ms)
        .fold(0.0, f64::max);
    // Pixels per ms from the longest phase of all.
    let (r0, i0, p0) = rep
        .timelines
        .iter()
        .enumerate()
        .flat_map(|(r, t)| t.phases.iter().enumerate().map(move |(i, p)| (r, i, p)))
        .max_by(|a, b| (a.2.end - a.2.start).total_cmp(&(b.2.end - b.2.start)))
        .unwrap();
    let px_per_ms = boxes[&format!("phase-{r0}-{i0}")] / (p0.end - p0.start);
    for (r, tl) in rep.timelines.iter().enumerate() {
        assert!(tl.phases.iter().any(|p| p.kind == Kind::Comm));
        for (i, p) in tl.phases.iter().enumerate() {
            let w = boxes[&format!("phase-{r}-{i}")];
            let want = ((p.end - p.start) * px_per_ms).max(0.5);
            assert!(
                (w - want).abs() <= 0.02 + 1e-3 * max,
                "{r} {i}: {w} px, {want} px"
            );
        }
    }
}

/// The widths of the paths with an id under `g`, by id.
fn collect(g: &resvg::usvg::Group, out: &mut std::collections::HashMap<String, f64>) {
    for n in g.children() {
        match n {
            resvg::usvg::Node::Group(g) => collect(g, out),
            n if !n.id().is_empty() => {
                out.insert(n.id().to_string(), n.bounding_box().width() as f64);
            }
            _ => {}
        }
    }
}

/// The backward shares by FLOPs (`bench::step::flops`): each preset's
/// per-layer FLOPs add up to the published figure (torchvision's GFLOPS,
/// which count multiply-adds: ResNet-50 4.09, VGG-16 15.47, AlexNet 0.71;
/// BERT-base the formula of `bench::models`, which leaves out the pooler,
/// the biases and the layer norms, under 1%), within 2%; the LSTM's
/// embedding is a lookup (no share); a model the architecture table does
/// not know is shared by parameters.
#[test]
fn backward_shares_follow_the_architectures_flops() {
    use bench::step::flops;
    let total = |m: &ModelPreset| flops::layer_flops_all(m).unwrap().iter().sum::<f64>();
    for (m, macs) in [
        (bench::models::resnet50(), 4.09e9),
        (bench::models::vgg16(), 15.47e9),
        (bench::models::alexnet(), 0.71e9),
    ] {
        let got = total(&m);
        assert!(
            (got / (2.0 * macs) - 1.0).abs() < 0.02,
            "{}: {got:.4e}",
            m.name
        );
        assert_eq!(flops::backward_shares(&m).by, "FLOPs");
    }
    let bert = bench::models::bert_base();
    let got = total(&bert);
    let want = bert.forward_gflop * 1e9;
    assert!(
        got >= want && got / want - 1.0 < 0.02,
        "{got:.4e} {want:.4e}"
    );
    let lstm = bench::models::lstm_ptb();
    let w = flops::backward_shares(&lstm).weights;
    assert_eq!(w[0], 0.0, "the embedding is a lookup");
    assert_eq!(w[1], 2.0 * lstm.layers[1].len() as f64);
    let t = tiny();
    let s = flops::backward_shares(&t);
    assert_eq!(s.by, "parameters");
    assert_eq!(
        s.weights,
        t.layers.iter().map(|l| l.len() as f64).collect::<Vec<_>>()
    );
}
