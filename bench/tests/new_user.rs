//! The new user's trial (issue 28): the six tasks a user outside the
//! workspace tries first, from the README and the crate docs alone,
//! through the public API only, so that a change that breaks a user's
//! first hour fails here.
//!
//! 1. Top-k of a 10M gradient: `task1_topk_of_a_10m_gradient`.
//! 2. A sparse allreduce on 8 thread ranks: `task2_...` (and the README's
//!    example, compiled and run as a doc test of this crate).
//! 3. A user's own selector and collective through the registry, the suites
//!    and `Auto`: `task3_the_users_selector_keeps_the_contract` for the
//!    selector; the collective is `sparse-coll/examples/custom_scheme.rs`
//!    (registered by name, both collective suites on 1 to 9 ranks, `Auto`
//!    choosing it where it is cheapest), which `scripts/test.sh` runs.
//! 4. A user's own value codec through the built-in collectives by name
//!    (`topk_a:values=u8`): `sparse-coll/tests/user_codec.rs`.
//! 5. A logistic regression trained with `residual_sgd::Trainer` at 1%
//!    density: `task5_logistic_regression_at_one_percent`.
//! 6. A CPU-against-wgpu differential test of the user's selector:
//!    `task6_the_users_selector_on_wgpu_and_on_the_cpu`.

use backend_cpu::Cpu;
use bench::train::data;
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Reduced, Registry, ThreadCluster, Transport};
use sparse_core::{Backend, BufferOps, Element, KeyOrder, Result};
use sparse_select::testing::{Promise, selector_suite_for};
use sparse_select::{RadixTopK, Selection, Selector};

/// A user's selector written against the backend primitives, so that it
/// runs on every backend: the top `k / segments` magnitudes of each of
/// `segments` equal segments (the remainder spread over the first ones),
/// as SparDL's block top-k does.
#[derive(Debug, Clone, Copy)]
struct SegmentedTopK {
    segments: usize,
}

impl<B: Backend<E>, E: Element> Selector<B, E> for SegmentedTopK {
    fn name(&self) -> String {
        format!("segmented top-k ({} segments)", self.segments)
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        let n = b.len(x);
        sparse_core::backend::check_k(k, n)?;
        // The primitive rejects NaN; infinity is the selector's to refuse.
        sparse_core::backend::check_finite_buffer(b, x)?;
        let s = self.segments.clamp(1, n.max(1));
        let offsets: Vec<usize> = (0..=s).map(|j| j * n / s).collect();
        let mut ks: Vec<usize> = (0..s).map(|j| k / s + usize::from(j < k % s)).collect();
        // A segment shorter than its share passes the excess on.
        let mut carry = 0;
        for j in 0..s {
            let len = offsets[j + 1] - offsets[j];
            ks[j] += carry;
            carry = ks[j].saturating_sub(len);
            ks[j] -= carry;
        }
        for j in (0..s).rev() {
            let len = offsets[j + 1] - offsets[j];
            let room = (len - ks[j]).min(carry);
            ks[j] += room;
            carry -= room;
        }
        let sel = b.topk_abs_segmented(x, &offsets, &ks)?;
        let count = b.len(&sel.indices);
        Ok(Selection {
            indices: sel.indices,
            values: sel.values,
            count,
            threshold: None,
        })
    }
}

/// Task 1: the top 0.1% of a 10M-element gradient by magnitude, on the
/// reference backend, against a brute-force oracle.
#[test]
fn task1_topk_of_a_10m_gradient() -> Result<()> {
    let n = 10_000_000;
    let k = n / 1000;
    let g: Vec<f32> = (0..n)
        .map(|i| {
            let h = sparse_core::hash::fnv1a((i as u64).to_le_bytes());
            (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let top = RadixTopK::magnitude().select(&Cpu, &Cpu.upload(&g)?, k)?;
    let got = top.to_sparse(&Cpu, n)?;
    // The oracle: the k-th largest magnitude by a partial sort, ties to
    // the lower index.
    let mut order: Vec<u32> = (0..n as u32).collect();
    let key = |i: u32| KeyOrder::Abs.key(g[i as usize]);
    order.select_nth_unstable_by(k - 1, |&a, &b| key(b).cmp(&key(a)).then(a.cmp(&b)));
    let mut want: Vec<u32> = order[..k].to_vec();
    want.sort_unstable();
    assert_eq!(got.indices(), &want[..]);
    assert!(
        got.iter()
            .all(|(i, v)| v.to_bits() == g[i as usize].to_bits())
    );
    Ok(())
}

/// Task 2: a sparse allreduce on 8 thread ranks by its registry name, at
/// 1% density: SparDL keeps its budget, and what it returns plus every
/// rank's `dropped` is the inputs' sum (within f32 rounding of a sum of 8
/// terms per coordinate and as many dropped parts).
#[test]
fn task2_a_sparse_allreduce_on_8_thread_ranks() -> Result<()> {
    let (p, n) = (8, 100_000);
    let ins = sparse_core::generate::GradientSpec::new(n, 0.01, 7).generate::<f32>(p)?;
    let out = ThreadCluster::new(p).run(|t| {
        let rank = t.rank();
        let mut spardl = Registry::builtin().build("spardl", Defaults::density(0.01)?)?;
        spardl.allreduce(t, &ins[rank])
    });
    let out: Vec<Reduced<f32>> = out.into_iter().collect::<Result<_>>()?;
    let mut sum = vec![0.0f64; n];
    let mut mags = vec![0.0f64; n];
    for v in &ins {
        for (i, x) in v.iter() {
            sum[i as usize] += f64::from(x);
            mags[i as usize] += f64::from(x.abs());
        }
    }
    let mut got: Vec<f64> = out[0]
        .result
        .to_dense()
        .into_iter()
        .map(f64::from)
        .collect();
    for red in &out {
        assert_eq!(red.result, out[0].result, "the same result on every rank");
        assert!(
            red.result.nnz() <= n / 100,
            "SparDL keeps at most k entries"
        );
        for (i, x) in red.dropped.iter() {
            got[i as usize] += f64::from(x);
        }
    }
    for i in 0..n {
        let bound = 4.0 * 2.0 * p as f64 * f64::from(f32::EPSILON) * mags[i];
        assert!((got[i] - sum[i]).abs() <= bound, "coordinate {i}");
    }
    Ok(())
}

/// Task 3 (the selector; the collective is `custom_scheme.rs`): the
/// user's selector keeps the selector contract for every element type it
/// is written for.
#[test]
fn task3_the_users_selector_keeps_the_contract() {
    let sel = SegmentedTopK { segments: 5 };
    selector_suite_for::<f32, _, _>(&Cpu, || sel, Promise::AtLeastK);
    selector_suite_for::<f64, _, _>(&Cpu, || sel, Promise::AtLeastK);
}

/// Task 6: the user's selector on the kernels (wgpu; lavapipe where there
/// is no GPU) selects exactly what it selects on the CPU, and keeps the
/// selector contract on both.
#[test]
fn task6_the_users_selector_on_wgpu_and_on_the_cpu() -> Result<()> {
    let gpu = backend_cuda::WgpuBackend::new_default()?;
    let sel = SegmentedTopK { segments: 7 };
    selector_suite_for::<f32, _, _>(&Cpu, || sel, Promise::AtLeastK);
    selector_suite_for::<f32, _, _>(&gpu, || sel, Promise::AtLeastK);
    for (n, seed) in [(1usize, 1u64), (1000, 2), (1 << 18, 3)] {
        let x: Vec<f32> = sparse_core::generate::dense_values(
            n,
            sparse_core::generate::ValueDist::HeavyTailed { scale: 1.0 },
            seed,
        );
        for k in [0, 1, n / 100, n] {
            let cpu = SegmentedTopK { segments: 7 }
                .select(&Cpu, &Cpu.upload(&x)?, k)?
                .to_sparse(&Cpu, n)?;
            let kernels = SegmentedTopK { segments: 7 }
                .select(&gpu, &gpu.upload(&x)?, k)?
                .to_sparse(&gpu, n)?;
            assert_eq!(kernels, cpu, "n = {n}, k = {k}");
        }
    }
    Ok(())
}

/// Softmax cross-entropy of a linear model (`w`: `CLASSES x FEATURES`,
/// `bias`: `CLASSES`) on `set`: the mean loss and its gradients.
fn logistic(w: &[f32], bias: &[f32], set: &data::Set) -> (f64, Vec<f32>, Vec<f32>) {
    let (f, c) = (data::FEATURES, data::CLASSES);
    let (mut gw, mut gb, mut loss) = (vec![0.0f32; c * f], vec![0.0f32; c], 0.0f64);
    let m = set.len() as f32;
    for (i, &y) in set.y.iter().enumerate() {
        let x = &set.x[i * f..(i + 1) * f];
        let z: Vec<f32> = (0..c)
            .map(|j| {
                bias[j]
                    + w[j * f..(j + 1) * f]
                        .iter()
                        .zip(x)
                        .map(|(a, b)| a * b)
                        .sum::<f32>()
            })
            .collect();
        let top = z.iter().copied().fold(f32::MIN, f32::max);
        let e: Vec<f32> = z.iter().map(|v| (v - top).exp()).collect();
        let sum: f32 = e.iter().sum();
        loss -= f64::from((e[y as usize] / sum).ln());
        for j in 0..c {
            let d = (e[j] / sum - f32::from(u8::from(j == y as usize))) / m;
            gb[j] += d;
            for (g, &xv) in gw[j * f..(j + 1) * f].iter_mut().zip(x) {
                *g += d * xv;
            }
        }
    }
    (loss / f64::from(m), gw, gb)
}

/// Task 5: a logistic regression on the UCI digits (real data, embedded
/// in `bench`), trained on 2 thread ranks by `residual_sgd::Trainer` with
/// top-k SGD at 1% density through SparDL: every layer compressed (the
/// step report says so, at the density asked for), and the loss falls.
#[test]
fn task5_logistic_regression_at_one_percent() -> Result<()> {
    let (train, _) = data::split()?;
    let (f, c) = (data::FEATURES, data::CLASSES);
    let layers = vec![
        LayerSpec {
            name: "weight".into(),
            len: c * f,
            dims: 2,
        },
        LayerSpec {
            name: "bias".into(),
            len: c,
            dims: 1,
        },
    ];
    let init = vec![vec![0.0f32; c * f], vec![0.0f32; c]];
    let p = 2;
    let out = ThreadCluster::new(p).run(|t| {
        let shard = bench::train::shard(&train, t.rank(), p);
        let cfg = Config::new(0.5, 0.01, Rule::TopK)?;
        let mut trainer = Trainer::new(
            Cpu,
            cfg,
            layers.clone(),
            &init,
            RadixTopK::magnitude(),
            |_| Registry::builtin().build("spardl", Defaults::density(0.01)?),
        )?;
        let first = logistic(&init[0], &init[1], &shard).0;
        let mut last = first;
        for _ in 0..300 {
            let w = trainer.weights()?;
            let (loss, gw, gb) = logistic(&w[0], &w[1], &shard);
            last = loss;
            let rep = trainer.step(t, &[gw, gb])?;
            for (layer, want) in rep.layers.iter().zip([6, 1]) {
                assert!(layer.compressed);
                assert_eq!(layer.sent, want, "k of 1% of {} entries", layer.len);
            }
        }
        Ok((first, last))
    });
    for r in out {
        let (first, last) = r?;
        assert!(last < 0.5 * first, "loss {first} -> {last}");
    }
    Ok(())
}
