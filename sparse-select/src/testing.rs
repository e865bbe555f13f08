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
use sparse_core::state::{Scope, State, Tensor};
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

/// What a selector promises, for [`selector_suite_for`]. Every promise
/// includes the basic contract of [`Selector`]: the selection's indices
/// increasing and in range, its values `x` at them bit for bit, its count
/// their number; `k = 0` selects nothing and `k = n` everything; `k > n` is
/// [`Error::KOutOfRange`]; NaN or infinity anywhere is
/// [`Error::NonFinite`] naming the first one, whatever `k` is and whatever
/// the selector kept from earlier calls; a fresh selector given the same
/// input gives the same selection (runs reproduce), and a second call on
/// the same instance keeps the promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    /// Exactly the `k` largest keys in this order, ties to the lower index
    /// (the brute-force oracle: a full sort), as [`RadixTopK`] and
    /// [`TrimmedTopK`] promise.
    ExactTopK(KeyOrder),
    /// RedSync's threshold contract, by magnitude: at least `k` selected;
    /// every selected magnitude beats every unselected one; at most `2k`
    /// unless ties at the `k`-th magnitude force more, and then exactly the
    /// elements at least as large as the `k`-th; a reported threshold
    /// separates the selected from the others. [`ThresholdBinarySearch`],
    /// [`ThresholdReuse`] and [`SampledThreshold`] promise it; a selection
    /// of exactly `k` that reports no threshold (a fallback re-selection,
    /// as [`SampledThreshold`]'s on overshoot) must be the exact top-k by
    /// magnitude instead.
    Threshold,
    /// At least `min(k, n)` entries and nothing more specific
    /// ([`BlockTopK`], [`BucketTopK`], [`Policy`], an approximate
    /// selector).
    AtLeastK,
}

/// The selector contract, run on a user's selector (or a built-in one) on
/// any backend, as `sparse_coll::testing::collective_suite_for` runs a
/// collective: `make` builds a fresh selector, `promise` says what it
/// promises ([`Promise`]). Inputs: the shared suite's (random, heavy-tailed,
/// all equal, many ties, all zero, negative, subnormal, signed zeros; `n`
/// from 1 to 4,097), large random ones (`2^16`, `2^17 + 3`), the empty input,
/// and inputs with NaN or infinity at the start, in the middle and at the
/// end, before and after a call that succeeded; `k` of 0, 1, `n/1000`,
/// `n - 1`, `n` and `n + 1`. Returns the number of selections checked.
///
/// # Panics
/// On the first check that fails, with the selector's name, the input and
/// `k`: this is a test.
///
/// ```
/// use backend_cpu::Cpu;
/// use sparse_select::testing::{Promise, selector_suite_for};
/// use sparse_select::{KeyOrder, RadixTopK};
///
/// // The element type first: a selector may implement several.
/// let checked = selector_suite_for::<f32, _, _>(
///     &Cpu,
///     RadixTopK::magnitude,
///     Promise::ExactTopK(KeyOrder::Abs),
/// );
/// assert!(checked > 100);
/// ```
pub fn selector_suite_for<E, B, S>(b: &B, make: impl Fn() -> S, promise: Promise) -> usize
where
    B: Backend<E>,
    E: Element,
    S: Selector<B, E>,
{
    let mut sel = make();
    let name = sel.name();
    let mut checked = 0;
    // Each input is uploaded once and selected from many times.
    let upload = |x: &[E]| b.upload(x).expect("upload");
    let run = |s: &mut S, x: &B::Buffer<E>, k: usize| -> Result<Sel<E>, Error> {
        s.select(b, x, k).map(|s| host(b, s))
    };
    // The empty input.
    let none = upload(&[]);
    let empty =
        run(&mut sel, &none, 0).unwrap_or_else(|e| panic!("{name}: empty input, k = 0: {e}"));
    assert_eq!(empty.count, 0, "{name}: empty input selects nothing");
    assert!(
        empty.indices.is_empty() && empty.values.is_empty(),
        "{name}: empty input"
    );
    assert_eq!(
        run(&mut sel, &none, 1).err(),
        Some(Error::KOutOfRange { k: 1, len: 0 }),
        "{name}: k = 1 of the empty input"
    );
    // One input past 2^16 (more than one pass of a radix digit, more
    // than one block of most kernels), with small k only.
    let big = (1usize << 17) + 3;
    let large = (
        format!("heavy n={big}"),
        dense_values::<E>(big, ValueDist::HeavyTailed { scale: 1.0 }, 77),
    );
    for (case, x) in cases::<E>()
        .into_iter()
        .filter(|(_, x)| x.len() <= 1 << 16)
        .chain([large])
    {
        let n = x.len();
        let buf = upload(&x);
        let keys: Vec<u64> = match promise {
            Promise::ExactTopK(order) => x.iter().map(|&v| order.key(v)).collect(),
            _ => Vec::new(),
        };
        for k in ks(n) {
            let what = format!("{name}: {case}, k = {k}");
            let keeps = |what: &str, s: &Sel<E>| {
                check_selection(what, &x, s);
                match k {
                    0 => assert_eq!(s.count, 0, "{what}: k = 0 selects nothing"),
                    k if k == n => assert_eq!(s.count, n, "{what}: k = n selects everything"),
                    _ => {}
                }
                match promise {
                    Promise::ExactTopK(order) => assert_eq!(
                        s.indices,
                        oracle_topk(&keys, k),
                        "{what}: not the exact top-k in {order:?} order (ties to the lower index)"
                    ),
                    // A threshold selector that falls back to an exact
                    // re-selection (DGC's, on overshoot) reports no
                    // threshold: then the exact top-k by magnitude.
                    Promise::Threshold if s.threshold.is_none() && k > 0 && s.count == k => {
                        let abs: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
                        assert_eq!(
                            s.indices,
                            oracle_topk(&abs, k),
                            "{what}: no threshold reported and not the exact top-k"
                        );
                    }
                    Promise::Threshold => check_threshold_contract(what, &x, k, s),
                    Promise::AtLeastK => assert!(s.count >= k, "{what}: {} < k", s.count),
                }
            };
            // A fresh selector, twice: the same selection (runs
            // reproduce). Then the instance that has selected from every
            // input before (a selector that keeps state, a threshold or a
            // sampling seed, may choose otherwise, within its promise).
            let s = run(&mut make(), &buf, k).unwrap_or_else(|e| panic!("{what}: {e}"));
            keeps(&what, &s);
            let fresh = run(&mut make(), &buf, k).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                fresh.indices, s.indices,
                "{what}: a fresh selector selects otherwise"
            );
            let kept = run(&mut sel, &buf, k).unwrap_or_else(|e| panic!("{what}: {e}"));
            keeps(&format!("{what}, a selector called before"), &kept);
            let again = run(&mut sel, &buf, k).unwrap_or_else(|e| panic!("{what}: {e}"));
            keeps(&format!("{what}, a second call"), &again);
            checked += 1;
        }
        assert_eq!(
            run(&mut sel, &buf, n + 1).err(),
            Some(Error::KOutOfRange { k: n + 1, len: n }),
            "{name}: {case}, k = n + 1"
        );
    }
    // NaN and infinity, each first at the start, in the middle and at the
    // end, for every k, on the instance that just selected from a good
    // input (a kept threshold must not skip the check) and on a fresh one.
    let good: Vec<E> = (0..1000).map(|i| e(f64::from(i % 97) - 48.0)).collect();
    let good_buf = upload(&good);
    for bad in [E::nan(), E::infinity(), E::neg_infinity()] {
        for at in [0, 1, 500, 999] {
            let mut x = good.clone();
            x[at] = bad;
            // A second, later non-finite value of the other kind: the
            // first is reported, whichever kind it is.
            if at < 999 {
                x[999] = if bad.is_nan() {
                    E::infinity()
                } else {
                    E::nan()
                };
            }
            let bad_buf = upload(&x);
            for k in [0, 1, 10, 999, 1000] {
                let what = format!("{name}: {bad:?} at {at}, k = {k}");
                run(&mut sel, &good_buf, k.min(999))
                    .unwrap_or_else(|e| panic!("{what}: good input: {e}"));
                for s in [&mut sel, &mut make()] {
                    match run(s, &bad_buf, k) {
                        Err(Error::NonFinite { index }) if index == at => {}
                        Err(e) => panic!("{what}: {e}, not NonFinite {{ index: {at} }}"),
                        Ok(_) => panic!("{what}: selected from a non-finite input"),
                    }
                }
                checked += 1;
            }
        }
    }
    checked
}

/// The basic contract of a selection: indices increasing and in range,
/// values `x` at them bit for bit, the count their number.
fn check_selection<E: Element>(what: &str, x: &[E], s: &Sel<E>) {
    assert_eq!(s.indices.len(), s.count, "{what}: count vs indices");
    assert_eq!(s.values.len(), s.count, "{what}: count vs values");
    assert!(
        s.indices.windows(2).all(|w| w[0] < w[1]),
        "{what}: indices not increasing"
    );
    if let Some(&last) = s.indices.last() {
        assert!(
            (last as usize) < x.len(),
            "{what}: index {last} out of range"
        );
    }
    for (&i, &v) in s.indices.iter().zip(&s.values) {
        assert_eq!(
            v.to_bits_u64(),
            x[i as usize].to_bits_u64(),
            "{what}: the value at {i} is not the input's"
        );
    }
}

/// One check of the suite (see the module doc): every built-in selector
/// through [`selector_suite_for`], with the promise its documentation
/// makes.
pub fn every_selector_keeps_its_promise<B: Backend<E>, E: Element>(b: &B) {
    for order in [KeyOrder::Abs, KeyOrder::Signed, KeyOrder::SignedReversed] {
        selector_suite_for(b, || RadixTopK { order }, Promise::ExactTopK(order));
    }
    selector_suite_for(b, TrimmedTopK::default, Promise::ExactTopK(KeyOrder::Abs));
    let fine = || TrimmedTopK::new(0.05).expect("a valid epsilon");
    selector_suite_for(b, fine, Promise::ExactTopK(KeyOrder::Abs));
    selector_suite_for(b, ThresholdBinarySearch::default, Promise::Threshold);
    selector_suite_for(b, ThresholdReuse::<E>::default, Promise::Threshold);
    selector_suite_for(b, SampledThreshold::default, Promise::Threshold);
    selector_suite_for(b, || BlockTopK { blocks: 3 }, Promise::AtLeastK);
    selector_suite_for(b, BucketTopK::default, Promise::AtLeastK);
    selector_suite_for(b, || Policy::<E>::new(false), Promise::AtLeastK);
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
pub fn bad_parameters_are_an_error<B: Backend<E>, E: Element>(b: &B) {
    // NaN, infinity and k > n for every selector:
    // `every_selector_keeps_its_promise`.
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
