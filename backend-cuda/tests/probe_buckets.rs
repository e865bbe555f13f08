//! Hostile review of commit d0217ec's two primitives through the public
//! API: `SelectOps::gather_sampled` (positions drawn in the gather kernel,
//! the 32-bit `mul_hi`) and `SelectOps::topk_abs_buckets` (the buckets'
//! records laid out on the device), on the kernels (wgpu, lavapipe where
//! there is no GPU) and on backend-cpu, each against an independent
//! brute-force oracle; the `SampledThreshold` and `BucketTopK` selectors
//! over both backends; and the counters (`work`, `transfers`).
#![cfg(feature = "wgpu")]

mod common;

use common::{Rng, bits, same_selection, wgpu};

use backend_cpu::Cpu;
use backend_cuda::{Transfers, WgpuBackend};
use sparse_core::{BufferOps as _, CounterRng, Error, SelectOps as _};
use sparse_select::{BucketTopK, SampledThreshold, Selector};

// ---------------------------------------------------------------------
// gather_sampled
// ---------------------------------------------------------------------

/// The definition, in 64-bit arithmetic: the positions
/// `(u32_at(j) * n) >> 32` for `j < m`, sorted (the promise is the
/// multiset).
fn sampled_positions(n: usize, seed: u64, m: usize) -> Vec<u32> {
    let rng = CounterRng::new(seed);
    let mut p: Vec<u32> = (0..m as u32)
        .map(|j| ((u64::from(rng.u32_at(j)) * n as u64) >> 32) as u32)
        .collect();
    p.sort_unstable();
    p
}

/// `x[i]` whose bits are `i`: every element tells its position (finite
/// for `i < 2^31 - 2^23`; the gather copies bits, no arithmetic).
fn positional(n: usize) -> Vec<f32> {
    (0..n as u32).map(f32::from_bits).collect()
}

/// Both backends' samples of the positional input, sorted, against the
/// definition.
fn check_sample(
    b: &WgpuBackend,
    buf: &<WgpuBackend as sparse_core::BufferOps>::Buffer<f32>,
    x: &[f32],
    seed: u64,
    m: usize,
) {
    let n = x.len();
    let want = sampled_positions(n, seed, m);
    let mut got = bits(
        &b.download(&b.gather_sampled(buf, seed, m).unwrap())
            .unwrap(),
    );
    got.sort_unstable();
    let at = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(
        got.len() == want.len() && at.is_none(),
        "kernels: n {n}, m {m}, seed {seed:#x}: lengths {} and {}, first difference at {at:?}: {:?} vs {:?}",
        got.len(),
        want.len(),
        at.map(|a| got[a]),
        at.map(|a| want[a]),
    );
    let mut cpu = bits(&Cpu.gather_sampled(&x.to_vec(), seed, m).unwrap());
    cpu.sort_unstable();
    assert!(cpu == want, "cpu: n {n}, m {m}, seed {seed:#x}");
}

/// Lengths whose high and low 16-bit halves exercise every carry of the
/// kernel's 32-bit `mul_hi` (all-ones low halves, a low half of 1, powers
/// of two and just around them), samples of every size of interest
/// (none, one, a full grid row, more than `n`), seeds 0 and `u64::MAX`.
#[test]
fn gather_sampled_is_the_definitions_multiset() {
    let b = wgpu();
    let ns = [
        1usize,
        2,
        3,
        255,
        256,
        257,
        65_535,
        65_536,
        65_537,
        131_071,
        (1 << 20) + 1,
        3 * (1 << 20) + 12_345,
        (1 << 22) - 1,
    ];
    for n in ns {
        let x = positional(n);
        let buf = b.upload(&x).unwrap();
        // The long inputs with the extreme seeds and fewer sizes: a sample
        // of n drawn and sorted on both backends is the test's cost.
        let (seeds, ms): (&[u64], Vec<usize>) = if n > 1 << 17 {
            (&[0, u64::MAX], vec![1, 257, n + 7])
        } else {
            (
                &[0, 1, 0x5eed, 1 << 63, u64::MAX],
                vec![0, 1, 255, 256, 257, n, n + 7, 1 << 16],
            )
        };
        for &seed in seeds {
            for &m in &ms {
                check_sample(&b, &buf, &x, seed, m);
            }
        }
    }
}

/// More draws than the grid's first dimension holds units (65,535 cubes
/// of 256): the positions of the second grid row are drawn with their own
/// counters, not the first row's again, and none is skipped.
#[test]
fn gather_sampled_past_one_grid_dimension() {
    let b = wgpu();
    let n = 1009usize;
    let x = positional(n);
    let buf = b.upload(&x).unwrap();
    let m = 65_535 * 256 + 1000;
    let got = bits(&b.download(&b.gather_sampled(&buf, 7, m).unwrap()).unwrap());
    assert_eq!(got.len(), m);
    // In j's order on the kernels: compare position by position (the
    // histogram of a multiset this large would hide a swap).
    let rng = CounterRng::new(7);
    let first_bad = (0..m as u32)
        .position(|j| got[j as usize] != ((u64::from(rng.u32_at(j)) * n as u64) >> 32) as u32);
    assert_eq!(first_bad, None, "first wrong draw");
}

/// The checks: an empty input gives an empty sample and refuses any
/// other; a sample past `u32::MAX` is refused; the two backends give the
/// same errors, before allocating anything.
#[test]
fn gather_sampled_bad_calls_fail_as_the_cpu() {
    let b = wgpu();
    let empty: Vec<f32> = Vec::new();
    let e = b.upload(&empty).unwrap();
    assert_eq!(b.len(&b.gather_sampled(&e, 3, 0).unwrap()), 0);
    assert!(Cpu.gather_sampled(&empty, 3, 0).unwrap().is_empty());
    let x = positional(10);
    let buf = b.upload(&x).unwrap();
    for (input, host, m) in [
        (&e, &empty, 1usize),
        (&e, &empty, usize::MAX),
        (&buf, &x, u32::MAX as usize + 1),
        (&buf, &x, usize::MAX),
    ] {
        let got = b.gather_sampled(input, 0, m).map(|s| b.len(&s));
        let want = Cpu.gather_sampled(host, 0, m).map(|s| s.len());
        assert!(
            matches!(got, Err(Error::InvalidParameter { .. })),
            "m {m}: {got:?}"
        );
        assert_eq!(got, want, "m {m}");
    }
}

/// The sample holds `x`'s values bit for bit, whatever they are (NaN,
/// infinities, signed zeros, subnormals): the gather does no arithmetic.
#[test]
fn gather_sampled_copies_any_bits() {
    let b = wgpu();
    let special = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::from_bits(1),
        f32::MAX,
        f32::from_bits(0xffff_ffff),
    ];
    let x: Vec<f32> = (0..5000).map(|i| special[i % special.len()]).collect();
    let buf = b.upload(&x).unwrap();
    for seed in [0u64, u64::MAX] {
        let want: Vec<u32> = {
            let mut w: Vec<u32> = sampled_positions(x.len(), seed, 3000)
                .iter()
                .map(|&p| x[p as usize].to_bits())
                .collect();
            w.sort_unstable();
            w
        };
        let mut got = bits(
            &b.download(&b.gather_sampled(&buf, seed, 3000).unwrap())
                .unwrap(),
        );
        got.sort_unstable();
        assert_eq!(got, want, "kernels, seed {seed}");
        let mut cpu = bits(&Cpu.gather_sampled(&x, seed, 3000).unwrap());
        cpu.sort_unstable();
        assert_eq!(cpu, want, "cpu, seed {seed}");
    }
}

// ---------------------------------------------------------------------
// topk_abs_buckets
// ---------------------------------------------------------------------

/// The definition: each bucket sorted by (|x| descending, index
/// ascending), its first `min(per, len)`, in increasing index order. For
/// inputs without NaN.
fn buckets_oracle(x: &[f32], bucket: usize, per: usize) -> (Vec<u32>, Vec<u32>) {
    let mut idx = Vec::new();
    let mut start = 0usize;
    while start < x.len() {
        let end = start.saturating_add(bucket).min(x.len());
        let mut b: Vec<usize> = (start..end).collect();
        b.sort_by_key(|&i| (std::cmp::Reverse(x[i].to_bits() & 0x7fff_ffff), i));
        b.truncate(per.min(end - start));
        b.sort_unstable();
        idx.extend(b.iter().map(|&i| i as u32));
        start = end;
    }
    let vals = idx.iter().map(|&i| x[i as usize].to_bits()).collect();
    (idx, vals)
}

/// The first NaN of `x`, the error both backends must give.
fn first_nan(x: &[f32]) -> Option<usize> {
    x.iter().position(|v| v.is_nan())
}

/// Both backends' `topk_abs_buckets` against the oracle (or, with a NaN,
/// the error naming the first one).
fn check_buckets(b: &WgpuBackend, x: &[f32], bucket: usize, per: usize, what: &str) {
    let buf = b.upload(x).unwrap();
    let got = b.topk_abs_buckets(&buf, bucket, per).map(|s| {
        (
            b.download(&s.indices).unwrap(),
            bits(&b.download(&s.values).unwrap()),
        )
    });
    let cpu = Cpu
        .topk_abs_buckets(&x.to_vec(), bucket, per)
        .map(|s| (s.indices, bits(&s.values)));
    let want = if bucket == 0 {
        Err(Error::invalid("bucket", "must be at least 1"))
    } else if let Some(index) = first_nan(x) {
        Err(Error::NonFinite { index })
    } else {
        Ok(buckets_oracle(x, bucket, per))
    };
    for (name, got) in [("kernels", got), ("cpu", cpu)] {
        match (&got, &want) {
            (Ok(g), Ok(w)) => {
                let at = g.0.iter().zip(&w.0).position(|(a, b)| a != b);
                assert!(
                    g.0.len() == w.0.len() && at.is_none(),
                    "{name}, {what}: indices (len {} vs {}), first difference at {at:?}: {:?} vs {:?}",
                    g.0.len(),
                    w.0.len(),
                    at.map(|a| g.0[a]),
                    at.map(|a| w.0[a]),
                );
                assert_eq!(g.1, w.1, "{name}, {what}: values");
            }
            (Err(g), Err(w)) => assert_eq!(g, w, "{name}, {what}"),
            _ => panic!(
                "{name}, {what}: {:?} against {:?}",
                got.as_ref().map(|g| g.0.len()),
                want.as_ref().map(|w| w.0.len())
            ),
        }
    }
}

/// Values of one family at length `n`: random signed, one magnitude with
/// mixed signs (all ties), signed zeros, infinities among ordinary values
/// and zeros, few distinct values, the last bits only.
fn values(family: usize, n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|i| match family {
            0 => rng.unit() * 2.0 - 1.0,
            1 => {
                if rng.below(2) == 0 {
                    1.5
                } else {
                    -1.5
                }
            }
            2 => {
                if rng.below(2) == 0 {
                    -0.0
                } else {
                    0.0
                }
            }
            3 => match rng.below(6) {
                0 => f32::INFINITY,
                1 => f32::NEG_INFINITY,
                2 => -0.0,
                3 => f32::MAX,
                _ => rng.unit() - 0.5,
            },
            4 => (rng.below(3) as f32 - 1.0) * 2f32.powi(rng.below(4) as i32 - 2),
            _ => {
                f32::from_bits(1.0f32.to_bits() + rng.below(4) as u32)
                    * if i % 2 == 0 { 1.0 } else { -1.0 }
            }
        })
        .collect()
}

/// Bucket sizes around the device path's bound (2,048: past it the
/// buckets go as general segments), tiny ones, and ones past `n`;
/// lengths just below, at and above their multiples (a last bucket of
/// one element among them); `per` of 0, 1, around the bucket, huge.
#[test]
fn buckets_equal_the_oracle_around_every_bound() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(43);
    for bucket in [1usize, 2, 3, 255, 512, 2047, 2048, 2049, 4096] {
        let mut ns = vec![
            0usize,
            1,
            2,
            bucket,
            bucket + 1,
            3 * bucket - 1,
            3 * bucket,
            3 * bucket + 1,
        ];
        ns.dedup();
        for n in ns {
            for per in [0usize, 1, 2, bucket - 1, bucket, bucket + 1, usize::MAX] {
                let family = rng.below(6) as usize;
                let x = values(family, n, &mut rng);
                check_buckets(
                    &b,
                    &x,
                    bucket,
                    per,
                    &format!("bucket {bucket}, n {n}, per {per}, family {family}"),
                );
            }
        }
    }
}

/// Every value family at the device path's largest bucket and the
/// smallest general one, with every `per` of interest.
#[test]
fn buckets_every_family_at_2048_and_2049() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(2048);
    for family in 0..6 {
        for bucket in [2048usize, 2049] {
            let n = 5 * bucket + 17;
            let x = values(family, n, &mut rng);
            for per in [0usize, 1, 7, bucket / 2, bucket - 1, bucket, usize::MAX] {
                check_buckets(
                    &b,
                    &x,
                    bucket,
                    per,
                    &format!("family {family}, bucket {bucket}, per {per}"),
                );
            }
        }
    }
}

/// A bucket past `n` (one bucket: the whole input), `usize::MAX` and
/// `bucket = 0`.
#[test]
fn buckets_past_the_input_and_zero() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(1);
    for n in [0usize, 1, 100, 3000] {
        let x = values(0, n, &mut rng);
        for bucket in [0usize, n + 1, 2 * n + 5, 1 << 40, usize::MAX] {
            for per in [0usize, 1, 10, usize::MAX] {
                check_buckets(
                    &b,
                    &x,
                    bucket,
                    per,
                    &format!("n {n}, bucket {bucket}, per {per}"),
                );
            }
        }
    }
}

/// At least 2^17 buckets (the short kernel's grid in two dimensions, the
/// records kernel over many cubes), the last one short.
#[test]
fn buckets_many() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(17);
    // One case: lavapipe runs each cube's 256 units in turn, so 2^17
    // buckets cost about 9 s a call there.
    for (bucket, n) in [(2usize, (1 << 18) + 1)] {
        let x = values(0, n, &mut rng);
        for per in [1usize, bucket] {
            check_buckets(
                &b,
                &x,
                bucket,
                per,
                &format!("bucket {bucket}, n {n}, per {per}"),
            );
        }
    }
}

/// NaN in the last bucket (a last bucket of one element included), in
/// the first, in a bucket that selects nothing, after infinities: the
/// error names the first NaN on both backends.
#[test]
fn buckets_nan_anywhere_names_the_first() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(99);
    for bucket in [512usize, 2048, 2049] {
        let n = 4 * bucket + 1;
        for per in [0usize, 1, bucket] {
            let mut x = values(3, n, &mut rng);
            x[n - 1] = f32::NAN;
            check_buckets(
                &b,
                &x,
                bucket,
                per,
                &format!("last element, bucket {bucket}, per {per}"),
            );
            x[n - 2] = -f32::NAN;
            check_buckets(
                &b,
                &x,
                bucket,
                per,
                &format!("last two, bucket {bucket}, per {per}"),
            );
            x[0] = f32::NAN;
            check_buckets(
                &b,
                &x,
                bucket,
                per,
                &format!("first too, bucket {bucket}, per {per}"),
            );
            for _ in 0..3 {
                let mut y = values(3, n, &mut rng);
                let at = rng.below(n as u64) as usize;
                y[at] = f32::from_bits(0x7f80_0001);
                check_buckets(
                    &b,
                    &y,
                    bucket,
                    per,
                    &format!("at {at}, bucket {bucket}, per {per}"),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------
// The selectors over both backends
// ---------------------------------------------------------------------

/// `BucketTopK` with `per_bucket` `None` and `Some` (0, 1, the bucket,
/// huge) equal on both backends and to the oracle over the per it
/// derives; infinities are `NonFinite` naming the first non-finite index
/// (an infinity before a NaN, a NaN before an infinity).
#[test]
fn bucket_selector_equal_on_both_backends() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(5);
    for n in [1usize, 2047, 2049, 10_000] {
        for family in [0usize, 2, 5] {
            let x = values(family, n, &mut rng);
            for bucket in [1usize, 512, 2048, 2049, n, n + 1] {
                for per_bucket in [None, Some(0), Some(1), Some(bucket), Some(usize::MAX)] {
                    // `per_bucket` given, k only bounds the call.
                    let ks = if per_bucket.is_none() {
                        vec![0usize, 1, n / 3, n]
                    } else {
                        vec![n / 3]
                    };
                    for k in ks {
                        let s = BucketTopK { bucket, per_bucket };
                        let what = format!("n {n}, family {family}, {s:?}, k {k}");
                        let count = same_selection(&b, &s, &x, k, &what).unwrap();
                        let per = per_bucket.unwrap_or((k * bucket).div_ceil(n));
                        assert_eq!(count, buckets_oracle(&x, bucket, per).0.len(), "{what}");
                    }
                }
            }
        }
    }
    for bucket in [512usize, 2048, 2049] {
        let n = 3 * bucket + 1;
        let mut x = values(0, n, &mut rng);
        x[n - 1] = f32::INFINITY;
        let s = BucketTopK {
            bucket,
            per_bucket: None,
        };
        let e = same_selection(&b, &s, &x, 10, &format!("inf last, bucket {bucket}"));
        assert_eq!(e, Err(Error::NonFinite { index: n - 1 }));
        x[bucket + 3] = f32::NAN;
        x[bucket] = f32::NEG_INFINITY;
        let e = same_selection(&b, &s, &x, 10, &format!("-inf, NaN, inf, bucket {bucket}"));
        assert_eq!(e, Err(Error::NonFinite { index: bucket }));
        x[bucket - 1] = -f32::NAN;
        let e = same_selection(&b, &s, &x, 10, &format!("NaN first, bucket {bucket}"));
        assert_eq!(e, Err(Error::NonFinite { index: bucket - 1 }));
    }
}

/// A bucket so large that `k * bucket` overflows (`per_bucket = None`
/// derives `ceil(k * bucket / n)`): one bucket, the top k... of it: at
/// least k selected, no panic, the same on both backends.
#[test]
fn bucket_selector_huge_bucket_derives_per_without_overflow() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(11);
    let n = 1000usize;
    let x = values(0, n, &mut rng);
    for bucket in [usize::MAX, usize::MAX / 2, 1 << 60] {
        for k in [1usize, 2, 999, 1000] {
            let s = BucketTopK {
                bucket,
                per_bucket: None,
            };
            let what = format!("bucket {bucket}, k {k}");
            let count = same_selection(&b, &s, &x, k, &what).unwrap();
            // One bucket (the whole input) giving ceil(k * bucket / n),
            // at least k and at most n.
            let per = (k as u128 * bucket as u128).div_ceil(n as u128);
            assert_eq!(count as u128, per.min(n as u128), "{what}");
        }
    }
}

/// `SampledThreshold` on both backends: the same selection at seeds 0
/// and `u64::MAX` (the seed wraps on the next call), over repeated calls,
/// small and large inputs, samples of the whole input and of 1%.
#[test]
fn sampled_threshold_equal_on_both_backends() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(3);
    for n in [1usize, 100, 5000, 3 * (1 << 20) + 12_345] {
        // The large input: one family, the default sample (its 1%).
        let big = n > 1 << 20;
        let families: &[usize] = if big { &[0] } else { &[0, 1, 2, 4] };
        for &family in families {
            let x = values(family, n, &mut rng);
            for seed in [0u64, u64::MAX] {
                let mins: &[usize] = if big { &[1024] } else { &[1, 64, 1024] };
                for &min_sample in mins {
                    let mut s = SampledThreshold {
                        seed,
                        min_sample,
                        ..SampledThreshold::default()
                    };
                    let mut c = s;
                    for k in [1usize, n / 100, n / 2, n] {
                        if k == 0 {
                            continue;
                        }
                        let what =
                            format!("n {n}, family {family}, seed {seed}, min {min_sample}, k {k}");
                        let buf = b.upload(&x).unwrap();
                        let got =
                            Selector::<WgpuBackend, f32>::select(&mut s, &b, &buf, k).unwrap();
                        let want = Selector::<Cpu, f32>::select(&mut c, &Cpu, &x, k).unwrap();
                        assert_eq!(b.download(&got.indices).unwrap(), want.indices, "{what}");
                        assert_eq!(got.count, want.count, "{what}");
                        assert_eq!(got.threshold, want.threshold, "{what}");
                        assert_eq!((s.seed, s.reselections), (c.seed, c.reselections), "{what}");
                        assert!(want.count >= k, "{what}: {} < k", want.count);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------
// The counters
// ---------------------------------------------------------------------

/// Bucket top-k with buckets of at most 2,048: nothing written to the
/// device (no upload, no control write), three launches (the records,
/// the NaN count's clear, the select), one pass, one round trip (the NaN
/// count); `gather_sampled`:
/// one launch, nothing written, nothing read back.
#[test]
fn bucket_topk_and_gather_sampled_write_nothing() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(8);
    for n in [1usize, 2048, 2049, (1 << 17) + 1] {
        let x = values(0, n, &mut rng);
        let buf = b.upload(&x).unwrap();
        for bucket in [1usize, 512, 2048] {
            for per in [0usize, 1, usize::MAX] {
                let t0 = b.transfers();
                let (s, w) = b.work_of(|| b.topk_abs_buckets(&buf, bucket, per).unwrap());
                let t = b.transfers().since(&t0);
                let what = format!("n {n}, bucket {bucket}, per {per}");
                assert_eq!(
                    (t.uploads, t.uploaded, t.control_writes, t.control_written),
                    (0, 0, 0, 0),
                    "{what}: {t:?}"
                );
                assert_eq!((t.downloads, t.control_reads), (0, 1), "{what}: {t:?}");
                assert_eq!(
                    (w.launches, w.passes, w.round_trips),
                    (3, 1, 1),
                    "{what}: {w:?}"
                );
                assert_eq!(
                    b.len(&s.indices),
                    buckets_oracle(&x, bucket, per).0.len(),
                    "{what}"
                );
            }
        }
        for m in [1usize, n, 3 * n] {
            let t0 = b.transfers();
            let (_, w) = b.work_of(|| b.gather_sampled(&buf, 9, m).unwrap());
            assert_eq!(
                b.transfers().since(&t0),
                Transfers::default(),
                "n {n}, m {m}"
            );
            assert_eq!((w.launches, w.round_trips), (1, 0), "n {n}, m {m}: {w:?}");
        }
    }
    // Nothing to select from: nothing launched or moved.
    let e = b.upload::<f32>(&[]).unwrap();
    let t0 = b.transfers();
    let (s, w) = b.work_of(|| b.topk_abs_buckets(&e, 512, 3).unwrap());
    assert_eq!(b.len(&s.indices), 0);
    assert_eq!(b.transfers().since(&t0), Transfers::default());
    assert_eq!(w.launches, 0, "{w:?}");
}
