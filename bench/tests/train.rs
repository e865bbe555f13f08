//! `sparse-bench train` against independent oracles: the burn MLP's
//! gradients against a hand-written backpropagation in `f64`; dense
//! data-parallel SGD over P ranks against single-process SGD on the union
//! of the ranks' batches; every scheme learning well above chance with
//! identical weights on every rank.

use approx::assert_relative_eq;
use bench::train::data::{self, CLASSES, FEATURES, Set};
use bench::train::model::Mlp;
use bench::train::run::{Summary, plan, run_threads};
use bench::train::{self, Run, TrainArgs};

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
    let mlp = Mlp::new(h);
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
        hidden: 32,
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
