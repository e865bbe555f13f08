//! The selector test suite, behind the `testing` feature: every selector
//! against a brute-force oracle (a sort), on inputs that break selection
//! code (random, heavy-tailed, all equal, many ties, all zero, negative,
//! subnormal, signed zeros; n from 1 to 2^22 + 7). Each check is a
//! `pub fn name<B: Backend<E>, E: Element>(b: &B)`, so every backend runs it
//! unchanged, once for each element type it implements, through
//! [`crate::selector_test_suite!`]. Inputs are drawn in `f64` and rounded
//! to `E` (sizes in bytes, where a check depends on them, kept those of
//! `f32`).
//!
//! The contract a user runs on their own selector is
//! [`selector_suite_for`] (with a [`Promise`]) or
//! [`selector_suite_with_oracle`] (with an oracle of their own over a
//! [`HostSelection`]); every built-in selector goes through it in
//! [`every_exact_selector_keeps_its_promise`],
//! [`every_threshold_selector_keeps_its_promise`] and
//! [`block_bucket_and_quantized_selectors_keep_their_rule`]. Besides the
//! shared inputs (`n` up to 4,097, `2^16`, `2^17 + 3`) and non-finite ones,
//! it calls every instance as a training loop does, step after step with
//! the same `n` and `k` and new data (six shapes up to `2^16 + 1`, nine
//! steps each: new draws, the same values moved, rescaled so that a kept
//! threshold goes stale, heavy-tailed, ties), and at `2^22 + 7` (three
//! calls, the last on new data right after a call that kept a
//! threshold), checking every answer against the oracle: a selector that
//! answers a repeated shape from a cache fails it
//! (`sparse-select/tests/stale_selector.rs`).

mod contract;

use crate::{
    BlockTopK, BucketTopK, Policy, PolicyChoice, RadixTopK, SampledThreshold, Selection, Selector,
    ThresholdBinarySearch, ThresholdReuse, TrimmedTopK, ZenPartitioner,
};
pub use contract::{HostSelection, Promise, selector_suite_for, selector_suite_with_oracle};
use rand::{Rng as _, SeedableRng as _};
use sparse_core::state::{Scope, State, Tensor};
use sparse_core::testing::Rng;
pub use sparse_core::testing::elements;
use sparse_core::testing::generate::{ValueDist, dense_values};
use sparse_core::testing::suite::{convert, inputs, oracle_topk};
use sparse_core::{Backend, Element, Error, KeyOrder, abs_key};

/// `v` in the element type (nearest value).
fn e<E: Element>(v: f64) -> E {
    E::from_f64_nearest(v)
}

fn host<B: Backend<E>, E: Element>(b: &B, s: Selection<B, E>) -> HostSelection<E> {
    HostSelection::download(b, &s).expect("download")
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

fn indices<E>(s: &HostSelection<E>) -> Vec<u32> {
    assert_eq!(s.indices.len(), s.count);
    assert_eq!(s.values.len(), s.count);
    s.indices.clone()
}

fn check_values<E: Element>(x: &[E], s: &HostSelection<E>) {
    for (&i, &v) in s.indices.iter().zip(&s.values) {
        assert_eq!(v.to_bits_u64(), x[i as usize].to_bits_u64());
    }
    assert!(
        s.indices.windows(2).all(|w| w[0] < w[1]),
        "indices increasing"
    );
}

/// One check of the suite (see the module doc): the exact selectors
/// (radix top-k in every order, trimmed top-k at two steps) through
/// [`selector_suite_for`], exact in their order. With the next two checks,
/// every built-in selector runs the contract with the strongest promise it
/// keeps (split in three so that a test harness runs them side by side).
pub fn every_exact_selector_keeps_its_promise<B: Backend<E>, E: Element>(b: &B) {
    for order in [KeyOrder::Abs, KeyOrder::Signed, KeyOrder::SignedReversed] {
        selector_suite_for(b, || RadixTopK { order }, Promise::ExactTopK(order));
    }
    selector_suite_for(b, TrimmedTopK::default, Promise::ExactTopK(KeyOrder::Abs));
    let fine = || TrimmedTopK::new(0.05).expect("a valid epsilon");
    selector_suite_for(b, fine, Promise::ExactTopK(KeyOrder::Abs));
}

/// One check of the suite (see the module doc): the threshold selectors
/// and RedSync's policy (exact on small layers, threshold search with
/// reuse on large ones) keep the threshold contract.
pub fn every_threshold_selector_keeps_its_promise<B: Backend<E>, E: Element>(b: &B) {
    selector_suite_for(b, ThresholdBinarySearch::default, Promise::Threshold);
    selector_suite_for(b, ThresholdReuse::<E>::default, Promise::Threshold);
    selector_suite_for(b, SampledThreshold::default, Promise::Threshold);
    selector_suite_for(b, || Policy::<E>::new(false), Promise::Threshold);
}

/// One check of the suite (see the module doc): the selectors whose rule
/// no [`Promise`] states, through [`selector_suite_with_oracle`]. Block and
/// bucket top-k select the exact top share of each segment of their
/// `plan`, and keep no promise about the whole input
/// ([`Promise::AtLeastKLargest`] included: a block of small values still
/// gives its share); the quantized policy selects the exact signed top-k
/// or low-k, alternating.
pub fn block_bucket_and_quantized_selectors_keep_their_rule<B: Backend<E>, E: Element>(b: &B) {
    let exact = Promise::ExactTopK(KeyOrder::Abs);
    let blocks = BlockTopK { blocks: 3 };
    selector_suite_with_oracle(
        b,
        || blocks,
        |x: &[E], k, s: &HostSelection<E>| {
            let (offsets, ks) = blocks.plan(x.len(), k).map_err(|e| e.to_string())?;
            exact.check_per_segment(x, &offsets, &ks, s)
        },
    );
    let buckets = BucketTopK::default();
    selector_suite_with_oracle(
        b,
        || buckets,
        |x: &[E], k, s: &HostSelection<E>| {
            let (offsets, ks) = buckets.plan(x.len(), k).map_err(|e| e.to_string())?;
            exact.check_per_segment(x, &offsets, &ks, s)
        },
    );
    selector_suite_with_oracle(
        b,
        || Policy::<E>::new(true),
        |x: &[E], k, s: &HostSelection<E>| {
            let top = Promise::ExactTopK(KeyOrder::Signed).check(x, k, s);
            let low = Promise::ExactTopK(KeyOrder::SignedReversed).check(x, k, s);
            match (top, low) {
                (Err(top), Err(low)) => Err(format!(
                    "neither the signed top-k ({top}) nor the low-k ({low})"
                )),
                _ => Ok(()),
            }
        },
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

/// The threshold contract ([`Promise::Threshold`] without its exact
/// fallback), as an assertion.
fn check_threshold_contract<E: Element>(name: &str, x: &[E], k: usize, s: &HostSelection<E>) {
    contract::check_selection(name, x, s);
    if let Err(e) = contract::threshold_contract(x, k, s) {
        panic!("{name} k={k}: {e}");
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
                let what = format!("{name} P={p} k={k}");
                per_block(b, BlockTopK { blocks: p }, (&buf, k), &keys, &plan, &what);
            }
            let bucket = BucketTopK::default();
            let plan = bucket.plan(n, k).unwrap();
            let what = format!("{name} buckets k={k}");
            let s = per_block(b, bucket, (&buf, k), &keys, &plan, &what);
            assert!(s.count >= k, "{name}: bucket top-k selects at least k");
            assert!(plan.0.windows(2).all(|w| w[1] - w[0] <= 512));
        }
    }
}

/// `sel`'s selection of `k` from `buf`, checked against
/// [`per_block_oracle`] over its `plan` (the blocks' offsets and shares)
/// of the input's `keys`.
fn per_block<B: Backend<E>, E: Element, S: Selector<B, E>>(
    b: &B,
    mut sel: S,
    (buf, k): (&B::Buffer<E>, usize),
    keys: &[u64],
    plan: &(Vec<usize>, Vec<usize>),
    what: &str,
) -> HostSelection<E> {
    let s = host(b, sel.select(b, buf, k).unwrap());
    assert_eq!(
        indices(&s),
        per_block_oracle(keys, &plan.0, &plan.1),
        "{what}"
    );
    s
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
pub fn bad_parameters_are_an_error<B: Backend<E>, E: Element>(b: &B) {
    // NaN, infinity and k > n for every selector:
    // `every_exact_selector_keeps_its_promise` and the two after it.
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

/// A selection as bits: indices, values, count, threshold.
type Bits = (Vec<u32>, Vec<u64>, usize, Option<u64>);

/// The selections of `calls` calls of `s` on drifting inputs of `n`
/// elements (the `from`-th input onwards), with `k = n / 100`.
fn run_calls<B: Backend<E>, E: Element>(
    b: &B,
    s: &mut dyn Selector<B, E>,
    n: usize,
    from: u64,
    calls: u64,
) -> Vec<Bits> {
    (from..from + calls)
        .map(|step| {
            // Same distribution, new draws; every fourth call rescaled, so
            // that a reused threshold goes stale and a search runs again.
            let std = if step % 4 == 3 { 50.0 } else { 1.0 };
            let x: Vec<E> = dense_values(n, ValueDist::Normal { std }, 300 + step);
            let sel = host(b, s.select(b, &b.upload(&x).unwrap(), n / 100).unwrap());
            (
                sel.indices,
                sel.values.iter().map(|v| v.to_bits_u64()).collect(),
                sel.count,
                sel.threshold.map(f64::to_bits),
            )
        })
        .collect()
}

/// One check of the suite (see the module doc): a selector's state
/// ([`Selector::save_state`]) loaded into a fresh one makes the fresh one
/// select, bit for bit, what the saved one selects next, for every
/// stateful selector (threshold reuse, the sampled threshold, RedSync's
/// policy in both modes) and through a `Box<dyn Selector>`; a state of
/// another kind, or one saved under other settings, is an error that
/// leaves the selector unchanged; a stateless selector saves the
/// stateless state and refuses any other.
pub fn state_restores_the_next_selections<B: Backend<E>, E: Element>(b: &B) {
    let n = 1 << 14;
    let large = || {
        let mut p = Policy::<E>::new(false);
        (p.thsd1, p.thsd2) = (0, 0); // every call a threshold search with reuse
        p
    };
    type Make<B, E> = Box<dyn Fn() -> Box<dyn Selector<B, E>>>;
    let makes: Vec<(&str, Make<B, E>)> = vec![
        ("reuse", Box::new(|| Box::new(ThresholdReuse::<E>::new(3)))),
        (
            "sampled",
            Box::new(|| Box::new(SampledThreshold::default())),
        ),
        ("policy", Box::new(move || Box::new(large()))),
        (
            "policy_quantized",
            Box::new(|| Box::new(Policy::<E>::new(true))),
        ),
        ("radix", Box::new(|| Box::new(RadixTopK::magnitude()))),
    ];
    for (name, make) in &makes {
        let mut a = make();
        run_calls(b, &mut *a, n, 0, 5);
        let saved = a.save_state().unwrap();
        assert_eq!(saved.is_stateless(), *name == "radix", "{name}");
        // The reshard rule (`sparse_core::state::reshard`): on another rank
        // count, shared entries are kept and this rank's own (a reused
        // threshold, counters) start as on a first call.
        let first = make().save_state().unwrap();
        for s in sparse_core::state::reshard(&[saved.clone(), saved.clone()], 3).unwrap() {
            let mut r = make();
            r.load_state(&s).unwrap();
            let got = r.save_state().unwrap();
            let entries = |st: &State, scope: Scope| -> Vec<(String, Tensor)> {
                st.entries()
                    .filter(|e| e.1 == scope)
                    .map(|(n, _, t)| (n.to_string(), t.clone()))
                    .collect()
            };
            assert_eq!(
                entries(&got, Scope::Shared),
                entries(&saved, Scope::Shared),
                "{name}"
            );
            assert_eq!(
                entries(&got, Scope::Local),
                entries(&first, Scope::Local),
                "{name}"
            );
        }
        let mut fresh = make();
        fresh.load_state(&saved).unwrap();
        assert!(fresh.save_state().unwrap().same_bits(&saved), "{name}");
        let want = run_calls(b, &mut *a, n, 5, 6);
        let got = run_calls(b, &mut *fresh, n, 5, 6);
        assert_eq!(got, want, "{name}: the restored selector selects otherwise");
        if *name != "radix" {
            // Without the state, a fresh selector differs somewhere (so the
            // check above is not vacuous)...
            let mut blank = make();
            let before = blank.save_state().unwrap();
            assert!(!before.same_bits(&saved), "{name}");
            // ...and a state of another kind is refused, changing nothing.
            for (other, make_other) in &makes {
                if other == name || (name.starts_with("policy") && other.starts_with("policy")) {
                    continue;
                }
                let e = blank.load_state(&make_other().save_state().unwrap());
                assert!(e.is_err(), "{name} took {other}'s state");
                assert!(blank.save_state().unwrap().same_bits(&before), "{name}");
            }
        }
    }
    // Settings are checked: a reuse interval or a policy mode that differs.
    let mut r = ThresholdReuse::<E>::new(4);
    let saved = Selector::<B, E>::save_state(&ThresholdReuse::<E>::new(3)).unwrap();
    let e = Selector::<B, E>::load_state(&mut r, &saved).unwrap_err();
    assert!(e.to_string().contains("interval"), "{e}");
    // The reused threshold is `E`'s bits: another element type's state is
    // refused, naming both.
    let (other, name) = if E::NAME == "f64" {
        (ThresholdReuse::<f32>::new(3).state(), "f32")
    } else {
        (ThresholdReuse::<f64>::new(3).state(), "f64")
    };
    let e = Selector::<B, E>::load_state(&mut ThresholdReuse::<E>::new(3), &other).unwrap_err();
    assert!(
        e.to_string().contains(&format!("ThresholdReuse<{name}>"))
            && e.to_string()
                .contains(&format!("ThresholdReuse<{}>", E::NAME)),
        "{e}"
    );
    let saved = Selector::<B, E>::save_state(&Policy::<E>::new(true)).unwrap();
    let e = Selector::<B, E>::load_state(&mut Policy::<E>::new(false), &saved).unwrap_err();
    assert!(e.to_string().contains("quantize"), "{e}");
    let e = Selector::<B, E>::load_state(&mut RadixTopK::magnitude(), &saved).unwrap_err();
    assert!(e.to_string().contains("keeps no state"), "{e}");
}
