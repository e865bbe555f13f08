//! Differential tests, written once: the same seeded inputs through a
//! reference backend (`backend-cpu`) and the backend under test. Integer
//! outputs (indices, counts, histograms, bitmaps, codes) and outputs of one
//! correctly rounded operation (max, gathered and compacted values,
//! scatter-add, scale, QSGD) must be equal bit for bit; `mean_abs` and
//! `sum_squares` within `1e-6` relative (a kernel may sum in `f32` within
//! a block); `axpy` within one rounding of `|a x| + |y|` (a device compiler
//! may fuse it into one multiply-add).
//!
//! Sizes: 1, around a cube size (256) and a tile size (4096), a prime, and
//! 2^22. [`crate::differential_test_suite!`] wraps each check in a
//! `#[test]` per element type.

use super::Rng;
use super::generate::{ValueDist, dense_values};
use crate::Element;
use crate::backend::{Backend, Digit, Extreme, KeyOrder, Selected};
use crate::hash::HierarchicalHash;
use crate::qsgd::QsgdParams;
use rand::{Rng as _, SeedableRng as _};

/// Everything one backend computes from one input.
#[derive(Debug, Default)]
struct Outputs<E> {
    /// Named outputs that must be equal bit for bit.
    exact: Vec<(String, Vec<u64>)>,
    /// `mean_abs`.
    mean: f64,
    /// `sum_squares`.
    squares: f64,
    /// `axpy(a, x, y)` and the bound `|a x| + |y|` of each entry.
    axpy: Vec<(E, E)>,
}

impl<E> Outputs<E> {
    fn push(&mut self, name: impl Into<String>, v: impl IntoIterator<Item = u64>) {
        self.exact.push((name.into(), v.into_iter().collect()));
    }
}

fn bits<E: Element>(v: &[E]) -> impl Iterator<Item = u64> + '_ {
    v.iter().map(|x| x.to_bits_u64())
}

fn wide(v: &[u32]) -> impl Iterator<Item = u64> + '_ {
    v.iter().map(|&x| x as u64)
}

/// `v` in the element type (nearest value).
fn e<E: Element>(v: f64) -> E {
    E::from_f64_nearest(v)
}

/// The digits a histogram is checked on: the top four bytes of the key
/// (as many as fit), an 11-bit digit at the top and the low 16 bits.
fn digits<E: Element>() -> Vec<(u32, u32)> {
    let width = (E::BYTES * 8) as u32;
    [(8, 8), (16, 8), (24, 8), (32, 8), (11, 11)]
        .into_iter()
        .filter_map(|(down, bits)| width.checked_sub(down).map(|shift| (shift, bits)))
        .chain([(0, 16)])
        .collect()
}

/// Runs every primitive on `x` (and inputs derived from it by `seed`).
fn run<B: Backend<E>, E: Element>(b: &B, x: &[E], seed: u64) -> Outputs<E> {
    let mut o = Outputs::default();
    let buf = b.upload(x).unwrap();
    reductions_and_selection(b, x, &buf, &mut o);
    updates_and_codecs(b, x, &buf, seed, &mut o);
    o
}

/// A selection's indices and values, downloaded into the outputs.
fn sel<B: Backend<E>, E: Element>(b: &B, o: &mut Outputs<E>, name: String, s: Selected<B, E>) {
    let i = b.download(&s.indices).unwrap();
    let v = b.download(&s.values).unwrap();
    o.push(format!("{name} indices"), wide(&i));
    o.push(format!("{name} values"), bits(&v));
}

/// The reductions, compactions, top-k and digit histograms of `x`.
fn reductions_and_selection<B: Backend<E>, E: Element>(
    b: &B,
    x: &[E],
    buf: &B::Buffer<E>,
    o: &mut Outputs<E>,
) {
    let n = x.len();
    o.push("max_abs", [b.max_abs(buf).unwrap().to_bits_u64()]);
    o.mean = b.mean_abs(buf).unwrap();
    o.squares = b.sum_squares(buf).unwrap();
    let mut sorted: Vec<E> = x.iter().map(|v| v.abs()).collect();
    sorted.sort_by(|a, b| a.to_f64_exact().total_cmp(&b.to_f64_exact()));
    let quantile = |q: f64| sorted[((n - 1) as f64 * q) as usize];
    for t in [
        E::zero(),
        quantile(0.5),
        quantile(0.99),
        quantile(1.0),
        -E::one(),
    ] {
        o.push(
            format!("count_above({t:?})"),
            [b.count_above(buf, t).unwrap() as u64],
        );
        sel(
            b,
            o,
            format!("compact_above({t:?})"),
            b.compact_above(buf, t).unwrap(),
        );
    }
    for k in [0, 1, n / 100, n / 3, n] {
        sel(b, o, format!("topk_abs k={k}"), b.topk_abs(buf, k).unwrap());
        for end in [Extreme::Largest, Extreme::Smallest] {
            sel(
                b,
                o,
                format!("topk_signed {end:?} k={k}"),
                b.topk_signed(buf, k, end).unwrap(),
            );
        }
    }
    let width = (E::BYTES * 8) as u32;
    for order in [KeyOrder::Abs, KeyOrder::Signed, KeyOrder::SignedReversed] {
        let key = order.key(x[n / 2]);
        for (shift, digit_bits) in digits::<E>() {
            let top = shift + digit_bits;
            let prefix = if top >= width { 0 } else { key >> top };
            let d = Digit {
                shift,
                digit_bits,
                prefix,
            };
            let h = b.digit_histogram(buf, order, d).unwrap();
            o.push(format!("digit_histogram {order:?} {d:?}"), wide(&h));
        }
        for take in [0, 1, 7, usize::MAX] {
            sel(
                b,
                o,
                format!("compact_key {order:?} take={take}"),
                b.compact_key(buf, order, key, take).unwrap(),
            );
        }
    }
    for parts in [1, 3, 64] {
        let offsets: Vec<usize> = (0..=parts).map(|p| p * n / parts).collect();
        let ks: Vec<usize> = offsets.windows(2).map(|w| (w[1] - w[0]) / 10).collect();
        sel(
            b,
            o,
            format!("topk_abs_segmented parts={parts}"),
            b.topk_abs_segmented(buf, &offsets, &ks).unwrap(),
        );
    }
}

/// The dense updates, the bitmap and QSGD codecs and hash partitioning, on
/// sparse inputs drawn from `seed`.
fn updates_and_codecs<B: Backend<E>, E: Element>(
    b: &B,
    x: &[E],
    buf: &B::Buffer<E>,
    seed: u64,
    o: &mut Outputs<E>,
) {
    let n = x.len();
    // Sparse inputs drawn from the seed: unique sorted indices.
    let mut rng = Rng::seed_from_u64(seed);
    let idx: Vec<u32> = (0..n as u32)
        .filter(|_| rng.random_range(0..7) == 0)
        .collect();
    let half = e::<E>(0.5);
    let vals: Vec<E> = idx.iter().map(|&i| x[i as usize] * half).collect();
    let bidx = b.upload(&idx).unwrap();
    let g = b.gather(buf, &bidx).unwrap();
    o.push("gather", bits(&b.download(&g).unwrap()));
    let mut dense = b.upload(x).unwrap();
    b.scatter_add(&mut dense, &bidx, &b.upload(&vals).unwrap())
        .unwrap();
    o.push("scatter_add", bits(&b.download(&dense).unwrap()));
    b.mask(&mut dense, &bidx).unwrap();
    o.push("mask", bits(&b.download(&dense).unwrap()));
    b.scale(e(-0.37), &mut dense).unwrap();
    o.push("scale", bits(&b.download(&dense).unwrap()));
    let mut y: Vec<E> = dense_values(n, ValueDist::Normal { std: 1.0 }, seed ^ 1);
    let mut by = b.upload(&y).unwrap();
    let a = e::<E>(1.7);
    b.axpy(a, buf, &mut by).unwrap();
    let got = b.download(&by).unwrap();
    for (i, yi) in y.iter_mut().enumerate() {
        *yi = (a * x[i]).abs() + yi.abs();
    }
    o.axpy = got.into_iter().zip(y).collect();

    let words = b.bitmap_encode(&bidx, 0, n).unwrap();
    o.push("bitmap_encode", wide(&b.download(&words).unwrap()));
    let back = b.bitmap_decode(&words, 5, n).unwrap();
    o.push("bitmap_decode", wide(&b.download(&back).unwrap()));

    for bits_per in [2, 4, 8] {
        let p = QsgdParams::new(bits_per, 1000, seed).unwrap();
        let (s, w) = b.qsgd_quantize(buf, &p, 77).unwrap();
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
        let mut set: Vec<(u32, u64)> = (parts.offsets[p]..parts.offsets[p + 1])
            .map(|j| (parts.indices[j], parts.values[j].to_bits_u64()))
            .collect();
        set.sort_unstable();
        o.push(
            format!("hash partition {p}"),
            set.into_iter().flat_map(|(i, v)| [i as u64, v]),
        );
    }
}

/// Runs both backends on `n` values of `dist` and compares the outputs.
fn compare<R: Backend<E>, G: Backend<E>, E: Element>(
    reference: &R,
    gpu: &G,
    n: usize,
    dist: ValueDist,
    seed: u64,
) {
    let x: Vec<E> = dense_values(n, dist, seed);
    let want = run(reference, &x, seed);
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
    let eps = E::epsilon().to_f64_exact();
    for (i, (&(c, bound), &(g, _))) in want.axpy.iter().zip(&got.axpy).enumerate() {
        assert!(
            (c.to_f64_exact() - g.to_f64_exact()).abs() <= bound.to_f64_exact() * eps,
            "n={n} axpy[{i}]: {c:?} vs {g:?}"
        );
    }
}

/// Sizes around the cube and tile sizes and a prime, three distributions
/// each.
pub fn small_and_odd_sizes<R: Backend<E>, G: Backend<E>, E: Element>(reference: &R, gpu: &G) {
    for (i, n) in [1usize, 2, 255, 256, 257, 4095, 4097, 10_007]
        .into_iter()
        .enumerate()
    {
        compare(reference, gpu, n, ValueDist::Normal { std: 1.0 }, i as u64);
        compare(
            reference,
            gpu,
            n,
            ValueDist::HeavyTailed { scale: 1.0 },
            100 + i as u64,
        );
        compare(
            reference,
            gpu,
            n,
            ValueDist::Integer { max: 3 },
            200 + i as u64,
        );
    }
}

/// 2^22 heavy-tailed values.
pub fn two_pow_22<R: Backend<E>, G: Backend<E>, E: Element>(reference: &R, gpu: &G) {
    compare(
        reference,
        gpu,
        1 << 22,
        ValueDist::HeavyTailed { scale: 1.0 },
        22,
    );
}

/// Instantiates the differential tests ([`crate::testing::differential`])
/// as `#[test]` functions comparing the backend built by `$make` with the
/// reference built by `$reference` (both expressions, evaluated in each
/// test), once per element type listed after the `;`, each in a module
/// named after its type, as [`crate::backend_test_suite!`] does:
///
/// ```ignore
/// sparse_core::differential_test_suite!(backend_cpu::Cpu, crate::MyBackend::new(); f32);
/// ```
///
/// The macro only wraps; the test logic lives in
/// [`crate::testing::differential`].
#[macro_export]
macro_rules! differential_test_suite {
    ($reference:expr, $make:expr; $($elem:ident),+ $(,)?) => {
        $(
            $crate::differential_test_suite!(@element $reference, $make, $elem;
                small_and_odd_sizes, two_pow_22);
        )+
    };
    (@element $reference:expr, $make:expr, $elem:ident; $($name:ident),* $(,)?) => {
        mod $elem {
            $(
                #[test]
                fn $name() {
                    $crate::testing::differential::$name::<_, _, $crate::testing::elements::$elem>(
                        &$reference,
                        &$make,
                    );
                }
            )*
        }
    };
}
