//! The backend test suite, written once. Each
//! `pub fn name<B: Backend<E>, E: Element>(b)` checks one primitive on
//! elements of type `E` against a brute-force oracle (or the reference
//! implementation in `sparse-core` where the output is a pinned layout) and
//! panics on a mismatch; each `pub fn name<B: IndexOps>(b)` checks an
//! index-only primitive. [`crate::backend_test_suite!`] wraps each in a
//! `#[test]`, the element checks once per element type the backend
//! implements (a type it does not implement does not compile, so nothing
//! is skipped).

use super::Rng;
use super::generate::{ValueDist, dense_values};
use crate::backend::{Backend, Extreme, IndexOps};
use crate::encoding::{bits_from_indices, indices_from_bits};
use crate::hash::HierarchicalHash;
use crate::qsgd::{self, QsgdParams};
use crate::{Element, Error, Result, abs_key, signed_key};
use rand::{Rng as _, RngCore as _, SeedableRng as _};

/// Unwraps, or panics naming `what` and the error.
fn ok<T>(r: Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// `v` in the element type (nearest value).
fn e<E: Element>(v: f64) -> E {
    E::from_f64_nearest(v)
}

/// Named inputs covering the cases that break selection code: random,
/// heavy-tailed, all equal, many ties, all zero, negative, subnormal,
/// signed zeros and infinities, across sizes that are not multiples of any
/// block size.
pub fn inputs(seed: u64) -> Vec<(String, Vec<f64>)> {
    let mut out = Vec::new();
    let mut rng = Rng::seed_from_u64(seed);
    for n in [1usize, 2, 3, 31, 256, 1000, 4097] {
        out.push((
            format!("normal n={n}"),
            dense_values::<f64>(n, ValueDist::Normal { std: 1.0 }, rng.next_u64()),
        ));
        out.push((
            format!("heavy n={n}"),
            dense_values::<f64>(n, ValueDist::HeavyTailed { scale: 1.0 }, rng.next_u64()),
        ));
        out.push((
            format!("ties n={n}"),
            (0..n)
                .map(|_| rng.random_range(0..5) as f64 - 2.0)
                .collect(),
        ));
    }
    out.push(("all equal".into(), vec![0.5; 777]));
    out.push(("all zero".into(), vec![0.0; 300]));
    out.push((
        "negative".into(),
        (0..500).map(|i| -1.0 - (i % 37) as f64).collect(),
    ));
    // Subnormal in f32 (and flushed or rounded in narrower types).
    out.push((
        "subnormal".into(),
        (0..300).map(|i| (i as f64 - 150.0) * 1e-42).collect(),
    ));
    let mut special = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        2.0,
        -0.0,
        0.0,
    ];
    special.extend((0..50).map(|i| (i % 3) as f64 - 1.0));
    out.push(("signed zeros and infinities".into(), special));
    out
}

/// `x` in the element type (nearest values).
pub fn convert<E: Element>(x: &[f64]) -> Vec<E> {
    x.iter().map(|&v| E::from_f64_nearest(v)).collect()
}

/// Brute-force exact top-k oracle: sort by key descending, then by index
/// ascending; return the chosen indices in increasing order.
pub fn oracle_topk(keys: &[u64], k: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    order.sort_by(|&a, &b| keys[b as usize].cmp(&keys[a as usize]).then(a.cmp(&b)));
    let mut chosen = order[..k].to_vec();
    chosen.sort_unstable();
    chosen
}

fn ks(n: usize) -> Vec<usize> {
    let mut k = vec![0, 1, n / 1000, n / 3, n.saturating_sub(1), n];
    k.sort_unstable();
    k.dedup();
    k
}

fn check_selected<B: Backend<E>, E: Element>(
    b: &B,
    sel: crate::backend::Selected<B, E>,
    x: &[E],
    want: &[u32],
    ctx: &str,
) {
    let idx = b.download(&sel.indices).unwrap();
    let val = b.download(&sel.values).unwrap();
    assert_eq!(idx, want, "{ctx}: indices");
    let expect: Vec<u64> = want.iter().map(|&i| x[i as usize].to_bits_u64()).collect();
    assert_eq!(
        val.iter().map(|v| v.to_bits_u64()).collect::<Vec<_>>(),
        expect,
        "{ctx}: values"
    );
}

/// `max_abs` exact, `mean_abs` and `sum_squares` within `1e-5` relative
/// (`f32` accumulation allowed) against sums in `f64`.
pub fn reductions<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(11) {
        let x: Vec<E> = convert(&raw);
        let buf = ok(b.upload(&x), E::NAME);
        let max = ok(b.max_abs(&buf), E::NAME);
        let want = x.iter().fold(E::zero(), |m, v| m.max(v.abs()));
        assert_eq!(
            max.to_bits_u64(),
            want.to_bits_u64(),
            "{} {name}: max_abs",
            E::NAME
        );
        let mean = b.mean_abs(&buf).unwrap();
        // The fused statistics give the same maximum and a mean within
        // the same tolerance.
        let (fused_max, fused_mean) = b.abs_stats(&buf).unwrap();
        assert_eq!(
            fused_max.to_bits_u64(),
            want.to_bits_u64(),
            "{} {name}: abs_stats max",
            E::NAME
        );
        let exact = x.iter().map(|v| v.to_f64_exact().abs()).sum::<f64>() / x.len() as f64;
        for mean in [mean, fused_mean] {
            if exact.is_finite() {
                assert!(
                    approx::relative_eq!(mean, exact, max_relative = 1e-5),
                    "{} {name}: mean_abs {mean} vs {exact}",
                    E::NAME
                );
            } else {
                assert!(
                    mean.is_infinite(),
                    "{} {name}: mean_abs {mean} vs {exact}",
                    E::NAME
                );
            }
        }
        // Squares in f64 are exact for f32 and narrower; f32
        // accumulation is within 1e-5 where no f32 square under- or
        // overflows.
        let squares = b.sum_squares(&buf).unwrap();
        let exact = x
            .iter()
            .map(|v| v.to_f64_exact() * v.to_f64_exact())
            .sum::<f64>();
        let in_range = x.iter().all(|v| {
            let a = v.to_f64_exact().abs();
            a == 0.0 || (1e-19..=1e18).contains(&a)
        });
        if exact.is_infinite() {
            assert!(
                squares.is_infinite(),
                "{} {name}: sum_squares {squares}",
                E::NAME
            );
        } else if in_range {
            assert!(
                approx::relative_eq!(squares, exact, max_relative = 1e-5),
                "{} {name}: sum_squares {squares} vs {exact}",
                E::NAME
            );
        }
    }
    let empty = b.upload::<E>(&[]).unwrap();
    assert_eq!(b.max_abs(&empty).unwrap(), E::zero());
    assert_eq!(b.mean_abs(&empty).unwrap(), 0.0);
    assert_eq!(b.sum_squares(&empty).unwrap(), 0.0);
}

/// `count_above` equals a brute-force count for thresholds at, between and
/// beyond the data's magnitudes.
pub fn count_above<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(12) {
        let x: Vec<E> = convert(&raw);
        let buf = ok(b.upload(&x), E::NAME);
        let mut ts: Vec<E> = vec![
            E::zero(),
            E::from_f64_nearest(0.5),
            E::from_f64_nearest(1.0),
            E::infinity(),
            E::from_f64_nearest(-1.0),
        ];
        ts.extend(x.iter().step_by(x.len() / 5 + 1).map(|v| v.abs()));
        let mut wants = Vec::new();
        for &t in &ts {
            let want = x.iter().filter(|v| v.abs() > t).count();
            let got = ok(b.count_above(&buf, t), E::NAME);
            assert_eq!(got, want, "{} {name}: count_above({t:?})", E::NAME);
            wants.push(want);
        }
        // All thresholds in one call, and the non-negative ones alone
        // (the fused path of backends that have one).
        assert_eq!(
            b.count_above_each(&buf, &ts).unwrap(),
            wants,
            "{} {name}: count_above_each",
            E::NAME
        );
        let (ts, wants): (Vec<E>, Vec<usize>) = ts
            .iter()
            .zip(&wants)
            .filter(|(t, _)| **t >= E::zero())
            .map(|(&t, &w)| (t, w))
            .unzip();
        assert_eq!(
            b.count_above_each(&buf, &ts).unwrap(),
            wants,
            "{} {name}: count_above_each",
            E::NAME
        );
    }
}

/// `compact_above` returns exactly the brute-force filter, in index order.
pub fn compact_above<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(13) {
        let x: Vec<E> = convert(&raw);
        let buf = ok(b.upload(&x), E::NAME);
        for t in [
            E::zero(),
            E::from_f64_nearest(0.7),
            E::from_f64_nearest(1.5),
            E::from_f64_nearest(-0.5),
            E::infinity(),
        ] {
            let want: Vec<u32> = (0..x.len() as u32)
                .filter(|&i| x[i as usize].abs() > t)
                .collect();
            let sel = ok(b.compact_above(&buf, t), E::NAME);
            check_selected(
                b,
                sel,
                &x,
                &want,
                &format!("{} {name} compact_above({t:?})", E::NAME),
            );
        }
    }
}

/// Exact top-k by magnitude equals the sorting oracle (tie rule included)
/// for k = 0, 1, n/1000, n/3, n-1, n.
pub fn topk_abs<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(14) {
        let x: Vec<E> = convert(&raw);
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        let buf = ok(b.upload(&x), E::NAME);
        for k in ks(x.len()) {
            let sel = ok(b.topk_abs(&buf, k), E::NAME);
            check_selected(
                b,
                sel,
                &x,
                &oracle_topk(&keys, k),
                &format!("{} {name} topk_abs k={k}", E::NAME),
            );
        }
    }
}

/// Signed top-k and low-k equal the sorting oracle on the signed order.
pub fn topk_signed<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(15) {
        let x: Vec<E> = convert(&raw);
        let hi: Vec<u64> = x.iter().map(|&v| signed_key(v)).collect();
        let lo: Vec<u64> = hi.iter().map(|&k| !k).collect();
        let buf = ok(b.upload(&x), E::NAME);
        for k in ks(x.len()) {
            for (end, keys) in [(Extreme::Largest, &hi), (Extreme::Smallest, &lo)] {
                let sel = ok(b.topk_signed(&buf, k, end), E::NAME);
                check_selected(
                    b,
                    sel,
                    &x,
                    &oracle_topk(keys, k),
                    &format!("{} {name} topk_signed {end:?} k={k}", E::NAME),
                );
            }
        }
    }
}

/// Pinned values: the tie rule on a hand-written input.
pub fn topk_pinned_ties<B: Backend<E>, E: Element>(b: &B) {
    let x: Vec<E> = convert(&[1.0, -3.0, 3.0, 2.0, -3.0, 0.0, 3.0]);
    let buf = b.upload(&x).unwrap();
    let idx = |s: crate::backend::Selected<B, E>| b.download(&s.indices).unwrap();
    // |x| = 3 at 1, 2, 4, 6: the three lowest indices win.
    assert_eq!(idx(b.topk_abs(&buf, 3).unwrap()), vec![1, 2, 4]);
    assert_eq!(idx(b.topk_abs(&buf, 5).unwrap()), vec![1, 2, 3, 4, 6]);
    assert_eq!(
        idx(b.topk_signed(&buf, 2, Extreme::Largest).unwrap()),
        vec![2, 6]
    );
    assert_eq!(
        idx(b.topk_signed(&buf, 1, Extreme::Smallest).unwrap()),
        vec![1]
    );
    // -3, -3 and 0 are the three smallest.
    assert_eq!(
        idx(b.topk_signed(&buf, 3, Extreme::Smallest).unwrap()),
        vec![1, 4, 5]
    );
}

/// NaN is an error naming the first NaN; k > n is an error; lengths are
/// checked.
pub fn errors<B: Backend<E>, E: Element>(b: &B) {
    let x = [e(1.0), e(2.0), E::nan(), e(4.0), E::nan()];
    let buf = b.upload(&x).unwrap();
    let nan = Error::NonFinite { index: 2 };
    assert_eq!(b.max_abs(&buf).err(), Some(nan.clone()));
    assert_eq!(b.mean_abs(&buf).err(), Some(nan.clone()));
    assert_eq!(b.sum_squares(&buf).err(), Some(nan.clone()));
    assert_eq!(b.count_above(&buf, E::zero()).err(), Some(nan.clone()));
    assert_eq!(b.abs_stats(&buf).err(), Some(nan.clone()));
    assert_eq!(
        b.count_above_each(&buf, &[E::zero(), e(3.0)]).err(),
        Some(nan.clone())
    );
    assert_eq!(b.compact_above(&buf, E::zero()).err(), Some(nan.clone()));
    assert_eq!(b.topk_abs(&buf, 1).err(), Some(nan.clone()));
    assert_eq!(b.topk_signed(&buf, 1, Extreme::Largest).err(), Some(nan));
    let ok = b.upload(&[E::one(), e(2.0)]).unwrap();
    assert_eq!(
        b.topk_abs(&ok, 3).err(),
        Some(Error::KOutOfRange { k: 3, len: 2 })
    );
    assert_eq!(
        b.topk_signed(&ok, 3, Extreme::Smallest).err(),
        Some(Error::KOutOfRange { k: 3, len: 2 })
    );
    let mut y = b.upload(&[E::one(); 3]).unwrap();
    assert!(matches!(
        b.axpy(E::one(), &ok, &mut y),
        Err(Error::LengthMismatch { .. })
    ));
    let i = b.upload(&[0u32, 1]).unwrap();
    let v = b.upload(&[E::one()]).unwrap();
    assert!(matches!(
        b.scatter_add(&mut y, &i, &v),
        Err(Error::LengthMismatch { .. })
    ));
    let far = b.upload(&[0u32, 3]).unwrap();
    let two = b.upload(&[E::one(); 2]).unwrap();
    // A bad index is an error at the call or, on backends that check on
    // the device without waiting, at the next download; either way once.
    assert!(matches!(
        b.scatter_add(&mut y, &far, &two)
            .and_then(|()| b.download(&y).map(drop)),
        Err(Error::IndexOutOfRange { index: 3, .. })
    ));
    assert!(b.download(&y).is_ok(), "the fault is reported once");
    assert!(matches!(
        b.mask(&mut y, &far).and_then(|()| b.download(&y).map(drop)),
        Err(Error::IndexOutOfRange { index: 3, .. })
    ));
    assert!(b.download(&y).is_ok(), "the fault is reported once");
    assert!(matches!(
        b.bitmap_encode(&far, 0, 3),
        Err(Error::IndexOutOfRange { index: 3, .. })
    ));
}

/// `scatter_add` and `mask` against dense loops.
pub fn scatter_add_and_mask<B: Backend<E>, E: Element>(b: &B) {
    let mut rng = Rng::seed_from_u64(21);
    for n in [1usize, 5, 64, 1000, 10_007] {
        let base: Vec<E> = dense_values(n, ValueDist::Integer { max: 100 }, rng.next_u64());
        let mut idx: Vec<u32> = (0..n as u32)
            .filter(|_| rng.random_range(0..3) == 0)
            .collect();
        if idx.is_empty() {
            idx.push(0);
        }
        let vals: Vec<E> = dense_values(idx.len(), ValueDist::Integer { max: 50 }, rng.next_u64());
        let mut want = base.clone();
        for (&i, &v) in idx.iter().zip(&vals) {
            want[i as usize] = want[i as usize] + v;
        }
        let mut d = b.upload(&base).unwrap();
        let (bi, bv) = (b.upload(&idx).unwrap(), b.upload(&vals).unwrap());
        b.scatter_add(&mut d, &bi, &bv).unwrap();
        assert_eq!(b.download(&d).unwrap(), want, "scatter_add n={n}");
        for &i in &idx {
            want[i as usize] = E::zero();
        }
        b.mask(&mut d, &bi).unwrap();
        assert_eq!(b.download(&d).unwrap(), want, "mask n={n}");
    }
}

/// `axpy` and `scale` against host loops in the element type (exact on
/// integer-valued inputs where the element type holds the results).
pub fn axpy_and_scale<B: Backend<E>, E: Element>(b: &B) {
    let (a, half) = (e::<E>(-3.0), e::<E>(0.5));
    for n in [0usize, 1, 3, 1025] {
        let x: Vec<E> = dense_values(n, ValueDist::Integer { max: 1000 }, 1);
        let y: Vec<E> = dense_values(n, ValueDist::Integer { max: 1000 }, 2);
        let (bx, mut by) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
        b.axpy(a, &bx, &mut by).unwrap();
        let want: Vec<E> = x.iter().zip(&y).map(|(&xi, &c)| a * xi + c).collect();
        assert_eq!(b.download(&by).unwrap(), want, "axpy n={n}");
        b.scale(half, &mut by).unwrap();
        assert_eq!(
            b.download(&by).unwrap(),
            want.iter().map(|&v| half * v).collect::<Vec<_>>(),
            "scale n={n}"
        );
    }
}

/// The value each index carries through hashing (in the element type).
fn hash_value<E: Element>(i: u32) -> E {
    e(f64::from(i) * 0.5 + 1.0)
}

fn check_partitions<B: Backend<E>, E: Element>(
    b: &B,
    idx: &[u32],
    h: &HierarchicalHash,
    ctx: &str,
) -> crate::backend::HashPartitions<E> {
    let vals: Vec<E> = idx.iter().map(|&i| hash_value(i)).collect();
    let (bi, bv) = (b.upload(idx).unwrap(), b.upload(&vals).unwrap());
    let parts = b.hash_partition(&bi, &bv, h).unwrap();
    let p = h.h0.partitions() as usize;
    assert_eq!(parts.offsets.len(), p + 1, "{ctx}: offsets");
    assert_eq!(parts.offsets[0], 0);
    assert_eq!(parts.offsets[p], idx.len(), "{ctx}: every index delivered");
    let mut seen: Vec<u32> = Vec::with_capacity(idx.len());
    for q in 0..p {
        for j in parts.offsets[q]..parts.offsets[q + 1] {
            let i = parts.indices[j];
            assert_eq!(
                h.h0.partition(i),
                q as u32,
                "{ctx}: index {i} in wrong partition"
            );
            assert_eq!(
                parts.values[j].to_bits_u64(),
                hash_value::<E>(i).to_bits_u64(),
                "{ctx}: value of {i}"
            );
            seen.push(i);
        }
    }
    seen.sort_unstable();
    let mut want = idx.to_vec();
    want.sort_unstable();
    assert_eq!(seen, want, "{ctx}: each index exactly once");
    parts
}

/// Hierarchical hashing with default sizes: every index exactly once, in
/// partition `h0(index)`, with its value.
pub fn hash_partition<B: Backend<E>, E: Element>(b: &B) {
    let mut rng = Rng::seed_from_u64(31);
    for (nnz, parts) in [(0usize, 4u32), (1, 1), (1000, 16), (30_000, 7)] {
        let mut idx: Vec<u32> = (0..nnz).map(|_| rng.next_u32() % 4_000_000).collect();
        idx.sort_unstable();
        idx.dedup();
        let h = HierarchicalHash::with_defaults(99, rng.next_u64(), parts, idx.len()).unwrap();
        check_partitions::<B, E>(b, &idx, &h, &format!("nnz={nnz} P={parts}"));
    }
}

/// Tiny `r1` and `r2` force collisions, serial writes and the fallback;
/// still nothing is lost.
pub fn hash_partition_forced_collisions<B: Backend<E>, E: Element>(b: &B) {
    let idx: Vec<u32> = (0..5000u32).map(|i| i * 7 + 3).collect();
    let h = HierarchicalHash::new(5, 6, 4, 3, 8, 2).unwrap();
    let parts = check_partitions::<B, E>(b, &idx, &h, "r1=8 r2=2");
    assert!(
        parts.serial > 0 && parts.fallback > 0,
        "collisions must reach serial ({}) and fallback ({})",
        parts.serial,
        parts.fallback
    );
    assert_eq!(parts.serial, 4 * 2, "serial area is filled exactly");
    let h = HierarchicalHash::new(5, 6, 3, 1, 1, 0).unwrap();
    check_partitions::<B, E>(b, &idx, &h, "r1=1 r2=0");
}

/// Bitmap encode equals the layout oracle; decode inverts it.
pub fn bitmap<B: IndexOps>(b: &B) {
    let mut rng = Rng::seed_from_u64(41);
    for (lo, len) in [
        (0u32, 1usize),
        (0, 31),
        (5, 32),
        (100, 33),
        (7, 10_000),
        (0, 100_003),
    ] {
        let idx: Vec<u32> = (0..len as u32)
            .filter(|_| rng.random_range(0..4) == 0)
            .map(|i| i + lo)
            .collect();
        let words = b.bitmap_encode(&b.upload(&idx).unwrap(), lo, len).unwrap();
        let host = b.download(&words).unwrap();
        assert_eq!(
            host,
            bits_from_indices(&idx, lo, len),
            "bitmap_encode lo={lo} len={len}"
        );
        let back = b.bitmap_decode(&words, lo, len).unwrap();
        assert_eq!(
            b.download(&back).unwrap(),
            idx,
            "bitmap_decode lo={lo} len={len}"
        );
        assert_eq!(indices_from_bits(&host, lo, len), idx);
    }
    let empty = b
        .bitmap_encode(&b.upload::<u32>(&[]).unwrap(), 0, 0)
        .unwrap();
    assert_eq!(b.len(&empty), 0);
}

/// QSGD quantization is bit-identical to the reference layout of
/// [`crate::qsgd`] (same counter-based draws); dequantization matches.
pub fn qsgd<B: Backend<E>, E: Element>(b: &B) {
    for bits in [2, 4, 8] {
        for (n, bucket) in [(1usize, 1024usize), (1000, 1024), (5000, 512), (4097, 100)] {
            let x: Vec<E> = dense_values(n, ValueDist::Normal { std: 2.0 }, n as u64 + bits as u64);
            let p = QsgdParams::new(bits, bucket, 77).unwrap();
            let want = qsgd::quantize(&x, &p, 1000).unwrap();
            let (s, w) = b.qsgd_quantize(&b.upload(&x).unwrap(), &p, 1000).unwrap();
            assert_eq!(
                b.download(&s).unwrap(),
                want.scales,
                "qsgd scales bits={bits} n={n}"
            );
            assert_eq!(
                b.download(&w).unwrap(),
                want.words,
                "qsgd words bits={bits} n={n}"
            );
            let back = b.qsgd_dequantize(&s, &w, n, &p).unwrap();
            assert_eq!(
                b.download(&back).unwrap(),
                qsgd::dequantize(&want, n, &p).unwrap(),
                "qsgd dequantize bits={bits} n={n}"
            );
        }
    }
    // Magnitudes at the top of the range and subnormals: the same codes,
    // and finite decoded values (no `scale * level` overflow). The large
    // values are the same fractions of the type's maximum as `1e38` and
    // `-4.9e37` of `f32::MAX`.
    let tiny = E::from_bits_u64(1);
    let max = E::max_value();
    let of_max = |v: f64| e::<E>(max.to_f64_exact() * (v / f64::from(f32::MAX)));
    let x = [
        max,
        -max,
        of_max(1e38),
        of_max(-4.9e37),
        E::one(),
        tiny,
        -tiny,
        E::min_positive_value() / e(3.0),
        E::zero(),
    ];
    for bits in [2, 4, 8] {
        for bucket in [1, 4, 1024] {
            let p = QsgdParams::new(bits, bucket, 5).unwrap();
            let want = qsgd::quantize(&x, &p, 0).unwrap();
            let (s, w) = b.qsgd_quantize(&b.upload(&x).unwrap(), &p, 0).unwrap();
            assert_eq!(b.download(&w).unwrap(), want.words, "extreme codes {bits}");
            let back = b
                .download(&b.qsgd_dequantize(&s, &w, x.len(), &p).unwrap())
                .unwrap();
            assert_eq!(back, qsgd::dequantize(&want, x.len(), &p).unwrap());
            assert!(back.iter().all(|v| v.is_finite()), "{back:?}");
        }
    }
    let bad = b.upload(&[E::one(), E::infinity()]).unwrap();
    assert_eq!(
        b.qsgd_quantize(&bad, &QsgdParams::new(4, 8, 0).unwrap(), 0)
            .err(),
        Some(Error::NonFinite { index: 1 })
    );
}

/// Top-k and compaction on 2^20 elements (catches multi-pass and
/// multi-block bugs that small inputs miss).
pub fn large_topk<B: Backend<E>, E: Element>(b: &B) {
    let n = 1 << 20;
    let x: Vec<E> = dense_values(n, ValueDist::HeavyTailed { scale: 1.0 }, 51);
    let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
    let buf = b.upload(&x).unwrap();
    for k in [1, n / 1000, n / 10] {
        check_selected(
            b,
            b.topk_abs(&buf, k).unwrap(),
            &x,
            &oracle_topk(&keys, k),
            &format!("large topk k={k}"),
        );
    }
    let t = e::<E>(3.0);
    let want: Vec<u32> = (0..n as u32).filter(|&i| x[i as usize].abs() > t).collect();
    assert_eq!(b.count_above(&buf, t).unwrap(), want.len());
    check_selected(
        b,
        b.compact_above(&buf, t).unwrap(),
        &x,
        &want,
        "large compact",
    );
}

const ORDERS: [crate::KeyOrder; 3] = [
    crate::KeyOrder::Abs,
    crate::KeyOrder::Signed,
    crate::KeyOrder::SignedReversed,
];

/// Digit histograms equal brute-force counts for the top, middle and bottom
/// digits, with matching and non-matching prefixes.
pub fn digit_histogram<B: Backend<E>, E: Element>(b: &B) {
    let width = (E::BYTES * 8) as u32;
    for (name, raw) in inputs(16) {
        let x: Vec<E> = convert(&raw);
        let buf = ok(b.upload(&x), E::NAME);
        for order in ORDERS {
            let keys: Vec<u64> = x.iter().map(|&v| order.key(v)).collect();
            for (shift, bits) in [(width - 8, 8), (width - 11, 11), (width / 2, 4), (0, 5)] {
                let top = shift + bits;
                let prefixes = if top >= width {
                    vec![0]
                } else {
                    vec![keys[0] >> top, (keys[0] >> top) ^ 1]
                };
                for prefix in prefixes {
                    let mut want = vec![0u32; 1 << bits];
                    for &k in &keys {
                        if top >= 64 || k >> top == prefix {
                            want[((k >> shift) & ((1 << bits) - 1)) as usize] += 1;
                        }
                    }
                    let digit = crate::Digit {
                        shift,
                        digit_bits: bits,
                        prefix,
                    };
                    let got = ok(b.digit_histogram(&buf, order, digit), E::NAME);
                    assert_eq!(got, want, "{} {name} {order:?} {digit:?}", E::NAME);
                }
            }
        }
        let bad = crate::Digit {
            shift: width - 4,
            digit_bits: 8,
            prefix: 0,
        };
        assert!(matches!(
            b.digit_histogram(&buf, crate::KeyOrder::Abs, bad),
            Err(Error::InvalidParameter { .. })
        ));
    }
}

/// Compaction by key with a tie quota equals the brute-force filter.
pub fn compact_key<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(17) {
        let x: Vec<E> = convert(&raw);
        let buf = ok(b.upload(&x), E::NAME);
        for order in ORDERS {
            let keys: Vec<u64> = x.iter().map(|&v| order.key(v)).collect();
            for &key in [keys[0], keys[keys.len() / 2], 0, u64::MAX].iter() {
                for take in [0usize, 1, 3, usize::MAX] {
                    let mut left = take;
                    let want: Vec<u32> = (0..x.len() as u32)
                        .filter(|&i| {
                            let k = keys[i as usize];
                            if k == key && left > 0 {
                                left -= 1;
                                true
                            } else {
                                k > key
                            }
                        })
                        .collect();
                    let sel = ok(b.compact_key(&buf, order, key, take), E::NAME);
                    check_selected(
                        b,
                        sel,
                        &x,
                        &want,
                        &format!("{} {name} {order:?} key={key} take={take}", E::NAME),
                    );
                }
            }
        }
    }
}

/// Segmented top-k equals the per-segment sorting oracle; bad segments are
/// errors.
pub fn topk_segmented<B: Backend<E>, E: Element>(b: &B) {
    for (name, raw) in inputs(18) {
        let x: Vec<E> = convert(&raw);
        let n = x.len();
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        let buf = b.upload(&x).unwrap();
        for parts in [1usize, 2, 3, 7] {
            let offsets: Vec<usize> = (0..=parts).map(|p| p * n / parts).collect();
            for frac in [0.0, 0.01, 0.5, 1.0] {
                let ks: Vec<usize> = offsets
                    .windows(2)
                    .map(|w| ((w[1] - w[0]) as f64 * frac).ceil() as usize)
                    .collect();
                let mut want = Vec::new();
                for (j, &k) in ks.iter().enumerate() {
                    let seg = &keys[offsets[j]..offsets[j + 1]];
                    want.extend(
                        oracle_topk(seg, k)
                            .into_iter()
                            .map(|i| i + offsets[j] as u32),
                    );
                }
                let sel = b.topk_abs_segmented(&buf, &offsets, &ks).unwrap();
                check_selected(
                    b,
                    sel,
                    &x,
                    &want,
                    &format!("{name} segments={parts} frac={frac}"),
                );
            }
        }
        assert!(b.topk_abs_segmented(&buf, &[0, n + 1], &[0]).is_err());
        assert!(b.topk_abs_segmented(&buf, &[0, n], &[0, 0]).is_err());
        assert!(matches!(
            b.topk_abs_segmented(&buf, &[0, n], &[n + 1]),
            Err(Error::KOutOfRange { .. })
        ));
    }
}

/// Bucket top-k equals the per-bucket sorting oracle: buckets that divide
/// the input and that do not (a short last bucket), of one element, of
/// the kernels' shared-memory limit (2,048) and beyond it, and longer than
/// the input; `per` of 0, 1, more than a bucket holds; a NaN is
/// `NonFinite`, a bucket of 0 `InvalidParameter`.
pub fn topk_buckets<B: Backend<E>, E: Element>(b: &B) {
    let mut cases = inputs(19);
    let mut rng = Rng::seed_from_u64(20);
    cases.push((
        "ties n=10000".into(),
        (0..10_000)
            .map(|_| rng.random_range(0..7) as f64 - 3.0)
            .collect(),
    ));
    cases.push((
        "normal n=70001".into(),
        dense_values::<f64>(70_001, ValueDist::Normal { std: 1.0 }, 21),
    ));
    for (name, raw) in cases {
        let x: Vec<E> = convert(&raw);
        let n = x.len();
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        let buf = b.upload(&x).unwrap();
        // Buckets of 1 and 3 over the long inputs are tens of thousands
        // of cubes, slow on a software device: the short inputs have them.
        let buckets: &[usize] = if n > 5000 {
            &[512, 2047, 2048, 2049, 5000]
        } else {
            &[1, 3, 512, 2047, 2048, 2049, 5000]
        };
        for &bucket in buckets {
            for per in [0usize, 1, 5, 3000] {
                let mut want = Vec::new();
                let mut start = 0;
                while start < n {
                    let end = (start + bucket).min(n);
                    want.extend(
                        oracle_topk(&keys[start..end], per.min(end - start))
                            .into_iter()
                            .map(|i| i + start as u32),
                    );
                    start = end;
                }
                let sel = b.topk_abs_buckets(&buf, bucket, per).unwrap();
                check_selected(
                    b,
                    sel,
                    &x,
                    &want,
                    &format!("{name} bucket={bucket} per={per}"),
                );
            }
        }
        assert!(matches!(
            b.topk_abs_buckets(&buf, 0, 1),
            Err(Error::InvalidParameter { .. })
        ));
    }
    let mut x: Vec<E> = convert(&dense_values::<f64>(
        5000,
        ValueDist::Normal { std: 1.0 },
        22,
    ));
    x[4321] = E::from_f64_nearest(f64::NAN);
    let buf = b.upload(&x).unwrap();
    for bucket in [512usize, 3000] {
        assert!(matches!(
            b.topk_abs_buckets(&buf, bucket, 2),
            Err(Error::NonFinite { index: 4321 })
        ));
    }
}

/// `finite_each` says of each buffer, in order, what the host sees:
/// empty, finite (subnormal and the largest finite included), a NaN or
/// an infinity of either sign at the first, a middle and the last
/// position, across the kernels' tiles of 4,096, the same buffer twice.
pub fn finite_each<B: Backend<E>, E: Element>(b: &B) {
    let base: Vec<f64> = dense_values(10_000, ValueDist::Normal { std: 1.0 }, 23);
    let mut cases: Vec<Vec<E>> = vec![Vec::new(), convert(&base), convert(&[1e-42, -0.0, 0.0])];
    cases.push(vec![E::max_value(); 5]);
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for at in [0usize, 4095, 4096, 9_999] {
            let mut x = base.clone();
            x[at] = bad;
            cases.push(convert(&x));
        }
    }
    let want: Vec<bool> = cases
        .iter()
        .map(|x| x.iter().all(|v| v.to_f64_exact().is_finite()))
        .collect();
    let bufs: Vec<B::Buffer<E>> = cases.iter().map(|x| b.upload(x).unwrap()).collect();
    let mut refs: Vec<&B::Buffer<E>> = bufs.iter().collect();
    assert_eq!(b.finite_each(&refs).unwrap(), want);
    refs.push(&bufs[5]);
    refs.push(&bufs[1]);
    let mut twice = want.clone();
    twice.extend([want[5], want[1]]);
    assert_eq!(b.finite_each(&refs).unwrap(), twice);
    assert_eq!(b.finite_each(&[]).unwrap(), Vec::<bool>::new());
    // The checks over all of them name what the first failing buffer's
    // own check names.
    let first_bad = want.iter().position(|f| !f).unwrap();
    let one = crate::backend::check_finite_buffer(b, &bufs[first_bad]).unwrap_err();
    let all = crate::backend::check_finite_buffers(b, &refs).unwrap_err();
    assert_eq!(format!("{one:?}"), format!("{all:?}"));
    assert!(crate::backend::check_finite_buffers(b, &refs[..first_bad]).is_ok());
}

/// 300 seeded positions below 1000 (with repeats) for the gather checks.
fn gather_positions() -> Vec<u32> {
    let mut rng = Rng::seed_from_u64(4);
    (0..300).map(|_| rng.random_range(0..1000) as u32).collect()
}

/// Gather returns `x[i]` for each index and rejects indices past the end.
pub fn gather<B: Backend<E>, E: Element>(b: &B) {
    let x: Vec<E> = dense_values(1000, ValueDist::Normal { std: 1.0 }, 3);
    let idx = gather_positions();
    let got = b
        .gather(&b.upload(&x).unwrap(), &b.upload(&idx).unwrap())
        .unwrap();
    assert_eq!(
        b.download(&got).unwrap(),
        idx.iter().map(|&i| x[i as usize]).collect::<Vec<_>>()
    );
    let far = b.upload(&[5u32, 1000, 7, 1001]).unwrap();
    let x = b.upload(&x).unwrap();
    assert!(matches!(
        b.gather(&x, &far).and_then(|g| b.download(&g)),
        Err(Error::IndexOutOfRange {
            index: 1000 | 1001,
            position: 1 | 3,
            dim: 1000
        })
    ));
    assert!(b.download(&x).is_ok(), "the fault is reported once");
}

/// The sample of `gather_sampled` is, as a multiset, `x` at the positions
/// `(u32_at(j) * n) >> 32` of the counter generator (computed here in
/// 64-bit arithmetic, the definition), for lengths that are and are not
/// powers of two, one element, a sample larger than its input and
/// another seed; an empty input gives only an empty sample.
pub fn gather_sampled<B: Backend<E>, E: Element>(b: &B) {
    for (n, m, seed) in [
        (1usize, 5usize, 1u64),
        (1000, 300, 7),
        (1000, 3000, 8),
        ((1 << 20) + 3, 40_961, u64::MAX),
        (1 << 22, 100_000, 0x5eed),
    ] {
        let x: Vec<E> = dense_values(n, ValueDist::Normal { std: 1.0 }, seed);
        let rng = crate::CounterRng::new(seed);
        let mut want: Vec<u64> = (0..m as u32)
            .map(|j| x[((u64::from(rng.u32_at(j)) * n as u64) >> 32) as usize].to_bits_u64())
            .collect();
        let got = b.gather_sampled(&b.upload(&x).unwrap(), seed, m).unwrap();
        let mut got: Vec<u64> = b
            .download(&got)
            .unwrap()
            .iter()
            .map(|v| v.to_bits_u64())
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        assert!(
            got == want,
            "gather_sampled n = {n}, m = {m}, seed {seed}: another multiset"
        );
    }
    let empty = b.upload::<E>(&[]).unwrap();
    assert_eq!(b.len(&b.gather_sampled(&empty, 1, 0).unwrap()), 0);
    assert!(matches!(
        b.gather_sampled(&empty, 1, 1),
        Err(Error::InvalidParameter { .. })
    ));
}

/// Gather of indices returns `src[i]` for each position and rejects
/// positions past the end.
pub fn gather_indices<B: IndexOps>(b: &B) {
    let idx = gather_positions();
    let far = b.upload(&[5u32, 1000, 7, 1001]).unwrap();
    let src: Vec<u32> = (0..1000).map(|i| i * 7 + 3).collect();
    let src = b.upload(&src).unwrap();
    let got = b.gather_indices(&src, &b.upload(&idx).unwrap()).unwrap();
    assert_eq!(
        b.download(&got).unwrap(),
        idx.iter().map(|&i| i * 7 + 3).collect::<Vec<_>>()
    );
    assert!(matches!(
        b.gather_indices(&src, &far).and_then(|g| b.download(&g)),
        Err(Error::IndexOutOfRange {
            index: 1000 | 1001,
            position: 1 | 3,
            dim: 1000
        })
    ));
    assert!(b.download(&src).is_ok(), "the fault is reported once");
}
