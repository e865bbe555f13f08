//! Hostile review of issue 43's device segmented top-k (commits
//! 9f22108..c837e5c): `topk_abs_segmented` on the kernels (wgpu, lavapipe
//! where there is no GPU) against backend-cpu's, bit for bit (indices,
//! values, errors), over adversarial segment layouts and values; and the
//! block and bucket selectors over both backends.
#![cfg(feature = "wgpu")]

mod common;

use common::{Rng, bits, same_selection, wgpu};

use backend_cpu::Cpu;
use backend_cuda::WgpuBackend;
use sparse_core::{BufferOps as _, SelectOps as _};
use sparse_select::{BlockTopK, BucketTopK};

/// The kernels' answer and the CPU's: equal, errors included.
fn check(b: &WgpuBackend, x: &[f32], offsets: &[usize], ks: &[usize], what: &str) {
    let buf = b.upload(x).unwrap();
    let got = b.topk_abs_segmented(&buf, offsets, ks);
    let want = Cpu.topk_abs_segmented(&x.to_vec(), offsets, ks);
    match (got, want) {
        (Ok(got), Ok(want)) => {
            let gi = b.download(&got.indices).unwrap();
            if gi != want.indices {
                let at = gi.iter().zip(&want.indices).position(|(a, b)| a != b);
                panic!(
                    "{what}: indices differ (len {} vs {}), first at {at:?}: {:?} vs {:?}",
                    gi.len(),
                    want.indices.len(),
                    at.map(|a| gi[a]),
                    at.map(|a| want.indices[a])
                );
            }
            assert_eq!(
                bits(&b.download(&got.values).unwrap()),
                bits(&want.values),
                "{what}: values"
            );
        }
        (Err(g), Err(w)) => assert_eq!(g, w, "{what}: errors"),
        (g, w) => panic!(
            "{what}: kernels {:?} against the CPU's {:?}",
            g.map(|s| b.len(&s.indices)),
            w.map(|s| s.indices.len())
        ),
    }
}

/// Values of one family at length `n`.
fn values(family: usize, n: usize, rng: &mut Rng) -> Vec<f32> {
    let sub = f32::from_bits(1);
    (0..n)
        .map(|i| match family {
            // Random, signed.
            0 => rng.unit() * 2.0 - 1.0,
            // All equal magnitude, mixed signs.
            1 => {
                if rng.coin() {
                    1.5
                } else {
                    -1.5
                }
            }
            // Differing only in the last bits.
            2 => {
                f32::from_bits(1.0f32.to_bits() + rng.between(0, 4) as u32)
                    * if i % 2 == 0 { 1.0 } else { -1.0 }
            }
            // Signed zeros.
            3 => {
                if rng.coin() {
                    -0.0
                } else {
                    0.0
                }
            }
            // Subnormals and zeros.
            4 => match rng.between(0, 4) {
                0 => f32::from_bits(rng.between(1, 0x007f_ffff) as u32),
                1 => -sub,
                2 => -0.0,
                _ => sub,
            },
            // Infinities among ordinary values and zeros.
            5 => match rng.between(0, 6) {
                0 => f32::INFINITY,
                1 => f32::NEG_INFINITY,
                2 => -0.0,
                3 => f32::MAX,
                _ => rng.unit() - 0.5,
            },
            // Few distinct values (many ties at every digit level).
            _ => (rng.between(0, 3) as f32 - 1.0) * 2f32.powi(rng.between(-3, 3) as i32),
        })
        .collect()
}

/// A k for a segment of `len`: 0, 1, len - 1, len or random.
fn pick_k(len: usize, rng: &mut Rng) -> usize {
    match rng.between(0, 5) {
        0 => 0,
        1 => 1.min(len),
        2 => len.saturating_sub(1),
        3 => len,
        _ => rng.between(0, len as i64 + 1) as usize,
    }
}

/// Segment lengths around the short kernel's bound, and empty ones.
fn pick_len(rng: &mut Rng, long: bool) -> usize {
    let short = [0usize, 0, 1, 2, 3, 31, 1023, 2047];
    let longs = [2048usize, 2049, 4095, 4096, 4097, 6000];
    if long && rng.between(0, 4) == 0 {
        longs[rng.between(0, longs.len() as i64) as usize]
    } else {
        short[rng.between(0, short.len() as i64) as usize]
    }
}

/// The offsets of segments of `lens`, from 0.
fn offsets_of(lens: &[usize]) -> Vec<usize> {
    let mut offsets = vec![0usize];
    for l in lens {
        offsets.push(offsets.last().unwrap() + l);
    }
    offsets
}

/// `segs` segments of random lengths ([`pick_len`], long ones among
/// them), then a random k each ([`pick_k`]): their offsets and ks.
fn random_layout(rng: &mut Rng, segs: usize) -> (Vec<usize>, Vec<usize>) {
    let lens: Vec<usize> = (0..segs).map(|_| pick_len(rng, true)).collect();
    let ks = lens.iter().map(|&l| pick_k(l, rng)).collect();
    (offsets_of(&lens), ks)
}

#[test]
fn adversarial_layouts_and_values_equal_the_cpu() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(43);
    for family in 0..7 {
        for round in 0..3 {
            let segs = if round == 0 { 1200 } else { 40 };
            let (offsets, ks) = random_layout(&mut rng, segs);
            let n = *offsets.last().unwrap();
            let x = values(family, n, &mut rng);
            let what = format!("family {family} round {round} n {n} segs {segs}");
            check(&b, &x, &offsets, &ks, &what);
        }
    }
}

/// Exact lengths 2,048, 2,049 and 4,096 alone and in mixes, every k of
/// interest, each value family.
#[test]
fn boundary_lengths_every_k() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(7);
    for family in 0..7 {
        for len in [2048usize, 2049, 4096] {
            for k in [0, 1, 2, len / 2, len - 1, len] {
                let x = values(family, len, &mut rng);
                check(
                    &b,
                    &x,
                    &[0, len],
                    &[k],
                    &format!("family {family} len {len} k {k}"),
                );
                // Beside an empty segment and a short one.
                let mut y = values(family, 5, &mut rng);
                y.extend_from_slice(&x);
                let offs = [0, 0, 5, 5, 5 + len, 5 + len];
                check(
                    &b,
                    &y,
                    &offs,
                    &[0, 2, 0, k, 0],
                    &format!("mix family {family} len {len} k {k}"),
                );
            }
        }
    }
}

/// NaN anywhere (with infinities before it, in segments that select
/// nothing, in empty-neighbour positions): the first NaN, as the CPU.
#[test]
fn nan_anywhere_names_the_first() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(99);
    let lens = [2049usize, 0, 4096, 1, 2048, 3000];
    let offsets = offsets_of(&lens);
    let n = *offsets.last().unwrap();
    for trial in 0..30 {
        let mut x = values(5, n, &mut rng);
        let ks: Vec<usize> = lens.iter().map(|&l| pick_k(l, &mut rng)).collect();
        let nans = rng.between(1, 4);
        for _ in 0..nans {
            let at = rng.between(0, n as i64) as usize;
            x[at] = if rng.coin() { f32::NAN } else { -f32::NAN };
        }
        check(&b, &x, &offsets, &ks, &format!("trial {trial} ks {ks:?}"));
    }
}

/// Bad calls: k past a segment, k sums that overflow, offsets that do
/// not end at the length, decrease or do not start at 0, ks of the wrong
/// length: the same error as the CPU's.
#[test]
fn bad_calls_fail_as_the_cpu() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(5);
    let x = values(0, 5000, &mut rng);
    let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![0, 2500, 5000], vec![2501, 1]),
        (vec![0, 2500, 5000], vec![usize::MAX, usize::MAX]),
        (vec![0, 2500, 5000], vec![1, usize::MAX]),
        (
            vec![0, 4999, 5000],
            vec![usize::MAX / 2 + 1, usize::MAX / 2 + 1],
        ),
        (vec![0, 2500, 4999], vec![1, 1]),
        (vec![0, 3000, 2500, 5000], vec![1, 1, 1]),
        (vec![1, 2500, 5000], vec![1, 1]),
        (vec![0, 2500, 5000], vec![1]),
        (vec![0, 2500, 5001], vec![1, 1]),
        (vec![], vec![]),
        (vec![0, 5000], vec![5000]),
    ];
    for (offsets, ks) in cases {
        check(&b, &x, &offsets, &ks, &format!("{offsets:?} {ks:?}"));
    }
}

/// The block and bucket selectors on the kernels against the CPU, over
/// the value families and lengths around the bound.
#[test]
fn block_and_bucket_selectors_equal_the_cpu() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(17);
    for family in [0usize, 1, 2, 3, 6] {
        for n in [4096usize, 2049 * 3, 20000] {
            let x = values(family, n, &mut rng);
            for k in [0usize, 1, 7, n / 100, n / 3, n] {
                let what = format!("family {family}, n {n}, k {k}");
                for blocks in [2, 7] {
                    let s = BlockTopK { blocks };
                    let _ = same_selection(&b, &s, &x, k, &format!("block {blocks}, {what}"));
                }
                for (bucket, per_bucket) in [(4096, None), (2049, Some(2049)), (3000, Some(1))] {
                    let s = BucketTopK { bucket, per_bucket };
                    let what = format!("bucket {bucket} {per_bucket:?}, {what}");
                    let _ = same_selection(&b, &s, &x, k, &what);
                }
            }
        }
    }
}

/// Keys equal in their high digits (31..21, or 31..10) and random below,
/// with exact ties straddling the k-th: every digit level of the device
/// select decides, with many segments past 2,048 at once.
#[test]
fn digit_level_ties_over_many_long_segments() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(1234);
    for (level, mask) in [(0u32, (1u32 << 21) - 1), (1, (1 << 10) - 1), (2, 3), (3, 0)] {
        let base = 1.0f32.to_bits() & !((1u32 << 21) - 1);
        let segs = 300;
        let lens: Vec<usize> = (0..segs).map(|i| 2049 + (i * 37) % 3000).collect();
        let offsets = offsets_of(&lens);
        let n = *offsets.last().unwrap();
        let x: Vec<f32> = (0..n)
            .map(|_| {
                let v = f32::from_bits(base | (rng.next() as u32 & mask));
                if rng.coin() { -v } else { v }
            })
            .collect();
        let ks: Vec<usize> = lens.iter().map(|&l| pick_k(l, &mut rng)).collect();
        check(&b, &x, &offsets, &ks, &format!("level {level}, n {n}"));
    }
}

/// One very long segment (2^20 + 3) and long ones beside short ones, each
/// value family, random k.
#[test]
fn very_long_segments() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(77);
    for family in 0..7 {
        let lens = [5usize, (1 << 20) + 3, 0, 70_000, 2048, 2049];
        let offsets = offsets_of(&lens);
        let n = *offsets.last().unwrap();
        let x = values(family, n, &mut rng);
        let ks: Vec<usize> = lens.iter().map(|&l| pick_k(l, &mut rng)).collect();
        check(&b, &x, &offsets, &ks, &format!("family {family} ks {ks:?}"));
    }
}

/// Many random layouts (seeds), each a fresh mix of everything above.
#[test]
fn random_layouts_many_seeds() {
    let b = wgpu();
    for seed in 0..60u64 {
        let mut rng = Rng::seed_from_u64(seed);
        let segs = rng.between(1, 200) as usize;
        let (offsets, ks) = random_layout(&mut rng, segs);
        let n = *offsets.last().unwrap();
        let family = rng.between(0, 7) as usize;
        let x = values(family, n, &mut rng);
        let what = format!("seed {seed} family {family}");
        check(&b, &x, &offsets, &ks, &what);
    }
}

/// More than 65,535 segments (the grid's first dimension): short
/// selecting ones beside a long one (the short kernel's launch), ones
/// taken whole or not at all (the collection's tiles and segments), and
/// all short (the short-only path).
#[test]
fn more_segments_than_one_grid_dimension() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(65_536);
    let many = 70_001usize;
    type Layout = (Vec<usize>, Vec<usize>);
    let layouts: Vec<(&str, Layout)> = vec![
        (
            "short selecting + long",
            (
                (0..many).map(|_| 3).chain([3000]).collect(),
                (0..many).map(|i| 1 + i % 2).chain([10]).collect(),
            ),
        ),
        (
            "whole or none + long",
            (
                (0..many).map(|i| 1 + i % 3).chain([3000]).collect(),
                (0..many)
                    .map(|i| if i % 2 == 0 { 0 } else { 1 + i % 3 })
                    .chain([10])
                    .collect(),
            ),
        ),
        (
            "long first, then short selecting",
            (
                [5000].into_iter().chain((0..many).map(|_| 4)).collect(),
                [4999]
                    .into_iter()
                    .chain((0..many).map(|i| 1 + i % 3))
                    .collect(),
            ),
        ),
        (
            "all short",
            (
                (0..many).map(|_| 5).collect(),
                (0..many).map(|i| i % 6).collect(),
            ),
        ),
    ];
    for (name, (lens, ks)) in layouts {
        let offsets = offsets_of(&lens);
        let n = *offsets.last().unwrap();
        let x = values(0, n, &mut rng);
        check(&b, &x, &offsets, &ks, name);
    }
}

/// Layouts that select nothing or everything: every k 0 (an empty
/// output) or every k the segment's length, over long and short
/// segments, with NaN in a segment that selects nothing; repeated calls
/// on one backend (buffers reused).
#[test]
fn nothing_or_everything_selected() {
    let b = wgpu();
    let mut rng = Rng::seed_from_u64(0);
    let lens = [2049usize, 0, 3, 4096, 2048, 1, 7000];
    let offsets = offsets_of(&lens);
    let n = *offsets.last().unwrap();
    for rep in 0..3 {
        for family in 0..7 {
            let mut x = values(family, n, &mut rng);
            let none = vec![0usize; lens.len()];
            let all = lens.to_vec();
            check(
                &b,
                &x,
                &offsets,
                &none,
                &format!("rep {rep} family {family}: none"),
            );
            check(
                &b,
                &x,
                &offsets,
                &all,
                &format!("rep {rep} family {family}: all"),
            );
            let mixed: Vec<usize> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| if i % 2 == 0 { 0 } else { l })
                .collect();
            check(
                &b,
                &x,
                &offsets,
                &mixed,
                &format!("rep {rep} family {family}: mixed"),
            );
            x[rng.between(0, n as i64) as usize] = f32::NAN;
            check(
                &b,
                &x,
                &offsets,
                &none,
                &format!("rep {rep} family {family}: none, NaN"),
            );
            check(
                &b,
                &x,
                &offsets,
                &all,
                &format!("rep {rep} family {family}: all, NaN"),
            );
        }
    }
    // An empty input: no segments, and empty segments only.
    let e: Vec<f32> = Vec::new();
    check(&b, &e, &[0], &[], "no segments");
    check(&b, &e, &[0, 0, 0], &[0, 0], "empty segments");
}
