//! Which layers a configuration compresses, said at construction and in
//! every step's report: settings that compress nothing are an error unless
//! they ask for dense training ([`Config::dense`]); each keep-dense rule
//! applies where its paper applies it (RedSync's compress threshold for
//! RGC, none for SparCML's top-k SGD, DGC's dimensions rule on request);
//! the report's densities are the configured k over the layer's length.
//! And [`Trainer::step_buffers`] (gradients in backend buffers) is the host
//! step without the upload: the same weights, the caller's buffers only
//! read, NaN and infinity refused on every rank.

use backend_cpu::Cpu;
use residual_sgd::{Config, KeptDense, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, SparseAllreduce, ThreadCluster, Transport};
use sparse_core::{BufferOps, Error, Result};
use sparse_select::{RadixTopK, k_for_density};

type Tr = Trainer<Cpu, RadixTopK>;

fn comm(_: &LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>> {
    Registry::builtin().build("topk_a", Defaults::lossless())
}

fn build(cfg: Config, layers: Vec<LayerSpec>) -> Result<Tr> {
    let w: Vec<Vec<f32>> = layers.iter().map(|l| vec![0.0; l.len]).collect();
    build_from(cfg, layers, &w)
}

/// The exact top-k over TopkA at `cfg`, on `layers` from the weights `w`.
fn build_from(cfg: Config, layers: Vec<LayerSpec>, w: &[Vec<f32>]) -> Result<Tr> {
    Trainer::new(Cpu, cfg, layers, w, RadixTopK::magnitude(), comm)
}

fn layer(name: &str, len: usize, dims: usize) -> LayerSpec {
    LayerSpec {
        name: name.into(),
        len,
        dims,
    }
}

fn rgc(momentum: f32, weight_decay: f32) -> Rule {
    Rule::Rgc {
        momentum,
        nesterov: false,
        weight_decay,
        factor_masking: true,
    }
}

/// The reason of an `InvalidParameter` error, or a failure.
fn reason(res: Result<Tr>) -> String {
    match res {
        Err(Error::InvalidParameter {
            name: "config",
            reason,
        }) => reason,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("settings that compress nothing were accepted"),
    }
}

/// RGC's default threshold (RedSync's 128 KiB) keeps a small model dense:
/// an error naming the threshold and every layer, not silent dense SGD.
/// DGC's rule keeping every layer dense is one too, and so is a model
/// without layers.
#[test]
fn settings_that_compress_nothing_are_an_error() {
    let cfg = Config::new(0.1, 0.01, rgc(0.9, 0.0)).unwrap();
    let why = reason(build(cfg, LayerSpec::matrices(&[1000, 10])));
    for part in [
        "layer0: 4000 bytes",
        "layer1: 40 bytes",
        "131072 bytes",
        "compress_thd",
        "Config::dense",
    ] {
        assert!(why.contains(part), "{part:?} missing from: {why}");
    }
    let cfg = Config::new(0.1, 0.01, Rule::TopK)
        .unwrap()
        .compress_min_dims(2);
    let why = reason(build(cfg, vec![layer("bias", 100, 1)]));
    assert!(why.contains("bias: 1 dimension(s), fewer than 2"), "{why}");
    assert!(why.contains("DGC"), "{why}");
    let why = reason(build(Config::new(0.1, 0.01, Rule::TopK).unwrap(), vec![]));
    assert!(why.contains("no layers"), "{why}");
}

/// RedSync's Alg. 4 compresses a layer when `size(w) > compress_thd`: at
/// exactly 128 KiB a layer goes dense, one parameter more and it is
/// compressed; SparCML's top-k SGD keeps no layer dense by size.
#[test]
fn each_rule_keeps_its_own_papers_layers_dense() {
    let at = 128 * 1024 / 4;
    let cfg = Config::new(0.1, 0.01, rgc(0.9, 0.0)).unwrap();
    let tr = build(cfg, LayerSpec::matrices(&[at, at + 1])).unwrap();
    assert_eq!(tr.compressed(), vec![false, true]);
    assert_eq!(
        cfg.kept_dense(&LayerSpec::matrices(&[at])[0]),
        Some(KeptDense::Threshold {
            bytes: 128 * 1024,
            threshold: 128 * 1024
        })
    );
    let cfg = Config::new(0.1, 0.01, Rule::TopK).unwrap();
    let tr = build(cfg, LayerSpec::matrices(&[at, 3])).unwrap();
    assert_eq!(tr.compressed(), vec![true, true]);
    // DGC's rule, asked for: the bias goes dense, the matrix does not.
    let cfg = cfg.compress_min_dims(2);
    let tr = build(cfg, vec![layer("w", 50, 2), layer("b", 50, 1)]).unwrap();
    assert_eq!(tr.compressed(), vec![true, false]);
}

/// A model of vectors only (every layer one-dimensional) under SparCML's
/// top-k SGD is compressed, and each step's report says so with the
/// density the settings ask for: `k_for_density(len, d) / len`, the entries
/// actually sent.
#[test]
fn a_vector_model_under_topk_compresses_at_the_configured_density() {
    let sizes = [1000usize, 333, 7];
    for p in [1usize, 3] {
        let out = ThreadCluster::new(p).run(|t| {
            for density in [0.01, 0.1, 0.5] {
                let cfg = Config::new(0.1, density, Rule::TopK)?;
                let specs: Vec<LayerSpec> = sizes.iter().map(|&n| layer("v", n, 1)).collect();
                let mut tr = build(cfg, specs)?;
                assert_eq!(tr.compressed(), vec![true; 3]);
                for step in 0..3 {
                    let g: Vec<Vec<f32>> = sizes
                        .iter()
                        .map(|&n| {
                            (0..n)
                                .map(|i| ((i * 7 + step + t.rank()) % 13) as f32 - 6.0)
                                .collect()
                        })
                        .collect();
                    let rep = tr.step(t, &g)?;
                    for (l, &n) in sizes.iter().enumerate() {
                        let k = k_for_density(n, density)?;
                        let r = rep.layers[l];
                        assert!(r.compressed);
                        assert_eq!((r.len, r.sent), (n, k), "layer {l} at {density}");
                        assert_eq!(rep.sent[l].nnz(), k);
                        assert_eq!(r.density(), k as f64 / n as f64);
                    }
                }
            }
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
}

/// `Config::dense`: every layer dense whatever its size, reported dense and
/// sent whole at every step, and the weights are dense SGD's, computed on
/// the host (`w -= lr * mean g`, exact on these dyadic inputs).
#[test]
fn deliberate_dense_training_reports_every_layer_dense() {
    let sizes = [100_000usize, 5];
    let p = 2;
    let lr = 0.5;
    let grad = |r: usize, n: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i + 3 * r) % 9) as f32 / 4.0 - 1.0)
            .collect()
    };
    let out = ThreadCluster::new(p).run(|t| {
        let mut tr = build(Config::dense(lr, Rule::TopK)?, LayerSpec::matrices(&sizes))?;
        assert_eq!(tr.compressed(), vec![false, false]);
        let g: Vec<Vec<f32>> = sizes.iter().map(|&n| grad(t.rank(), n)).collect();
        let rep = tr.step(t, &g)?;
        for (l, &n) in sizes.iter().enumerate() {
            assert!(!rep.layers[l].compressed);
            assert_eq!(rep.layers[l].sent, n);
            assert_eq!(rep.layers[l].density(), 1.0);
        }
        tr.weights()
    });
    for w in out {
        let w = w.unwrap();
        for (l, &n) in sizes.iter().enumerate() {
            let (g0, g1) = (grad(0, n), grad(1, n));
            let want: Vec<f32> = (0..n).map(|i| -lr * (g0[i] + g1[i]) / p as f32).collect();
            assert_eq!(w[l], want, "layer {l}");
        }
    }
    // Nothing to quantize in a dense configuration.
    assert!(
        Config::dense(0.1, Rule::TopK)
            .unwrap()
            .qsgd(4, 64, true)
            .is_err()
    );
    assert!(
        Config::dense(0.1, rgc(0.5, 0.0))
            .unwrap()
            .quantized()
            .is_err()
    );
    assert!(Config::dense(0.1, Rule::TopK).unwrap().is_dense());
}

/// `step_buffers` with the gradients in backend buffers gives the weights,
/// residuals and reports of `step` with the same gradients on the host,
/// bit for bit, under RGC with clipping and weight decay (the paths that
/// change the gradient), and leaves the caller's buffers as they were.
#[test]
fn step_buffers_equals_step_and_only_reads_the_gradients() {
    let sizes = [400usize, 30];
    let cfg = Config::new(0.1, 0.05, rgc(0.9, 1e-2))
        .unwrap()
        .compress_threshold(512)
        .clip(0.5)
        .unwrap();
    let grads = |r: usize, s: usize| -> Vec<Vec<f32>> {
        sizes
            .iter()
            .map(|&n| {
                (0..n)
                    .map(|i| ((i * 31 + s * 7 + r * 3) % 17) as f32 / 8.0 - 1.0)
                    .collect()
            })
            .collect()
    };
    let run = |buffers: bool| {
        ThreadCluster::new(2).run(|t| {
            let w0 = vec![vec![0.25f32; 400], vec![0.5f32; 30]];
            let mut tr = build_from(cfg, LayerSpec::matrices(&sizes), &w0)?;
            let mut out = Vec::new();
            for s in 0..10 {
                let g = grads(t.rank(), s);
                let rep = if buffers {
                    let bufs: Vec<_> = g
                        .iter()
                        .map(|x| tr.backend().upload(x))
                        .collect::<Result<_>>()?;
                    let rep = tr.step_buffers(t, &bufs)?;
                    for (b, x) in bufs.iter().zip(&g) {
                        assert_eq!(
                            &tr.backend().download(b)?,
                            x,
                            "the caller's gradient changed"
                        );
                    }
                    rep
                } else {
                    tr.step(t, &g)?
                };
                let w: Vec<Vec<f32>> = tr
                    .weight_buffers()
                    .into_iter()
                    .map(|b| tr.backend().download(b))
                    .collect::<Result<_>>()?;
                assert_eq!(w, tr.weights()?);
                out.push((rep.sent, rep.layers, w, tr.residuals()?));
            }
            Ok(out)
        })
    };
    let (host, device) = (run(false), run(true));
    for (h, d) in host.into_iter().zip(device) {
        assert_eq!(h.unwrap(), d.unwrap());
    }
}

/// NaN or infinity in a gradient buffer (found by a reduction on the
/// backend) is an error on every rank, naming the element on the rank that
/// holds it: no weight moves, the rank that holds it keeps its residual,
/// and the others absorb their gradients (`r + lr g`: a failed step's
/// rule); gradients of the wrong number or length are errors too.
#[test]
fn a_non_finite_gradient_buffer_is_an_error_on_every_rank() {
    let out = ThreadCluster::new(2).run(|t| {
        let mut tr = build(
            Config::new(0.1, 0.1, Rule::TopK)?,
            LayerSpec::matrices(&[50]),
        )?;
        let w0 = tr.weights()?;
        let mut residual = tr.residuals()?;
        for (at, bad) in [
            (7usize, f32::NAN),
            (49, f32::INFINITY),
            (0, f32::NEG_INFINITY),
        ] {
            let mut g = vec![0.5f32; 50];
            if t.rank() == 1 {
                g[at] = bad;
            }
            let buf = tr.backend().upload(&g)?;
            let res = tr.step_buffers(t, std::slice::from_ref(&buf));
            if t.rank() == 1 {
                assert_eq!(
                    res.err(),
                    Some(Error::NonFinite { index: at }),
                    "{bad} at {at}"
                );
            } else {
                assert!(
                    matches!(res, Err(Error::PeerError { rank: 1, .. })),
                    "{res:?}"
                );
            }
            if t.rank() != 1 {
                for (r, g) in residual[0].iter_mut().zip(&g) {
                    *r += 0.1 * g;
                }
            }
            assert_eq!(tr.weights()?, w0, "no weight moved");
            assert_eq!(tr.residuals()?, residual, "rank {}'s residual", t.rank());
        }
        let short = tr.backend().upload(&[0.5f32; 49])?;
        assert!(matches!(
            tr.step_buffers(t, &[short]),
            Err(Error::LengthMismatch { .. })
        ));
        assert!(matches!(
            tr.step_buffers(t, &[]),
            Err(Error::LengthMismatch { .. })
        ));
        // The transport is still usable: a good step goes through.
        let ok = tr.backend().upload(&[0.5f32; 50])?;
        tr.step_buffers(t, &[ok])?;
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// RedSync's quantized mode where the only compressed layer is the output
/// layer (which it never quantizes) would quantize nothing: an error; with
/// another compressed layer it builds.
#[test]
fn quantized_mode_that_quantizes_nothing_is_an_error() {
    let cfg = Config::new(0.1, 0.01, rgc(0.9, 0.0))
        .unwrap()
        .compress_threshold(0)
        .quantized()
        .unwrap();
    let why = reason(build(cfg, LayerSpec::matrices(&[1000])));
    assert!(why.contains("nothing would be quantized"), "{why}");
    assert!(build(cfg, LayerSpec::matrices(&[1000, 500])).is_ok());
}
