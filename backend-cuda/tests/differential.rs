//! Differential tests: the same seeded inputs through the CPU reference and
//! the kernel backend (wgpu; lavapipe where there is no GPU). Integer
//! outputs (indices, counts, histograms, bitmaps, codes) and outputs of one
//! correctly rounded operation (max, gathered and compacted values,
//! scatter-add, scale, QSGD) must be equal bit for bit; `mean_abs` and
//! `sum_squares` within
//! `1e-6` relative (the kernel sums in `f32` within a cube of 4096
//! elements); `axpy` within one rounding of `|a x| + |y|` (the device
//! compiler may fuse it into one multiply-add).
//!
//! Sizes: 1, around the cube size (256) and the tile size (4096), a prime,
//! and 2^22. Run over wgpu, and over CUDA when built with `--features cuda`
//! (skipped, with the reason printed, where no CUDA device is found).
#![cfg(any(feature = "wgpu", feature = "cuda"))]

mod common;

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use sparse_core::qsgd::QsgdParams;
use sparse_core::testing::Rng;
use sparse_core::testing::generate::{ValueDist, dense_values};
use sparse_core::{Backend, Digit, Extreme, HierarchicalHash, KeyOrder};

/// Everything one backend computes from one input.
#[derive(Debug, Default)]
struct Outputs {
    /// Named outputs that must be equal bit for bit.
    exact: Vec<(String, Vec<u64>)>,
    /// `mean_abs`.
    mean: f64,
    /// `sum_squares`.
    squares: f64,
    /// `axpy(a, x, y)` and the bound `|a x| + |y|` of each entry.
    axpy: Vec<(f32, f32)>,
}

impl Outputs {
    fn push(&mut self, name: impl Into<String>, v: impl IntoIterator<Item = u64>) {
        self.exact.push((name.into(), v.into_iter().collect()));
    }
}

fn bits(v: &[f32]) -> impl Iterator<Item = u64> + '_ {
    v.iter().map(|x| x.to_bits() as u64)
}

fn wide(v: &[u32]) -> impl Iterator<Item = u64> + '_ {
    v.iter().map(|&x| x as u64)
}

/// Runs every primitive on `x` (and inputs derived from it by `seed`).
fn run<B: Backend>(b: &B, x: &[f32], seed: u64) -> Outputs {
    let n = x.len();
    let mut o = Outputs::default();
    let buf = b.upload(x).unwrap();
    let sel = |o: &mut Outputs, name: String, s: sparse_core::Selected<B, f32>| {
        let i = b.download(&s.indices).unwrap();
        let v = b.download(&s.values).unwrap();
        o.push(format!("{name} indices"), wide(&i));
        o.push(format!("{name} values"), bits(&v));
    };

    o.push("max_abs", [b.max_abs(&buf).unwrap().to_bits() as u64]);
    o.mean = b.mean_abs(&buf).unwrap();
    o.squares = b.sum_squares(&buf).unwrap();
    let mut sorted: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    sorted.sort_by(f32::total_cmp);
    let quantile = |q: f64| sorted[((n - 1) as f64 * q) as usize];
    for t in [0.0, quantile(0.5), quantile(0.99), quantile(1.0), -1.0] {
        o.push(
            format!("count_above({t})"),
            [b.count_above(&buf, t).unwrap() as u64],
        );
        sel(
            &mut o,
            format!("compact_above({t})"),
            b.compact_above(&buf, t).unwrap(),
        );
    }
    for k in [0, 1, n / 100, n / 3, n] {
        sel(
            &mut o,
            format!("topk_abs k={k}"),
            b.topk_abs(&buf, k).unwrap(),
        );
        for end in [Extreme::Largest, Extreme::Smallest] {
            sel(
                &mut o,
                format!("topk_signed {end:?} k={k}"),
                b.topk_signed(&buf, k, end).unwrap(),
            );
        }
    }
    for order in [KeyOrder::Abs, KeyOrder::Signed, KeyOrder::SignedReversed] {
        let key = order.key(x[n / 2]);
        for (shift, digit_bits) in [(24, 8), (16, 8), (8, 8), (0, 8), (21, 11), (0, 16)] {
            let top = shift + digit_bits;
            let prefix = if top >= 32 { 0 } else { key >> top };
            let d = Digit {
                shift,
                digit_bits,
                prefix,
            };
            let h = b.digit_histogram(&buf, order, d).unwrap();
            o.push(format!("digit_histogram {order:?} {d:?}"), wide(&h));
        }
        for take in [0, 1, 7, usize::MAX] {
            sel(
                &mut o,
                format!("compact_key {order:?} take={take}"),
                b.compact_key(&buf, order, key, take).unwrap(),
            );
        }
    }
    for parts in [1, 3, 64] {
        let offsets: Vec<usize> = (0..=parts).map(|p| p * n / parts).collect();
        let ks: Vec<usize> = offsets.windows(2).map(|w| (w[1] - w[0]) / 10).collect();
        sel(
            &mut o,
            format!("topk_abs_segmented parts={parts}"),
            b.topk_abs_segmented(&buf, &offsets, &ks).unwrap(),
        );
    }

    // Sparse inputs drawn from the seed: unique sorted indices.
    let mut rng = Rng::seed_from_u64(seed);
    let idx: Vec<u32> = (0..n as u32)
        .filter(|_| rng.random_range(0..7) == 0)
        .collect();
    let vals: Vec<f32> = idx.iter().map(|&i| x[i as usize] * 0.5).collect();
    let bidx = b.upload(&idx).unwrap();
    let g = b.gather(&buf, &bidx).unwrap();
    o.push("gather", bits(&b.download(&g).unwrap()));
    let mut dense = b.upload(x).unwrap();
    b.scatter_add(&mut dense, &bidx, &b.upload(&vals).unwrap())
        .unwrap();
    o.push("scatter_add", bits(&b.download(&dense).unwrap()));
    b.mask(&mut dense, &bidx).unwrap();
    o.push("mask", bits(&b.download(&dense).unwrap()));
    b.scale(-0.37, &mut dense).unwrap();
    o.push("scale", bits(&b.download(&dense).unwrap()));
    let mut y: Vec<f32> = dense_values(n, ValueDist::Normal { std: 1.0 }, seed ^ 1);
    let mut by = b.upload(&y).unwrap();
    b.axpy(1.7, &buf, &mut by).unwrap();
    let got = b.download(&by).unwrap();
    for (i, yi) in y.iter_mut().enumerate() {
        *yi = (1.7 * x[i]).abs() + yi.abs();
    }
    o.axpy = got.into_iter().zip(y).collect();

    let words = b.bitmap_encode(&bidx, 0, n).unwrap();
    o.push("bitmap_encode", wide(&b.download(&words).unwrap()));
    let back = b.bitmap_decode(&words, 5, n).unwrap();
    o.push("bitmap_decode", wide(&b.download(&back).unwrap()));

    for bits_per in [2, 4, 8] {
        let p = QsgdParams::new(bits_per, 1000, seed).unwrap();
        let (s, w) = b.qsgd_quantize(&buf, &p, 77).unwrap();
        o.push(
            format!("qsgd scales {bits_per}"),
            bits(&b.download(&s).unwrap()),
        );
        o.push(
            format!("qsgd words {bits_per}"),
            wide(&b.download(&w).unwrap()),
        );
        let d = b.qsgd_dequantize(&s, &w, n, &p).unwrap();
        o.push(
            format!("qsgd decode {bits_per}"),
            bits(&b.download(&d).unwrap()),
        );
    }

    // Hash partitioning: placement order inside a partition is the
    // backend's, the partition's set is not.
    let h = HierarchicalHash::with_defaults(3, seed, 5, idx.len()).unwrap();
    let parts = b
        .hash_partition(&bidx, &b.upload(&vals).unwrap(), &h)
        .unwrap();
    for p in 0..5 {
        let mut set: Vec<(u32, u32)> = (parts.offsets[p]..parts.offsets[p + 1])
            .map(|j| (parts.indices[j], parts.values[j].to_bits()))
            .collect();
        set.sort_unstable();
        o.push(
            format!("hash partition {p}"),
            set.into_iter().flat_map(|(i, v)| [i as u64, v as u64]),
        );
    }
    o
}

fn compare<G: Backend>(gpu: &G, n: usize, dist: ValueDist, seed: u64) {
    let x: Vec<f32> = dense_values(n, dist, seed);
    let want = run(&Cpu, &x, seed);
    let got = run(gpu, &x, seed);
    assert_eq!(want.exact.len(), got.exact.len());
    for ((name, w), (_, g)) in want.exact.iter().zip(&got.exact) {
        if w != g {
            let at = w.iter().zip(g).position(|(a, b)| a != b);
            panic!(
                "n={n} {name}: lengths {} vs {}, first difference at {at:?}",
                w.len(),
                g.len()
            );
        }
    }
    assert!(
        approx::relative_eq!(got.mean, want.mean, max_relative = 1e-6),
        "n={n} mean_abs {} vs {}",
        got.mean,
        want.mean
    );
    assert!(
        approx::relative_eq!(got.squares, want.squares, max_relative = 1e-6),
        "n={n} sum_squares {} vs {}",
        got.squares,
        want.squares
    );
    let (cpu_axpy, gpu_axpy) = (&want.axpy, &got.axpy);
    for (i, (&(c, bound), &(g, _))) in cpu_axpy.iter().zip(gpu_axpy).enumerate() {
        assert!(
            approx::abs_diff_eq!(c, g, epsilon = bound * f32::EPSILON),
            "n={n} axpy[{i}]: {c} vs {g}"
        );
    }
}

fn small_and_odd_sizes<G: Backend>(gpu: &G) {
    for (i, n) in [1usize, 2, 255, 256, 257, 4095, 4097, 10_007]
        .into_iter()
        .enumerate()
    {
        compare(gpu, n, ValueDist::Normal { std: 1.0 }, i as u64);
        compare(
            gpu,
            n,
            ValueDist::HeavyTailed { scale: 1.0 },
            100 + i as u64,
        );
        compare(gpu, n, ValueDist::Integer { max: 3 }, 200 + i as u64);
    }
}

fn two_pow_22<G: Backend>(gpu: &G) {
    compare(gpu, 1 << 22, ValueDist::HeavyTailed { scale: 1.0 }, 22);
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use crate::common::wgpu as gpu;

    #[test]
    fn small_and_odd_sizes() {
        super::small_and_odd_sizes(&gpu());
    }

    #[test]
    fn two_pow_22() {
        super::two_pow_22(&gpu());
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use crate::common::cuda as gpu;

    #[test]
    fn small_and_odd_sizes() {
        if let Some(g) = gpu() {
            super::small_and_odd_sizes(&g);
        }
    }

    #[test]
    fn two_pow_22() {
        if let Some(g) = gpu() {
            super::two_pow_22(&g);
        }
    }
}
