//! `sparse-bench train` against independent oracles: the burn MLP's
//! gradients against a hand-written backpropagation in `f64`; dense
//! data-parallel SGD over P ranks against single-process SGD on the union
//! of the ranks' batches; every scheme learning well above chance with
//! identical weights on every rank; the CNN's forward pass against a
//! hand-written one in `f64` and its gradients against that forward's
//! central differences; Zen's statistics of a run against their
//! definitions' bounds.

use approx::assert_relative_eq;
use bench::train::data::{self, CLASSES, FEATURES, Set};
use bench::train::durable;
use bench::train::model::{CNN_CHANNELS, CNN_KERNEL, Kind, Model};
use bench::train::run::{Summary, plan, run_threads};
use bench::train::{self, Run, TrainArgs};
use residual_sgd::checkpoint;
use sparse_coll::ThreadCluster;

/// Loss and gradients of the MLP by hand, in `f64`.
fn host_backprop(w: &[Vec<f32>], h: usize, set: &Set) -> (f64, Vec<Vec<f64>>) {
    let (w1, b1, w2, b2) = (&w[0], &w[1], &w[2], &w[3]);
    let n = set.len();
    let mut g = vec![
        vec![0.0; FEATURES * h],
        vec![0.0; h],
        vec![0.0; h * CLASSES],
        vec![0.0; CLASSES],
    ];
    let mut loss = 0.0;
    for s in 0..n {
        let x = &set.x[s * FEATURES..(s + 1) * FEATURES];
        let pre: Vec<f64> = (0..h)
            .map(|j| {
                f64::from(b1[j])
                    + (0..FEATURES)
                        .map(|i| f64::from(x[i]) * f64::from(w1[i * h + j]))
                        .sum::<f64>()
            })
            .collect();
        let act: Vec<f64> = pre.iter().map(|&v| v.max(0.0)).collect();
        let z: Vec<f64> = (0..CLASSES)
            .map(|c| {
                f64::from(b2[c])
                    + (0..h)
                        .map(|j| act[j] * f64::from(w2[j * CLASSES + c]))
                        .sum::<f64>()
            })
            .collect();
        let m = z.iter().copied().fold(f64::MIN, f64::max);
        let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        let y = usize::from(set.y[s]);
        loss += (lse - z[y]) / n as f64;
        let dz: Vec<f64> = (0..CLASSES)
            .map(|c| ((z[c] - lse).exp() - f64::from(u8::from(c == y))) / n as f64)
            .collect();
        for c in 0..CLASSES {
            g[3][c] += dz[c];
            for j in 0..h {
                g[2][j * CLASSES + c] += act[j] * dz[c];
            }
        }
        for j in 0..h {
            if pre[j] <= 0.0 {
                continue;
            }
            let da: f64 = (0..CLASSES)
                .map(|c| f64::from(w2[j * CLASSES + c]) * dz[c])
                .sum();
            g[1][j] += da;
            for i in 0..FEATURES {
                g[0][i * h + j] += f64::from(x[i]) * da;
            }
        }
    }
    (loss, g)
}

#[test]
fn burn_gradients_equal_hand_written_backprop() {
    let h = 24;
    let mlp = Model::mlp(FEATURES, h);
    let names: Vec<String> = mlp.layers().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
    let dims: Vec<usize> = mlp.layers().iter().map(|l| l.dims).collect();
    assert_eq!(dims, [2, 1, 2, 1]);
    let (train_set, _) = data::split().unwrap();
    let batch = train_set.rows(&(0..16).collect::<Vec<_>>());
    let w = mlp.init(3);
    let (loss, g) = mlp.loss_and_grads(&w, &batch).unwrap();
    let (want_loss, want) = host_backprop(&w, h, &batch);
    assert_relative_eq!(loss, want_loss, max_relative = 1e-5);
    for (l, (got, want)) in g.iter().zip(&want).enumerate() {
        assert_eq!(got.len(), want.len(), "layer {l}");
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (a, b) in got.iter().zip(want) {
            assert_relative_eq!(
                f64::from(*a),
                *b,
                epsilon = 1e-5 * scale,
                max_relative = 1e-4
            );
        }
    }
    // The weights go in and come out unchanged.
    let net_w = mlp.evaluate(&w, &batch).unwrap();
    assert!(net_w.1 >= 0.0 && net_w.1 <= 1.0);
    assert!(mlp.loss_and_grads(&w[..3], &batch).is_err());
}

fn args(epochs: usize) -> TrainArgs {
    TrainArgs {
        epochs,
        hidden: Some(32),
        ..TrainArgs::default()
    }
}

/// Dense plain SGD over P ranks, step by step, equals SGD on the union of
/// the ranks' batches in one process (the mean of the ranks' mean
/// gradients is the full batch's mean gradient).
#[test]
fn dense_data_parallel_sgd_is_full_batch_sgd() {
    let (train_set, test_set) = data::split().unwrap();
    for p in [2usize, 3] {
        let a = args(1);
        let steps = train::steps_per_epoch(train::shard(&train_set, 0, p).len(), a.batch);
        let run = Run::Dense { momentum: false };
        let out = sparse_coll::ThreadCluster::new(p)
            .run(|t| train::train_rank(t, &run, &a, &train_set, &test_set, &|| {}));
        let want = train::full_batch_sgd(&a, p, &train_set, steps).unwrap();
        for r in out {
            let got = r.unwrap().weights;
            for (gl, wl) in got.iter().zip(&want) {
                for (x, y) in gl.iter().zip(wl) {
                    assert_relative_eq!(*x, *y, epsilon = 1e-6, max_relative = 1e-5);
                }
            }
        }
    }
}

/// Every scheme at P = 2 and 3 (a few hundred steps) learns well above
/// chance (10%), its ranks hold identical weights after every epoch, and
/// only the biases go dense.
#[test]
fn every_scheme_learns_with_identical_weights() {
    let (train_set, test_set) = data::split().unwrap();
    for p in [2usize, 3] {
        let a = args(6);
        let runs = plan(&train::schemes(), &[0.05]);
        let res: Vec<Summary> =
            run_threads(p, &runs, &a, &[1], &train_set, &test_set, &|| {}).unwrap();
        assert_eq!(res.len(), runs.len());
        for s in &res {
            let acc = *s.test_acc.last().unwrap();
            assert!(acc > 0.5, "P={p} {}: test accuracy {acc}", s.run.name());
            assert!(s.identical, "P={p} {}: ranks differ", s.run.name());
            assert_eq!(s.ranks, p);
            assert_eq!(s.test_acc.len(), 6);
            if let Run::Sparse { .. } = s.run {
                assert_eq!(
                    s.dense_layers,
                    [false, true, false, true],
                    "{}",
                    s.run.name()
                );
            }
        }
    }
}

/// The CNN's loss on `set` under `w`, by hand in `f64`: 5x5 convolutions
/// padded by 2 (weights `[out, in, 5, 5]`), ReLU, 2x2 max pooling, the
/// flattening `c, y, x`, linear layers with weights `[in, out]`, softmax
/// cross-entropy.
fn host_cnn_loss(w: &[Vec<f64>], shape: [usize; 2], hidden: usize, set: &Set) -> f64 {
    let [c1, c2] = CNN_CHANNELS;
    let k = CNN_KERNEL;
    let conv = |x: &[f64], cin: usize, h: usize, wd: usize, wt: &[f64], b: &[f64], cout: usize| {
        let mut y = vec![0.0; cout * h * wd];
        for o in 0..cout {
            for r in 0..h {
                for c in 0..wd {
                    let mut acc = b[o];
                    for i in 0..cin {
                        for dr in 0..k {
                            for dc in 0..k {
                                let (rr, cc) = (r + dr, c + dc);
                                if rr < k / 2 || cc < k / 2 || rr - k / 2 >= h || cc - k / 2 >= wd {
                                    continue;
                                }
                                let v = x[i * h * wd + (rr - k / 2) * wd + (cc - k / 2)];
                                acc += v * wt[((o * cin + i) * k + dr) * k + dc];
                            }
                        }
                    }
                    y[o * h * wd + r * wd + c] = acc.max(0.0);
                }
            }
        }
        y
    };
    let pool = |x: &[f64], ch: usize, h: usize, wd: usize| {
        let mut y = vec![0.0; ch * (h / 2) * (wd / 2)];
        for c in 0..ch {
            for r in 0..h / 2 {
                for q in 0..wd / 2 {
                    let at = |dr: usize, dq: usize| x[c * h * wd + (2 * r + dr) * wd + 2 * q + dq];
                    y[c * (h / 2) * (wd / 2) + r * (wd / 2) + q] =
                        at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
                }
            }
        }
        y
    };
    let linear = |x: &[f64], wt: &[f64], b: &[f64], out: usize| -> Vec<f64> {
        (0..out)
            .map(|o| {
                b[o] + x
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v * wt[i * out + o])
                    .sum::<f64>()
            })
            .collect()
    };
    let [h, wd] = shape;
    let f = h * wd;
    let mut loss = 0.0;
    for s in 0..set.len() {
        let x: Vec<f64> = set.x[s * f..(s + 1) * f]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let a = pool(&conv(&x, 1, h, wd, &w[0], &w[1], c1), c1, h, wd);
        let a = pool(
            &conv(&a, c1, h / 2, wd / 2, &w[2], &w[3], c2),
            c2,
            h / 2,
            wd / 2,
        );
        let a: Vec<f64> = linear(&a, &w[4], &w[5], hidden)
            .iter()
            .map(|v| v.max(0.0))
            .collect();
        let z = linear(&a, &w[6], &w[7], CLASSES);
        let m = z.iter().copied().fold(f64::MIN, f64::max);
        let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        loss += (lse - z[usize::from(set.y[s])]) / set.len() as f64;
    }
    loss
}

/// The burn CNN's loss equals the hand-written forward pass, and its
/// gradients equal that forward pass's central differences in `f64` (at
/// 12 coordinates of each layer, every bias among them where short).
#[test]
fn burn_cnn_gradients_equal_central_differences() {
    let (train_set, _) = data::split().unwrap();
    let hidden = 6;
    let cnn = Model::new(Kind::Cnn, train_set.shape, hidden).unwrap();
    let names: Vec<String> = cnn.layers().into_iter().map(|l| l.name).collect();
    assert_eq!(
        names,
        [
            "conv1.weight",
            "conv1.bias",
            "conv2.weight",
            "conv2.bias",
            "fc1.weight",
            "fc1.bias",
            "fc2.weight",
            "fc2.bias"
        ]
    );
    let [c1, c2] = CNN_CHANNELS;
    let k = CNN_KERNEL;
    let flat = c2 * 2 * 2;
    let lens: Vec<usize> = cnn.layers().iter().map(|l| l.len).collect();
    assert_eq!(
        lens,
        [
            c1 * k * k,
            c1,
            c2 * c1 * k * k,
            c2,
            flat * hidden,
            hidden,
            hidden * CLASSES,
            CLASSES
        ]
    );
    let batch = train_set.rows(&[0, 1, 2]);
    let w = cnn.init(5);
    let (loss, g) = cnn.loss_and_grads(&w, &batch).unwrap();
    let mut w64: Vec<Vec<f64>> = w
        .iter()
        .map(|l| l.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let want = host_cnn_loss(&w64, train_set.shape, hidden, &batch);
    assert_relative_eq!(loss, want, max_relative = 1e-5);
    let eps = 1e-5;
    for l in 0..w64.len() {
        let n = w64[l].len();
        let scale = g[l].iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for j in 0..12.min(n) {
            // Spread over the layer: the first coordinates and a stride.
            let i = (j * 7919) % n;
            let x = w64[l][i];
            w64[l][i] = x + eps;
            let up = host_cnn_loss(&w64, train_set.shape, hidden, &batch);
            w64[l][i] = x - eps;
            let down = host_cnn_loss(&w64, train_set.shape, hidden, &batch);
            w64[l][i] = x;
            let fd = (up - down) / (2.0 * eps);
            assert_relative_eq!(
                f64::from(g[l][i]),
                fd,
                epsilon = 1e-4 * f64::from(scale).max(1e-3),
                max_relative = 1e-3
            );
        }
    }
    assert!(
        Model::new(Kind::Cnn, [6, 8], 4).is_err(),
        "two 2x2 poolings need sides that are multiples of 4"
    );
}

/// `--data` parses the three spellings and refuses the rest; a missing
/// directory is an error that says how to install the package.
#[test]
fn data_flag_and_a_missing_directory() {
    use bench::train::data::Data;
    assert_eq!("digits".parse::<Data>().unwrap(), Data::Digits);
    assert_eq!(
        "fashion-mnist".parse::<Data>().unwrap(),
        Data::FashionMnist(bench::train::idx::FASHION_MNIST_DIR.into())
    );
    assert_eq!(
        "fashion-mnist=/x".parse::<Data>().unwrap(),
        Data::FashionMnist("/x".into())
    );
    for bad in ["mnist", "fashion-mnist=", "digits=/x", ""] {
        assert!(bad.parse::<Data>().is_err(), "{bad:?}");
    }
    let e = Data::FashionMnist("/nonexistent/fashion".into())
        .load()
        .unwrap_err()
        .to_string();
    assert!(e.contains("apt-get install dataset-fashion-mnist"), "{e}");
}

/// Zen's statistics of a run stay within their definitions' bounds: the
/// gradient's density in (0, 1]; for a compressed layer the overlap in
/// [0, 1] and the densification between 1 and P (the union of P sets of
/// equal size); NaN for a dense layer. The densities each compressed
/// layer got are the asked density (k = round(d n) of n), the dense layers
/// say why (DGC's rule for biases; RedSync's threshold where set).
#[test]
fn sparsity_statistics_and_layer_uses() {
    let (train_set, test_set) = data::split().unwrap();
    let p = 3;
    let density = 0.05;
    let a = TrainArgs {
        compress_threshold: Some(1000 * 4),
        ..args(2)
    };
    let runs = plan(
        &train::schemes_named(&["redsync_rgc".into(), "sparcml_topk_sgd".into()]).unwrap(),
        &[density],
    );
    let res = run_threads(p, &runs, &a, &[1], &train_set, &test_set, &|| {}).unwrap();
    for s in &res {
        assert_eq!(s.sparsity.len(), 2, "{}", s.run.name());
        for epoch in &s.sparsity {
            for (l, x) in s.layers.iter().zip(epoch) {
                assert!(x.grad_density > 0.0 && x.grad_density <= 1.0, "{x:?}");
                if l.dense.is_some() {
                    assert!(x.overlap.is_nan() && x.densification.is_nan(), "{x:?}");
                    assert_eq!(l.density, 1.0);
                } else {
                    assert!((0.0..=1.0).contains(&x.overlap), "{x:?}");
                    assert!(
                        x.densification >= 1.0 - 1e-12 && x.densification <= p as f64 + 1e-12,
                        "{x:?}"
                    );
                    let k = (density * l.len as f64).round().max(1.0);
                    assert_relative_eq!(l.density, k / l.len as f64, max_relative = 1e-12);
                }
            }
        }
        let why: Vec<Option<&str>> = s.layers.iter().map(|l| l.dense.as_deref()).collect();
        let rgc = s.run.name() == "redsync_rgc";
        // fc1.weight: 64 x 32 = 2048 entries, 8192 bytes; fc2.weight: 32 x 10
        // = 320 entries, 1280 bytes: below RedSync's threshold of 4000 bytes.
        if let Run::Sparse { .. } = s.run {
            assert!(why[0].is_none());
            // RedSync's threshold comes first, DGC's rule after it.
            let bias = if rgc { "compress_thd" } else { "DGC's rule" };
            assert!(why[1].unwrap().contains(bias), "{why:?}");
            assert_eq!(
                why[2].is_some_and(|w| w.contains("compress_thd")),
                rgc,
                "{why:?}"
            );
            assert!(why[3].unwrap().contains(bias), "{why:?}");
        } else {
            assert!(why.iter().all(|w| w.unwrap().contains("dense")));
        }
    }
}

/// `--checkpoint-every` and `--resume` (issue 32): a run of 2 epochs
/// resumed to 4 ends with the weights (digest) and accuracies of an
/// unbroken run of 4, with a checkpoint interval that does not divide an
/// epoch (so it resumes mid-epoch, from the final checkpoint of the short
/// run); a rank failing part way is resumed on the surviving 3 ranks from
/// the last checkpoint, resharded, reporting the steps lost, and trains on
/// with identical weights on every rank.
#[test]
fn checkpoint_resume_and_a_lost_rank() {
    let (train_set, test_set) = data::split().unwrap();
    let dir = std::env::temp_dir().join(format!("bench-train-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let runs = plan(&train::schemes_named(&["dgc".into()]).unwrap(), &[0.05]);
    let p = 4;
    let whole = run_threads(p, &runs, &args(4), &[1], &train_set, &test_set, &|| {}).unwrap();
    let short = TrainArgs {
        checkpoint_every: Some(7),
        checkpoint_dir: Some(dir.clone()),
        keep_checkpoints: Some(2),
        ..args(2)
    };
    run_threads(p, &runs, &short, &[1], &train_set, &test_set, &|| {}).unwrap();
    // --keep-checkpoints 2: of the saves at every 7th step and at the end,
    // the two newest are left, LATEST names the newest, and the resume
    // below starts from it.
    let steps = train::steps_per_epoch(train::shard(&train_set, 0, p).len(), 16) as u64;
    let mut saved: Vec<u64> = (1..=2 * steps).filter(|s| s % 7 == 0).collect();
    if saved.last() != Some(&(2 * steps)) {
        saved.push(2 * steps);
    }
    for run in &runs {
        let run_dir = durable::run_dir(&dir, run, 1);
        let left = step_entries(&run_dir);
        let newest: Vec<String> = saved[saved.len() - 2..]
            .iter()
            .map(|&s| durable::step_name(s))
            .collect();
        assert_eq!(left, newest, "{}", run.name());
        let latest = std::fs::read_to_string(run_dir.join(checkpoint::LATEST)).unwrap();
        assert_eq!(latest, newest[1], "{}", run.name());
    }
    let resumed = TrainArgs {
        resume: Some(dir.clone()),
        ..args(4)
    };
    let again = run_threads(p, &runs, &resumed, &[1], &train_set, &test_set, &|| {}).unwrap();
    for (w, r) in whole.iter().zip(&again) {
        assert_eq!(r.weights_digest, w.weights_digest, "{}", w.run.name());
        assert_eq!(r.test_acc, w.test_acc, "{}", w.run.name());
        assert_eq!(r.resumed, Some((2 * steps, p)), "{}", w.run.name());
        assert_eq!(r.lost_steps, 0);
    }
    // Another setting on resume (the learning rate, the density): an error
    // naming it, not a run that mixes two configurations.
    for (other, name) in [
        (
            TrainArgs {
                resume: Some(dir.clone()),
                lr: args(4).lr * 2.0,
                ..args(4)
            },
            "setting.lr",
        ),
        (
            TrainArgs {
                resume: Some(dir.clone()),
                hidden: Some(17),
                ..args(4)
            },
            "setting.hidden",
        ),
    ] {
        let e = run_threads(p, &runs, &other, &[1], &train_set, &test_set, &|| {}).unwrap_err();
        assert!(e.to_string().contains(name), "{name}: {e}");
    }
    // A lost rank: rank 2 fails before step 30 (checkpoints every 10);
    // the job resumes on 3 ranks.
    let lost_dir = dir.join("lost");
    let failing = TrainArgs {
        checkpoint_every: Some(10),
        checkpoint_dir: Some(lost_dir.clone()),
        fail_rank: Some(2),
        fail_at_step: Some(30),
        ..args(4)
    };
    let e = run_threads(p, &runs, &failing, &[1], &train_set, &test_set, &|| {}).unwrap_err();
    assert!(
        matches!(e, sparse_core::Error::Injected { rank: 2, step: 30 }),
        "{e}"
    );
    // Resumed on the same 4 ranks, from the middle of an epoch (step 20,
    // the failure at 30 being lost), it ends bit for bit where the
    // unbroken run does: the run it cut and the one it never reached.
    let again_dir = dir.join("again");
    copy_dir(&lost_dir, &again_dir);
    let on_four = TrainArgs {
        resume: Some(again_dir.clone()),
        ..args(4)
    };
    let res = run_threads(p, &runs, &on_four, &[1], &train_set, &test_set, &|| {}).unwrap();
    assert_eq!(res[0].resumed, Some((20, 4)));
    assert_eq!(res[1].resumed, None);
    for (r, w) in res.iter().zip(&whole) {
        assert_eq!(r.weights_digest, w.weights_digest, "{}", w.run.name());
        assert_eq!(r.test_acc, w.test_acc, "{}", w.run.name());
    }
    // A directory without a checkpoint of these runs (another density)
    // is an error naming what it holds, not a fresh start.
    let other_runs = plan(&train::schemes_named(&["dgc".into()]).unwrap(), &[0.5]);
    let e = run_threads(
        p,
        &other_runs,
        &on_four,
        &[2],
        &train_set,
        &test_set,
        &|| {},
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("no checkpoint of 2 of this job's runs")
            && e.to_string().contains("-s1"),
        "{e}"
    );
    // Another density with the same seed (issue 40): the dense baseline
    // still matches, but the sparse run at 0.5 has no checkpoint while D's
    // run at 0.05 would be left aside. An error naming what D holds, not
    // a silent fresh start; with --allow-fresh, the baseline resumes (at
    // its end) and the run at 0.5 starts fresh, and the rows say which.
    let resume_other = TrainArgs {
        resume: Some(dir.clone()),
        ..args(2)
    };
    let e = run_threads(
        p,
        &other_runs,
        &resume_other,
        &[1],
        &train_set,
        &test_set,
        &|| {},
    )
    .unwrap_err()
    .to_string();
    let held = durable::run_dir(std::path::Path::new(""), &runs[1], 1);
    assert!(
        e.contains("no checkpoint of 1 of this job's runs (dgc-d0.5-s1)")
            && e.contains(&held.display().to_string())
            && e.contains("--allow-fresh"),
        "{e}"
    );
    let fresh = TrainArgs {
        allow_fresh: true,
        ..resume_other
    };
    let res = run_threads(p, &other_runs, &fresh, &[1], &train_set, &test_set, &|| {}).unwrap();
    assert_eq!(res[0].resumed, Some((2 * steps, p)));
    assert_eq!(res[1].resumed, None);
    assert_eq!(res[1].test_acc.len(), 2, "the fresh run trained 2 epochs");
    let rows = bench::train::output::rows(&res, &[]);
    let starts: Vec<String> = rows.iter().map(bench::train::output::start).collect();
    assert_eq!(
        starts,
        [format!("resumed from step {}", 2 * steps), "fresh".into()]
    );
    for r in &rows {
        let json = bench::train::output::json(r, &rows, "threads");
        assert_eq!(json["start"], bench::train::output::start(r));
    }
    let table = bench::train::output::table(&rows);
    let col = bench::train::output::HEADER
        .iter()
        .position(|h| *h == "start")
        .unwrap();
    assert_eq!(table[1][col], "fresh");
    // A fault asked of a rank the run does not have is an error, not a
    // run without the fault.
    let nowhere = TrainArgs {
        fail_rank: Some(p),
        fail_at_step: Some(3),
        ..args(1)
    };
    let e = run_threads(p, &runs, &nowhere, &[1], &train_set, &test_set, &|| {}).unwrap_err();
    assert!(e.to_string().contains("is not a rank of 4"), "{e}");
    let on_three = TrainArgs {
        resume: Some(lost_dir.clone()),
        ..args(4)
    };
    let res = run_threads(3, &runs, &on_three, &[1], &train_set, &test_set, &|| {}).unwrap();
    // The first run (dense) was lost at step 30 and resumed from step 20
    // of 4 ranks; the one after it had not started and starts afresh.
    assert_eq!(res[0].resumed, Some((20, 4)));
    assert_eq!(res[0].lost_steps, 9);
    assert_eq!(res[1].resumed, None);
    for (s, w) in res.iter().zip(&whole) {
        assert!(s.identical, "{}", s.run.name());
        let (a, b) = (*s.test_acc.last().unwrap(), *w.test_acc.last().unwrap());
        assert!(
            (a - b).abs() < 0.05,
            "{}: {a} on 3 ranks resumed, {b} unbroken on 4",
            s.run.name()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A copy of the directory tree `from` at `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// The entries of `dir` whose names start with `step`, sorted.
fn step_entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step"))
        .collect();
    v.sort();
    v
}

/// `--keep-checkpoints` (durable::prune): the newest by their step as a
/// number (`step-100000000` after `step-99999999`), counted up to the step
/// just saved (a later one, left by a crashed save or another job, is
/// kept and does not count), never the one LATEST names, nothing named
/// otherwise; the removed names on rank 0 only.
#[test]
fn keep_checkpoints_counts_steps_as_numbers_up_to_the_one_saved() {
    let dir = std::env::temp_dir().join(format!("bench-train-keep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let make = |names: &[&str], latest: &str| {
        let _ = std::fs::remove_dir_all(&dir);
        for n in names {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join(checkpoint::MANIFEST), b"{}").unwrap();
        }
        std::fs::write(dir.join(checkpoint::LATEST), latest).unwrap();
    };
    let left = || step_entries(&dir);
    let prune = |keep: u64, upto: u64| {
        let out = ThreadCluster::new(2).run(|t| durable::prune(t, &dir, keep, upto));
        let out: Vec<Vec<String>> = out.into_iter().map(Result::unwrap).collect();
        assert!(out[1].is_empty());
        out[0].clone()
    };
    assert_eq!(durable::step_of("step-00000007"), Some(7));
    for other in ["step-+7", "step-", "step-7a", "steps-7"] {
        assert_eq!(durable::step_of(other), None, "{other}");
    }
    make(
        &[
            "step-00000009",
            "step-99999999",
            "step-100000000",
            "step-+7",
        ],
        "step-100000000",
    );
    assert_eq!(prune(1, 100_000_000), ["step-00000009", "step-99999999"]);
    assert_eq!(left(), ["step-+7", "step-100000000"]);
    // A later step than the one saved (a save that crashed before LATEST
    // moved): kept, and not counted among the newest.
    make(
        &["step-00000007", "step-00000014", "step-00000084"],
        "step-00000014",
    );
    assert_eq!(prune(2, 14), Vec::<String>::new());
    assert_eq!(prune(1, 14), ["step-00000007"]);
    assert_eq!(left(), ["step-00000014", "step-00000084"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A batch of 0 is refused when the command line is read (it divided by
/// zero in `steps_per_epoch` and panicked), and `steps_per_epoch` itself
/// gives no steps rather than a panic.
#[test]
fn a_batch_of_zero_is_an_error_not_a_panic() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        train: bench::train::TrainArgs,
    }
    let e = Cli::try_parse_from(["train", "--batch", "0"])
        .err()
        .expect("refused");
    assert!(e.to_string().contains("at least 1"), "{e}");
    let ok = Cli::try_parse_from(["train", "--batch", "3"]).expect("accepted");
    assert_eq!(ok.train.batch, 3);
    assert_eq!(bench::train::steps_per_epoch(100, 0), 0);
}

/// The pipelined step's gradient hooks (`residual_sgd::burn_hook`) hand
/// over every layer's gradient of both models, bit for bit as
/// `loss_and_grads` computes them, each under its layer's index, last
/// layer first.
#[test]
fn hooked_gradients_are_the_backward_pass_s_for_both_models() {
    let (train_set, _) = data::split().unwrap();
    let batch = train_set.rows(&[0, 3, 5, 8]);
    for kind in [Kind::Mlp, Kind::Cnn] {
        let m = Model::new(kind, train_set.shape, 6).unwrap();
        let w = m.init(7);
        let (_, want) = m.loss_and_grads(&w, &batch).unwrap();
        let (loss, hooked) = m.hooked_loss(&w, &batch).unwrap();
        drop(loss.backward());
        let got: Vec<(usize, Vec<f32>)> = hooked
            .try_iter()
            .map(|g| (g.layer, g.grad.into_data().try_to_vec::<f32>().unwrap()))
            .collect();
        let order: Vec<usize> = got.iter().map(|(l, _)| *l).collect();
        assert_eq!(order.len(), want.len(), "{kind:?}: {order:?}");
        assert!(
            order.windows(2).all(|p| p[0] / 2 >= p[1] / 2),
            "{kind:?}: not last layer first: {order:?}"
        );
        for (l, g) in got {
            assert_eq!(g, want[l], "{kind:?}: layer {l}");
        }
    }
}

/// `--pipelined` trains exactly as the plain step for every scheme (the
/// same selections and collectives, called as buckets become ready; with
/// `--hooks`, each gradient handed over during burn's backward pass), and
/// `--bucket-mib` with per-layer budgets exactly as a call per layer for a
/// scheme whose collective sums the layers laid end to end in the same
/// order (SparCML's top-k SGD on TopkA); the dense run's fused allreduce
/// likewise.
#[test]
fn buckets_and_pipelining_train_as_the_plain_step() {
    let (train_set, test_set) = data::split().unwrap();
    let a = TrainArgs {
        train_images: Some(256),
        ..args(1)
    };
    let weights = |run: &Run, a: &TrainArgs| -> Vec<Vec<f32>> {
        let out = sparse_coll::ThreadCluster::new(2)
            .run(|t| train::train_rank(t, run, a, &train_set, &test_set, &|| {}));
        out.into_iter().next().unwrap().unwrap().weights
    };
    let mut runs = plan(&train::schemes(), &[0.05]);
    runs.push(Run::Dense { momentum: true });
    for run in &runs {
        let plain = weights(run, &a);
        let piped = TrainArgs {
            pipelined: true,
            ..a.clone()
        };
        assert_eq!(weights(run, &piped), plain, "{}: pipelined", run.name());
        let hooked = TrainArgs {
            hooks: true,
            ..piped.clone()
        };
        assert_eq!(weights(run, &hooked), plain, "{}: hooks", run.name());
        let fused = TrainArgs {
            bucket_mib: 25.0,
            ..piped
        };
        let exact = match run {
            Run::Sparse { scheme, .. } => scheme.name == "sparcml_topk_sgd",
            Run::Dense { .. } => true,
        };
        if exact {
            assert_eq!(weights(run, &fused), plain, "{}: fused", run.name());
        } else {
            // Fused at least trains to the same shape, with finite weights.
            let w = weights(run, &fused);
            assert_eq!(w.len(), plain.len());
            assert!(w.iter().flatten().all(|x| x.is_finite()), "{}", run.name());
        }
    }
    let bad = TrainArgs {
        bucket_mib: -1.0,
        ..a.clone()
    };
    assert!(bad.bucket_bytes().is_err());
}

/// `--device wgpu` (burn's wgpu backend and the optimizer's wgpu kernels
/// sharing the device's memory; lavapipe without a GPU) against
/// `--device cpu` on the digits MLP, two ranks, 128 training images (four
/// steps): the dense momentum-SGD run and RedSync's RGC over TopkA at 5%.
/// Bit-for-bit equality is not possible: burn's matmuls and softmax sum
/// in another order on the device (and lavapipe's `exp` is not the CPU's),
/// so each gradient differs from the CPU's in its last bits; the weights
/// agree within `1e-5` (dense) and `1e-4` (sparse; a near-tie in the
/// top-k could send another coordinate, which the bound would catch) in
/// absolute terms, every rank holds the same weights, and the
/// `--pipelined` device step, with `--hooks` too (each gradient a buffer
/// over burn's memory, pushed during the backward pass), trains bit for
/// bit as the plain one.
#[cfg(feature = "wgpu")]
#[test]
fn device_wgpu_trains_as_device_cpu() {
    use bench::train::TrainDevice;
    let (train_set, test_set) = data::split().unwrap();
    let a = TrainArgs {
        train_images: Some(128),
        ..args(1)
    };
    let weights = |run: &Run, a: &TrainArgs| -> Vec<Vec<Vec<f32>>> {
        sparse_coll::ThreadCluster::new(2)
            .run(|t| train::train_rank(t, run, a, &train_set, &test_set, &|| {}))
            .into_iter()
            .map(|r| {
                r.expect("wgpu run: install mesa-vulkan-drivers without a GPU")
                    .weights
            })
            .collect()
    };
    let gpu = TrainArgs {
        device: TrainDevice::Wgpu,
        ..a.clone()
    };
    let mut runs = plan(
        &train::schemes_named(&["redsync_rgc".into()]).unwrap(),
        &[0.05],
    );
    runs.push(Run::Dense { momentum: true });
    for run in &runs {
        let (cpu, dev) = (weights(run, &a), weights(run, &gpu));
        assert_eq!(dev[0], dev[1], "{}: ranks differ on wgpu", run.name());
        let bound = if matches!(run, Run::Dense { .. }) {
            1e-5
        } else {
            1e-4
        };
        let mut worst = 0f32;
        for (c, d) in cpu[0].iter().flatten().zip(dev[0].iter().flatten()) {
            worst = worst.max((c - d).abs());
        }
        assert!(
            worst <= bound,
            "{}: wgpu off the cpu by {worst}",
            run.name()
        );
        assert_ne!(
            cpu[0],
            train::model::Model::mlp(FEATURES, 32).init(a.seed),
            "{}: no step",
            run.name()
        );
        let piped = TrainArgs {
            pipelined: true,
            ..gpu.clone()
        };
        assert_eq!(
            weights(run, &piped),
            dev,
            "{}: pipelined on wgpu",
            run.name()
        );
        let hooked = TrainArgs {
            hooks: true,
            ..piped
        };
        assert_eq!(weights(run, &hooked), dev, "{}: hooked on wgpu", run.name());
    }
}
