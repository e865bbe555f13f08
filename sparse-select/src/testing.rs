//! The selector test suite, behind the `testing` feature: every selector
//! against a brute-force oracle (a full sort), on inputs that break
//! selection code (random, heavy-tailed, all equal, many ties, all zero,
//! negative, subnormal, signed zeros; n from 1 to 2^22). Each check is a
//! `pub fn name<B: Backend<E>, E: Element>(b: &B)`, so every backend runs it
//! unchanged, once for each element type it implements, through
//! [`crate::selector_test_suite!`]. Inputs are drawn in `f64` and rounded
//! to `E` (sizes in bytes, where a check depends on them, kept those of
//! `f32`).

use crate::{
    BlockTopK, BucketTopK, Policy, PolicyChoice, RadixTopK, SampledThreshold, Selection, Selector,
    ThresholdBinarySearch, ThresholdReuse, TrimmedTopK, ZenPartitioner,
};
use rand::{Rng as _, SeedableRng as _};
use sparse_core::testing::Rng;
pub use sparse_core::testing::elements;
use sparse_core::testing::generate::{ValueDist, dense_values};
use sparse_core::testing::suite::{convert, inputs, oracle_topk};
use sparse_core::{Backend, Element, Error, KeyOrder, abs_key};

/// A selection downloaded to the host.
struct Sel<E> {
    indices: Vec<u32>,
    values: Vec<E>,
    count: usize,
    threshold: Option<f64>,
}

/// `v` in the element type (nearest value).
fn e<E: Element>(v: f64) -> E {
    E::from_f64_nearest(v)
}

fn host<B: Backend<E>, E: Element>(b: &B, s: Selection<B, E>) -> Sel<E> {
    Sel {
        indices: b.download(&s.indices).expect("download"),
        values: b.download(&s.values).expect("download"),
        count: s.count,
        threshold: s.threshold,
    }
}

/// Test inputs: the shared suite's cases (without infinities, which
/// selectors reject) plus large random ones.
fn cases<E: Element>() -> Vec<(String, Vec<E>)> {
    let mut out: Vec<(String, Vec<E>)> = inputs(7)
        .into_iter()
        .map(|(name, x)| (name, convert::<E>(&x)))
        .filter(|(_, x)| x.iter().all(|v| v.is_finite()))
        .collect();
    out.push((
        "signed zeros".into(),
        convert(&[0.0, -0.0, 1.0, -1.0, -0.0, 0.0, 2.0, -2.0]),
    ));
    for (n, seed) in [(1usize << 16, 1u64), (1 << 20, 2)] {
        out.push((
            format!("normal n={n}"),
            dense_values(n, ValueDist::Normal { std: 1.0 }, seed),
        ));
        out.push((
            format!("heavy n={n}"),
            dense_values(n, ValueDist::HeavyTailed { scale: 1.0 }, seed + 10),
        ));
    }
    out
}

fn ks(n: usize) -> Vec<usize> {
    let mut k = vec![0, 1, n / 1000, n.saturating_sub(1), n];
    k.sort_unstable();
    k.dedup();
    k
}

fn indices<E>(s: &Sel<E>) -> Vec<u32> {
    assert_eq!(s.indices.len(), s.count);
    assert_eq!(s.values.len(), s.count);
    s.indices.clone()
}

fn check_values<E: Element>(x: &[E], s: &Sel<E>) {
    for (&i, &v) in s.indices.iter().zip(&s.values) {
        assert_eq!(v.to_bits_u64(), x[i as usize].to_bits_u64());
    }
    assert!(
        s.indices.windows(2).all(|w| w[0] < w[1]),
        "indices increasing"
    );
}

/// One check of the suite (see the module doc).
pub fn radix_topk_is_exact_in_every_order<B: Backend<E>, E: Element>(b: &B) {
    for (name, x) in cases::<E>() {
        let buf = b.upload(&x).unwrap();
        for order in [KeyOrder::Abs, KeyOrder::Signed, KeyOrder::SignedReversed] {
            let keys: Vec<u64> = x.iter().map(|&v| order.key(v)).collect();
            for k in ks(x.len()) {
                let s = RadixTopK { order }
                    .select(b, &buf, k)
                    .map(|s| host(b, s))
                    .unwrap();
                assert_eq!(indices(&s), oracle_topk(&keys, k), "{name} {order:?} k={k}");
                check_values(&x, &s);
            }
        }
    }
}

/// Inputs that mislead the sample the trimmed top-k predicts its rung
/// from: large values only inside the sampled blocks (the prediction is
/// too high, and the ladder goes on below it), or only outside them (too
/// low, and the survivors are narrowed to the paper's rung), with the `k`
/// that does it.
fn misleading_samples<E: Element>() -> Vec<(String, Vec<E>, usize)> {
    let n = 1usize << 20;
    let blocks = sparse_core::topk::narrowing_sample(n).expect("a sample at 2^20");
    let mut sampled = vec![false; n];
    for i in blocks.into_iter().flatten() {
        sampled[i] = true;
    }
    let base = dense_values(n, ValueDist::Normal { std: 1.0 }, 21);
    let mut out = Vec::new();
    for (name, inside, count, k) in [("high", true, 500, 1000), ("low", false, 2000, 1000)] {
        let mut x = base.clone();
        let spots = (0..n)
            .filter(|&i| sampled[i] == inside)
            .step_by(7)
            .take(count);
        for (j, i) in spots.enumerate() {
            x[i] = e(if j % 2 == 0 { 100.0 } else { -100.0 - j as f64 });
        }
        out.push((format!("prediction too {name}"), x, k));
    }
    out
}

/// One check of the suite (see the module doc).
pub fn trimmed_topk_is_exact<B: Backend<E>, E: Element>(b: &B) {
    for (name, x, k) in misleading_samples::<E>() {
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        let s = TrimmedTopK::default()
            .select(b, &b.upload(&x).unwrap(), k)
            .map(|s| host(b, s))
            .unwrap();
        assert_eq!(indices(&s), oracle_topk(&keys, k), "{name} k={k}");
        check_values(&x, &s);
    }
    for epsilon in [0.0, -0.1, 1.5, f64::NAN] {
        assert!(
            matches!(
                TrimmedTopK::new(epsilon),
                Err(Error::InvalidParameter { .. })
            ),
            "epsilon {epsilon}"
        );
    }
    let fine = TrimmedTopK::new(0.05).unwrap();
    assert_eq!(fine.epsilon(), 0.05);
    for (name, x) in cases::<E>() {
        let buf = b.upload(&x).unwrap();
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        for k in ks(x.len()) {
            // RedSync's step, and a fine one whose ladder (20 rungs) takes
            // more than one counting call.
            for mut t in [TrimmedTopK::default(), fine] {
                let s = t.select(b, &buf, k).map(|s| host(b, s)).unwrap();
                assert_eq!(
                    indices(&s),
                    oracle_topk(&keys, k),
                    "{name} k={k} epsilon={}",
                    t.epsilon()
                );
                check_values(&x, &s);
            }
        }
    }
}

/// The threshold contract: at least k selected; every selected magnitude
/// beats every unselected one; at most 2k, unless ties at the k-th
/// magnitude force more, and then exactly the elements at least as large as
/// the k-th (the fewest above any threshold that holds k).
fn check_threshold_contract<E: Element>(name: &str, x: &[E], k: usize, s: &Sel<E>) {
    check_values(x, s);
    let idx = indices(s);
    let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
    if k == 0 {
        assert!(idx.is_empty(), "{name}: k = 0");
        return;
    }
    assert!(idx.len() >= k, "{name} k={k}: {} < k", idx.len());
    let mut chosen = vec![false; x.len()];
    for &i in &idx {
        chosen[i as usize] = true;
    }
    let min_sel = idx.iter().map(|&i| keys[i as usize]).min().unwrap();
    let max_unsel = (0..x.len()).filter(|&i| !chosen[i]).map(|i| keys[i]).max();
    if let Some(m) = max_unsel {
        assert!(
            min_sel > m,
            "{name} k={k}: a selected magnitude does not beat an unselected one"
        );
    }
    if idx.len() > 2 * k {
        let mut sorted = keys.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let kth = sorted[k - 1];
        let fewest = keys.iter().filter(|&&key| key >= kth).count();
        assert_eq!(
            idx.len(),
            fewest,
            "{name} k={k}: more than 2k and not the fewest"
        );
    }
    if let Some(t) = s.threshold {
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(
                chosen[i],
                v.abs().to_f64_exact() > t,
                "{name} k={k}: threshold {t} vs |x[{i}]| = {:?}",
                v.abs()
            );
        }
    }
}

/// One check of the suite (see the module doc).
pub fn threshold_binary_search_contract<B: Backend<E>, E: Element>(b: &B) {
    for (name, x) in cases::<E>() {
        let buf = b.upload(&x).unwrap();
        for k in ks(x.len()) {
            let s = host(
                b,
                ThresholdBinarySearch::default().select(b, &buf, k).unwrap(),
            );
            check_threshold_contract(&name, &x, k, &s);
        }
    }
}

/// One check of the suite (see the module doc).
pub fn sampled_threshold_is_exact_or_keeps_the_contract<B: Backend<E>, E: Element>(b: &B) {
    for (name, x) in cases::<E>() {
        let buf = b.upload(&x).unwrap();
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        let mut sel = SampledThreshold::default();
        for k in ks(x.len()) {
            let s = sel.select(b, &buf, k).map(|s| host(b, s)).unwrap();
            if s.threshold.is_none() && k > 0 {
                assert_eq!(
                    indices(&s),
                    oracle_topk(&keys, k),
                    "{name} k={k}: re-selection must be exact"
                );
            } else {
                check_threshold_contract(&name, &x, k, &s);
            }
        }
    }
}

/// One check of the suite (see the module doc).
pub fn reuse_searches_once_per_interval_and_keeps_the_contract<B: Backend<E>, E: Element>(b: &B) {
    let n = 1 << 16;
    let k = n / 100;
    let mut reuse = ThresholdReuse::<E>::new(5);
    for step in 0..12u64 {
        // A slowly drifting gradient: same distribution, new draws.
        let x: Vec<E> = dense_values(n, ValueDist::Normal { std: 1.0 }, 100 + step);
        let s = host(b, reuse.select(b, &b.upload(&x).unwrap(), k).unwrap());
        check_threshold_contract(&format!("step {step}"), &x, k, &s);
    }
    // Same distribution every step: the threshold stays valid, so one search
    // serves every interval of 5 calls.
    assert_eq!(
        reuse.searches, 3,
        "searches: {}, reuses: {}",
        reuse.searches, reuse.reuses
    );
    assert_eq!(reuse.reuses, 9);
    // A changed scale invalidates the threshold: a new search.
    let x: Vec<E> = dense_values(n, ValueDist::Normal { std: 100.0 }, 999);
    let s = host(b, reuse.select(b, &b.upload(&x).unwrap(), k).unwrap());
    check_threshold_contract("rescaled", &x, k, &s);
    assert_eq!(reuse.searches, 4);
}

/// One check of the suite (see the module doc).
pub fn block_and_bucket_equal_their_per_block_oracles<B: Backend<E>, E: Element>(b: &B) {
    for (name, x) in cases::<E>() {
        let n = x.len();
        let buf = b.upload(&x).unwrap();
        let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
        for k in ks(n) {
            for p in [1usize, 3, 4, 7] {
                let plan = BlockTopK { blocks: p }.plan(n, k).unwrap();
                assert_eq!(
                    plan.1.iter().sum::<usize>(),
                    k.min(n),
                    "{name}: block shares sum to k"
                );
                let s = BlockTopK { blocks: p }
                    .select(b, &buf, k)
                    .map(|s| host(b, s))
                    .unwrap();
                assert_eq!(
                    indices(&s),
                    per_block_oracle(&keys, &plan.0, &plan.1),
                    "{name} P={p} k={k}"
                );
            }
            let bucket = BucketTopK::default();
            let plan = bucket.plan(n, k).unwrap();
            let s = BucketTopK::default()
                .select(b, &buf, k)
                .map(|s| host(b, s))
                .unwrap();
            assert_eq!(
                indices(&s),
                per_block_oracle(&keys, &plan.0, &plan.1),
                "{name} buckets k={k}"
            );
            assert!(s.count >= k, "{name}: bucket top-k selects at least k");
            assert!(plan.0.windows(2).all(|w| w[1] - w[0] <= 512));
        }
    }
}

fn per_block_oracle(keys: &[u64], offsets: &[usize], ks: &[usize]) -> Vec<u32> {
    let mut out = Vec::new();
    for (j, &k) in ks.iter().enumerate() {
        out.extend(
            oracle_topk(&keys[offsets[j]..offsets[j + 1]], k)
                .into_iter()
                .map(|i| i + offsets[j] as u32),
        );
    }
    out
}

/// One check of the suite (see the module doc).
pub fn bad_input_is_an_error_for_every_selector<B: Backend<E>, E: Element>(b: &B) {
    let selectors = || -> Vec<Box<dyn Selector<B, E>>> {
        vec![
            Box::new(RadixTopK::magnitude()),
            Box::new(RadixTopK {
                order: KeyOrder::Signed,
            }),
            Box::new(TrimmedTopK::default()),
            Box::new(ThresholdBinarySearch::default()),
            Box::new(ThresholdReuse::<E>::default()),
            Box::new(SampledThreshold::default()),
            Box::new(BlockTopK { blocks: 2 }),
            Box::new(BucketTopK::default()),
            Box::new(Policy::<E>::new(false)),
        ]
    };
    for mut s in selectors() {
        let name = s.name();
        let nan = b.upload(&[E::one(), e(2.0), E::nan(), e(3.0)]).unwrap();
        assert_eq!(
            s.select(b, &nan, 1).err(),
            Some(Error::NonFinite { index: 2 }),
            "{name}: NaN"
        );
        let inf = b
            .upload(&[E::one(), e(2.0), e(3.0), E::neg_infinity(), E::infinity()])
            .unwrap();
        assert_eq!(
            s.select(b, &inf, 2).err(),
            Some(Error::NonFinite { index: 3 }),
            "{name}: infinity"
        );
        assert_eq!(
            s.select(b, &inf, 0).err(),
            Some(Error::NonFinite { index: 3 }),
            "{name}: infinity, k = 0"
        );
        let ok = b.upload(&[E::one(), e(2.0)]).unwrap();
        assert_eq!(
            s.select(b, &ok, 3).err(),
            Some(Error::KOutOfRange { k: 3, len: 2 }),
            "{name}: k > n"
        );
        // After a call that succeeded (a threshold kept for reuse), NaN and
        // infinity are still errors.
        let x: Vec<E> = (0..100).map(|i| e(f64::from(i))).collect();
        for (at, bad) in [(99, E::infinity()), (50, E::nan()), (0, E::neg_infinity())] {
            s.select(b, &b.upload(&x).unwrap(), 10).unwrap();
            let mut y = x.clone();
            y[at] = bad;
            assert_eq!(
                s.select(b, &b.upload(&y).unwrap(), 10).err(),
                Some(Error::NonFinite { index: at }),
                "{name}: {bad:?} at {at} after a good call"
            );
        }
    }
    // Parameters that would loop forever or sample nothing.
    let ok = b.upload(&[E::one(), e(2.0), e(3.0)]).unwrap();
    let bad: Vec<Box<dyn Selector<B, E>>> = vec![
        Box::new(ThresholdBinarySearch { epsilon: 0.0 }),
        Box::new(ThresholdBinarySearch { epsilon: f64::NAN }),
        Box::new(SampledThreshold {
            rate: 0.0,
            ..SampledThreshold::default()
        }),
        Box::new(SampledThreshold {
            min_sample: 0,
            ..SampledThreshold::default()
        }),
        Box::new(BlockTopK { blocks: 0 }),
        Box::new(BucketTopK {
            bucket: 0,
            per_bucket: None,
        }),
    ];
    for mut s in bad {
        assert!(
            matches!(s.select(b, &ok, 1), Err(Error::InvalidParameter { .. })),
            "{}",
            s.name()
        );
    }
    // Infinity next to the type's largest finite values (the radix check
    // has a slow path there for f64).
    let inf = b.upload(&[E::one(), E::infinity()]).unwrap();
    assert_eq!(
        RadixTopK::magnitude().select(b, &inf, 1).err(),
        Some(Error::NonFinite { index: 1 })
    );
    let big = b
        .upload(&[E::one(), E::max_value(), -E::max_value()])
        .unwrap();
    assert_eq!(
        b.download(&RadixTopK::magnitude().select(b, &big, 1).unwrap().indices)
            .unwrap(),
        vec![1]
    );
}

/// One check of the suite (see the module doc).
pub fn policy_picks_by_size_and_alternates_when_quantized<B: Backend<E>, E: Element>(b: &B) {
    let mut p = Policy::<E>::new(false);
    // Sizes in bytes as those of these many f32 (the policy picks by bytes).
    for (n, want) in [
        (1000usize, PolicyChoice::Exact),
        (100_000, PolicyChoice::Trimmed),
        (2_000_000, PolicyChoice::BinarySearch),
    ] {
        let n = n * 4 / E::BYTES;
        let x: Vec<E> = dense_values(n, ValueDist::Normal { std: 1.0 }, n as u64);
        let s = host(b, p.select(b, &b.upload(&x).unwrap(), n / 1000).unwrap());
        assert_eq!(p.last, Some(want), "n = {n}");
        assert!(s.count >= n / 1000);
    }
    let mut q = Policy::<E>::new(true);
    let x: Vec<E> = dense_values(10_000, ValueDist::Normal { std: 1.0 }, 5);
    let buf = b.upload(&x).unwrap();
    for round in 0..4 {
        let s = q.select(b, &buf, 50).map(|s| host(b, s)).unwrap();
        let top = round % 2 == 0;
        assert_eq!(
            q.last,
            Some(if top {
                PolicyChoice::SignedTop
            } else {
                PolicyChoice::SignedLow
            })
        );
        let order = if top {
            KeyOrder::Signed
        } else {
            KeyOrder::SignedReversed
        };
        let keys: Vec<u64> = x.iter().map(|&v| order.key(v)).collect();
        assert_eq!(indices(&s), oracle_topk(&keys, 50));
        assert!(
            s.values
                .iter()
                .all(|&v| if top { v > E::zero() } else { v < E::zero() }),
            "one-signed set"
        );
    }
}

/// One check of the suite (see the module doc).
pub fn large_inputs_up_to_2_pow_22<B: Backend<E>, E: Element>(b: &B) {
    let n = 1 << 22;
    let x: Vec<E> = dense_values(n, ValueDist::HeavyTailed { scale: 1.0 }, 42);
    let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
    let buf = b.upload(&x).unwrap();
    for k in [1, n / 1000] {
        let want = oracle_topk(&keys, k);
        let exact: [Box<dyn Selector<B, E>>; 2] = [
            Box::new(RadixTopK::magnitude()),
            Box::new(TrimmedTopK::default()),
        ];
        for mut sel in exact {
            let s = host(b, sel.select(b, &buf, k).unwrap());
            assert_eq!(indices(&s), want, "{} k={k}", sel.name());
        }
        let s = host(
            b,
            ThresholdBinarySearch::default().select(b, &buf, k).unwrap(),
        );
        check_threshold_contract("2^22", &x, k, &s);
    }
    // Inputs that mislead the narrowing sample (a lower bound estimated
    // from evenly spread blocks, `sparse_core::topk::narrowing_sample`):
    // the sampled blocks hold the largest values (too few keys reach the
    // bound: the exact route runs) or the smallest (far more than k reach
    // it). Selections stay exact, block top-k included.
    let blocks = sparse_core::topk::narrowing_sample(n).expect("a sample at 2^22");
    for (name, in_blocks) in [("sample high", 100.0), ("sample low", 1e-3)] {
        let mut y = x.clone();
        for r in blocks.iter().cloned() {
            for v in &mut y[r] {
                // Saturated at the largest finite value (which only a
                // narrow type reaches).
                let scaled = *v * e(in_blocks);
                *v = if scaled.is_finite() {
                    scaled
                } else {
                    E::max_value().copysign(*v)
                };
            }
        }
        let keys: Vec<u64> = y.iter().map(|&v| abs_key(v)).collect();
        let buf = b.upload(&y).unwrap();
        let k = n / 1000;
        let want = oracle_topk(&keys, k);
        for mut sel in [
            Box::new(RadixTopK::magnitude()) as Box<dyn Selector<B, E>>,
            Box::new(TrimmedTopK::default()),
        ] {
            let s = host(b, sel.select(b, &buf, k).unwrap());
            assert!(indices(&s) == want, "{name}: {}", sel.name());
        }
        let s = host(b, SampledThreshold::default().select(b, &buf, k).unwrap());
        check_threshold_contract(name, &y, k, &s);
        let half = n / 2;
        let mut want: Vec<u32> = oracle_topk(&keys[..half], k / 2);
        want.extend(
            oracle_topk(&keys[half..], k / 2)
                .iter()
                .map(|&i| i + half as u32),
        );
        let s = host(b, BlockTopK { blocks: 2 }.select(b, &buf, k).unwrap());
        assert!(indices(&s) == want, "{name}: block top-k");
        // An infinity outside and inside the sample is reported at its
        // index in the input.
        for at in [blocks[3].start - 5, blocks[5].start + 7] {
            let mut z = y.clone();
            z[at] = E::infinity();
            let buf = b.upload(&z).unwrap();
            assert!(
                matches!(
                    RadixTopK::magnitude().select(b, &buf, k).map(|s| s.count),
                    Err(Error::NonFinite { index }) if index == at
                ),
                "{name}: infinity at {at}"
            );
        }
    }
}

/// One check of the suite (see the module doc).
pub fn zen_partitioner_loses_nothing_and_agrees_across_ranks<B: Backend<E>, E: Element>(b: &B) {
    let mut rng = Rng::seed_from_u64(3);
    let mut idx: Vec<u32> = (0..100_000)
        .map(|_| rng.random_range(0..50_000_000))
        .collect();
    idx.sort_unstable();
    idx.dedup();
    let vals: Vec<E> = idx.iter().map(|&i| e(f64::from(i))).collect();
    let (bi, bv) = (b.upload(&idx).unwrap(), b.upload(&vals).unwrap());
    // Two ranks: same h0 seed, different rehash seeds.
    let rank0 = ZenPartitioner::new(11, 1, 16, idx.len())
        .unwrap()
        .partition(b, &bi, &bv)
        .unwrap();
    let rank1 = ZenPartitioner::new(11, 2, 16, idx.len())
        .unwrap()
        .partition(b, &bi, &bv)
        .unwrap();
    for z in [&rank0, &rank1] {
        let mut seen = z.parts.indices.clone();
        seen.sort_unstable();
        assert_eq!(seen, idx, "every index exactly once");
        assert!(
            z.imbalance <= 1.1,
            "imbalance {} for nnz = {} over 16 partitions",
            z.imbalance,
            idx.len()
        );
    }
    for p in 0..16 {
        let set = |z: &crate::ZenPartition<E>| {
            let mut s = z.parts.indices[z.parts.offsets[p]..z.parts.offsets[p + 1]].to_vec();
            s.sort_unstable();
            s
        };
        assert_eq!(
            set(&rank0),
            set(&rank1),
            "partition {p} identical on both ranks"
        );
    }
    // Tiny memories force collisions into the overflow and the fallback.
    let mut tiny = ZenPartitioner::new(11, 1, 16, idx.len()).unwrap();
    tiny.hash.r1 = 64;
    tiny.hash.r2 = 8;
    let t = tiny.partition(b, &bi, &bv).unwrap();
    assert!(t.parts.fallback > 0);
    let mut seen = t.parts.indices.clone();
    seen.sort_unstable();
    assert_eq!(seen, idx);
}

/// One check of the suite (see the module doc): a selection becomes a host
/// `SparseVec` in one call, equal to the top-k of the host
/// (`SparseVec::split_topk`, the shared tie rule), and a dimension it does
/// not fit is an error.
pub fn selection_becomes_a_sparse_vec<B: Backend<E>, E: Element>(b: &B) {
    for (name, x) in cases::<E>() {
        let buf = b.upload(&x).unwrap();
        let dense = sparse_core::SparseVec::from_dense(&x).unwrap();
        for k in ks(x.len()) {
            let sel = RadixTopK {
                order: KeyOrder::Abs,
            }
            .select(b, &buf, k)
            .unwrap();
            let v = sel.to_sparse(b, x.len()).unwrap();
            // Zeros are never stored by from_dense; compare the non-zeros.
            let (want, _) = dense.split_topk(k);
            let nonzero: Vec<(u32, E)> = v.iter().filter(|(_, x)| *x != E::zero()).collect();
            let want_nonzero: Vec<(u32, E)> = want.iter().collect();
            if k <= dense.nnz() {
                assert_eq!(nonzero, want_nonzero, "{name} k={k}");
            }
            assert_eq!(v.nnz(), k, "{name} k={k}");
            if let Some(&last) = v.indices().last() {
                assert!(
                    sel.to_sparse(b, last as usize).is_err(),
                    "{name}: too small a dim"
                );
            }
        }
    }
}
