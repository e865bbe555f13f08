//! The selector contract as a suite a user runs on their own selector:
//! [`selector_suite_for`] with a built-in [`Promise`], or
//! [`selector_suite_with_oracle`] with the user's own oracle, both over a
//! [`HostSelection`].

use super::cases;
use crate::{Selection, Selector};
use sparse_core::testing::generate::{ValueDist, dense_values};
use sparse_core::testing::suite::convert;
use sparse_core::{Backend, Element, Error, KeyOrder, Result, abs_key};
use std::marker::PhantomData;
use std::ops::Range;

/// A selection downloaded to the host, as an oracle of
/// [`selector_suite_with_oracle`] sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSelection<E> {
    /// The selected indices (increasing, when the selector keeps the
    /// contract; the suite checks that before any oracle sees them).
    pub indices: Vec<u32>,
    /// The values at them.
    pub values: Vec<E>,
    /// The selection's count ([`Selection::count`]).
    pub count: usize,
    /// The threshold the selector reported ([`Selection::threshold`]).
    pub threshold: Option<f64>,
}

impl<E: Element> HostSelection<E> {
    /// Downloads `s`.
    ///
    /// # Errors
    /// The backend's download errors.
    pub fn download<B>(b: &B, s: &Selection<B, E>) -> Result<Self>
    where
        B: Backend<E>,
    {
        Ok(Self {
            indices: b.download(&s.indices)?,
            values: b.download(&s.values)?,
            count: s.count,
            threshold: s.threshold,
        })
    }

    /// The part of this selection inside `range` of the input, its indices
    /// relative to `range.start` (so that a per-segment promise checks it
    /// against `&x[range]`), the threshold kept. Needs increasing indices.
    pub fn within(&self, range: Range<usize>) -> Self {
        let at = |bound: usize| self.indices.partition_point(|&i| (i as usize) < bound);
        let (lo, hi) = (at(range.start), at(range.end.max(range.start)));
        Self {
            indices: self.indices[lo..hi]
                .iter()
                .map(|&i| i - range.start as u32)
                .collect(),
            values: self.values.get(lo..hi).unwrap_or_default().to_vec(),
            count: hi - lo,
            threshold: self.threshold,
        }
    }
}

/// What a selector promises about *which* elements it selects, for
/// [`selector_suite_for`]; [`Promise::check`] is its oracle. Every promise
/// comes on top of the basic contract of [`Selector`], which the suite
/// checks itself whatever the promise or oracle: the selection's indices
/// increasing and in range, its values `x` at them bit for bit, its count
/// their number; `k = 0` selects nothing and `k = n` everything; `k > n` is
/// [`Error::KOutOfRange`]; NaN or infinity anywhere is
/// [`Error::NonFinite`] naming the first one, whatever `k` is and whatever
/// the selector kept from earlier calls; a fresh selector given the same
/// input gives the same selection (runs reproduce); and every call on an
/// instance, whatever it was called with before, keeps the promise for the
/// data of *that* call.
///
/// Which to choose: the strongest the selector keeps. [`Promise::AtLeastK`]
/// checks only a count, so it cannot tell a right choice from a stale or
/// arbitrary one; a selector whose choice is not global (top-k per block or
/// per bucket) states its own rule through [`selector_suite_with_oracle`]
/// instead, for example [`Promise::check_per_segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    /// Exactly the `k` largest keys in this order, ties to the lower index
    /// (the brute-force oracle: a full sort), as [`crate::RadixTopK`] and
    /// [`crate::TrimmedTopK`] promise.
    ExactTopK(KeyOrder),
    /// RedSync's threshold contract, by magnitude: at least `k` selected;
    /// every selected magnitude beats every unselected one; at most `2k`
    /// unless ties at the `k`-th magnitude force more, and then exactly the
    /// elements at least as large as the `k`-th; a reported threshold
    /// separates the selected from the others. [`crate::ThresholdBinarySearch`],
    /// [`crate::ThresholdReuse`], [`crate::SampledThreshold`] and
    /// [`crate::Policy`] (not quantized) promise it; a selection of exactly
    /// `k` that reports no threshold (an exact top-k: the policy's small
    /// layers, or [`crate::SampledThreshold`]'s re-selection on overshoot)
    /// must be the exact top-k by magnitude instead.
    Threshold,
    /// At least `min(k, n)` selected, and none of them below one left out
    /// in this order: the smallest selected key is at least the largest
    /// unselected one (ties at the boundary may go either way, and any
    /// number above `k` may be selected). For an approximate selector whose
    /// choice is global.
    AtLeastKLargest(KeyOrder),
    /// At least `min(k, n)` selected, and nothing about which: the weakest
    /// promise, which a stale answer (the selection of an earlier call)
    /// keeps as well as a right one. Prefer [`Promise::AtLeastKLargest`],
    /// or an oracle of the selector's own rule.
    AtLeastK,
}

impl Promise {
    /// Whether the selection `s` of `x` with target `k` keeps this promise
    /// (the basic contract is the suite's, checked before: `s` has
    /// increasing indices in range and `x`'s values at them); the error
    /// says what is wrong.
    ///
    /// # Errors
    /// A text naming the broken part of the promise.
    pub fn check<E: Element>(
        self,
        x: &[E],
        k: usize,
        s: &HostSelection<E>,
    ) -> std::result::Result<(), String> {
        let at_least = |s: &HostSelection<E>| {
            if s.count < k.min(x.len()) {
                Err(format!("{} selected, fewer than k", s.count))
            } else {
                Ok(())
            }
        };
        match self {
            Self::ExactTopK(order) => exact(x, k, s, order),
            // A threshold selector that falls back to an exact re-selection
            // (DGC's, on overshoot) reports no threshold: then the exact
            // top-k by magnitude.
            Self::Threshold if s.threshold.is_none() && k > 0 && s.count == k => {
                exact(x, k, s, KeyOrder::Abs).map_err(|e| format!("no threshold reported and {e}"))
            }
            Self::Threshold => threshold_contract(x, k, s),
            Self::AtLeastKLargest(order) => {
                at_least(s)?;
                dominates(x, s, order, false)
            }
            Self::AtLeastK => at_least(s),
        }
    }

    /// Checks this promise in every segment `offsets[j]..offsets[j + 1]` of
    /// `x`, with the segment's own target `ks[j]`: the oracle of a selector
    /// that chooses per block (SparDL's [`crate::BlockTopK`], SparCML's
    /// [`crate::BucketTopK`], whose `plan` gives both), for
    /// [`selector_suite_with_oracle`]. Nothing may be selected outside the
    /// segments.
    ///
    /// # Errors
    /// As [`Promise::check`], naming the segment; segments that do not
    /// cover the selection.
    pub fn check_per_segment<E: Element>(
        self,
        x: &[E],
        offsets: &[usize],
        ks: &[usize],
        s: &HostSelection<E>,
    ) -> std::result::Result<(), String> {
        if offsets.len() != ks.len() + 1
            || offsets.windows(2).any(|w| w[0] > w[1])
            || offsets.last().is_some_and(|&end| end > x.len())
        {
            return Err(format!(
                "{} offsets for {} segments, not increasing, or past the input's {} elements",
                offsets.len(),
                ks.len(),
                x.len()
            ));
        }
        let mut covered = 0;
        for (j, (w, &k)) in offsets.windows(2).zip(ks).enumerate() {
            let part = s.within(w[0]..w[1]);
            covered += part.count;
            self.check(&x[w[0]..w[1]], k, &part)
                .map_err(|e| format!("segment {j} ({}..{}): {e}", w[0], w[1]))?;
        }
        if covered != s.count {
            return Err(format!(
                "{} of {} selected outside the segments",
                s.count - covered,
                s.count
            ));
        }
        Ok(())
    }
}

/// The exact top-k of `keys`, ties to the lower index, in increasing index
/// order: the sorting oracle (`oracle_topk`) by a selection in linear time,
/// as the suite checks inputs of 2^22 many times.
pub(super) fn exact_topk(keys: &[u64], k: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    if k == 0 {
        return Vec::new();
    }
    if k < order.len() {
        order.select_nth_unstable_by(k - 1, |&a, &b| {
            keys[b as usize].cmp(&keys[a as usize]).then(a.cmp(&b))
        });
    }
    order.truncate(k);
    order.sort_unstable();
    order
}

/// `s` is exactly the top `k` of `x` in `order`.
fn exact<E: Element>(
    x: &[E],
    k: usize,
    s: &HostSelection<E>,
    order: KeyOrder,
) -> std::result::Result<(), String> {
    let keys: Vec<u64> = x.iter().map(|&v| order.key(v)).collect();
    let want = exact_topk(&keys, k.min(x.len()));
    if s.indices == want {
        return Ok(());
    }
    let first = s.indices.iter().zip(&want).position(|(a, b)| a != b);
    Err(format!(
        "not the exact top-k in {order:?} order (ties to the lower index): {} selected, the \
         oracle's {}, first difference at position {}",
        s.indices.len(),
        want.len(),
        first.unwrap_or(s.indices.len().min(want.len()))
    ))
}

/// Whether every selected key (in `order`) is at least (`strict`: above)
/// every unselected one.
fn dominates<E: Element>(
    x: &[E],
    s: &HostSelection<E>,
    order: KeyOrder,
    strict: bool,
) -> std::result::Result<(), String> {
    let mut chosen = vec![false; x.len()];
    for &i in &s.indices {
        chosen[i as usize] = true;
    }
    let least = s
        .indices
        .iter()
        .map(|&i| i as usize)
        .min_by_key(|&i| order.key(x[i]));
    let most = (0..x.len())
        .filter(|&i| !chosen[i])
        .max_by_key(|&i| order.key(x[i]));
    match (least, most) {
        (Some(a), Some(b))
            if order.key(x[a]) < order.key(x[b])
                || strict && order.key(x[a]) == order.key(x[b]) =>
        {
            Err(format!(
                "the selected x[{a}] = {:?} is not {} the unselected x[{b}] = {:?} in {order:?} order",
                x[a],
                if strict { "above" } else { "at least" },
                x[b]
            ))
        }
        _ => Ok(()),
    }
}

/// The threshold contract: at least k selected; every selected magnitude
/// beats every unselected one; at most 2k, unless ties at the k-th
/// magnitude force more, and then exactly the elements at least as large as
/// the k-th (the fewest above any threshold that holds k); a reported
/// threshold separates the selected from the others.
pub(super) fn threshold_contract<E: Element>(
    x: &[E],
    k: usize,
    s: &HostSelection<E>,
) -> std::result::Result<(), String> {
    if k == 0 {
        return match s.count {
            0 => Ok(()),
            c => Err(format!("{c} selected at k = 0")),
        };
    }
    if s.count < k {
        return Err(format!("{} selected, fewer than k", s.count));
    }
    dominates(x, s, KeyOrder::Abs, true)
        .map_err(|e| format!("a selected magnitude does not beat an unselected one: {e}"))?;
    let keys: Vec<u64> = x.iter().map(|&v| abs_key(v)).collect();
    if s.count > 2 * k {
        let mut sorted = keys.clone();
        let kth = *sorted.select_nth_unstable_by(k - 1, |a, b| b.cmp(a)).1;
        let fewest = keys.iter().filter(|&&key| key >= kth).count();
        if s.count != fewest {
            return Err(format!(
                "{} selected, more than 2k and not the fewest ({fewest}) that ties allow",
                s.count
            ));
        }
    }
    if let Some(t) = s.threshold {
        let mut chosen = vec![false; x.len()];
        for &i in &s.indices {
            chosen[i as usize] = true;
        }
        if let Some(i) = (0..x.len()).find(|&i| chosen[i] != (x[i].abs().to_f64_exact() > t)) {
            return Err(format!(
                "the reported threshold {t} does not separate: |x[{i}]| = {:?}, {}",
                x[i].abs(),
                if chosen[i] {
                    "selected"
                } else {
                    "not selected"
                }
            ));
        }
    }
    Ok(())
}

/// The selector contract, run on a user's selector (or a built-in one) on
/// any backend, as `sparse_coll::testing::collective_suite_for` runs a
/// collective: `make` builds a fresh selector, `promise` says what it
/// promises ([`Promise`]). The inputs are [`selector_suite_with_oracle`]'s.
/// Returns the number of selections checked.
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
    selector_suite_with_oracle(b, make, |x, k, s| promise.check(x, k, s))
}

/// [`selector_suite_for`] with the user's own oracle in place of a
/// [`Promise`], for a selector whose promise none of them states (per
/// block, per bucket, a bound of its own): `oracle(x, k, s)` says whether
/// `s`, selected from `x` with target `k`, is right, or what is wrong.
/// The suite checks the basic contract (see [`Promise`]) before it asks
/// the oracle, so an oracle may take increasing in-range indices and `x`'s
/// values at them for granted.
///
/// Inputs, each selected from by a fresh selector twice (the same
/// selection: runs reproduce) and by one instance that has selected from
/// every earlier input, twice: the shared suite's (random, heavy-tailed,
/// all equal, many ties, all zero, negative, subnormal, signed zeros; `n`
/// from 1 to 4,097), random and heavy-tailed ones of `2^16` and
/// `2^17 + 3`, and the empty input, with `k` of 0, 1, `n/1000`, `n - 1`,
/// `n` and `n + 1`. Then the calls of a training loop, which keep `n` and
/// `k` and bring new data: for each of six shapes (`n` of 1,000, 4,097
/// and `2^16 + 1`), a sequence of nine inputs (new draws of one
/// distribution, the same values reversed, rotated and negated, scaled up
/// and down 64 times so that a kept threshold passes too many or too
/// few, heavy-tailed, ties) selected from in turn by a fresh instance and
/// by the instance that has selected from everything before; and, on
/// that instance, a heavy-tailed draw of `2^22 + 7` elements with `k` of
/// 1 and `n/1000`, then its values negated and rotated with `k = n/1000`
/// (new data of the same shape right after a call that kept a threshold,
/// which [`crate::Policy`] does at this size). Every answer goes to the oracle.
/// Last, NaN and infinity at the start, in the middle and at the end,
/// after a call that succeeded and on a fresh selector.
///
/// # Panics
/// On the first check that fails, with the selector's name, the input,
/// `k` and the oracle's text: this is a test.
///
/// ```
/// use backend_cpu::Cpu;
/// use sparse_select::BlockTopK;
/// use sparse_select::testing::{HostSelection, Promise, selector_suite_with_oracle};
/// use sparse_select::KeyOrder;
///
/// // SparDL's block top-k selects the exact top share of each block, not
/// // the top k of the whole input: its oracle, per block.
/// let blocks = BlockTopK { blocks: 4 };
/// let per_block = |x: &[f32], k: usize, s: &HostSelection<f32>| {
///     let (offsets, shares) = blocks.plan(x.len(), k).map_err(|e| e.to_string())?;
///     Promise::ExactTopK(KeyOrder::Abs).check_per_segment(x, &offsets, &shares, s)
/// };
/// let checked = selector_suite_with_oracle::<f32, _, _>(&Cpu, || blocks, per_block);
/// assert!(checked > 100);
/// ```
pub fn selector_suite_with_oracle<E, B, S>(
    b: &B,
    make: impl Fn() -> S,
    oracle: impl Fn(&[E], usize, &HostSelection<E>) -> std::result::Result<(), String>,
) -> usize
where
    B: Backend<E>,
    E: Element,
    S: Selector<B, E>,
{
    let mut sel = make();
    let suite = Suite {
        b,
        name: sel.name(),
        make,
        oracle,
        _selects: PhantomData,
    };
    suite.empty_input(&mut sel);
    let mut checked = 0;
    for (case, x) in cases::<E>()
        .into_iter()
        .filter(|(_, x)| x.len() <= 1 << 16)
        .chain([large_case(17)])
    {
        checked += suite.case(&mut sel, &case, &x);
    }
    checked += suite.same_shape_new_data(&mut sel);
    checked += suite.past_2_pow_22(&mut sel);
    checked + suite.non_finite(&mut sel)
}

/// A heavy-tailed input of `2^log2 + 3` elements (more than one pass of a
/// radix digit, more than one block of most kernels).
fn large_case<E: Element>(log2: u32) -> (String, Vec<E>) {
    let n = (1usize << log2) + 3;
    (
        format!("heavy n={n}"),
        dense_values::<E>(n, ValueDist::HeavyTailed { scale: 1.0 }, 77),
    )
}

thread_local! {
    /// The last heavy-tailed draw of `2^22 + 7` elements, of some element
    /// type: a test runs the suite on one selector after another, each
    /// with the same draw, which takes longer to make than to select from.
    static PAST_2_POW_22: std::cell::RefCell<Option<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(None) };
}

/// A heavy-tailed draw of `2^22 + 7` elements (made once per test thread
/// and element type).
fn past_2_pow_22_draw<E: Element>() -> Vec<E> {
    PAST_2_POW_22.with(|cell| {
        let mut kept = cell.borrow_mut();
        if let Some(x) = kept.as_ref().and_then(|b| b.downcast_ref::<Vec<E>>()) {
            return x.clone();
        }
        let x: Vec<E> = dense_values((1 << 22) + 7, ValueDist::HeavyTailed { scale: 1.0 }, 4221);
        *kept = Some(Box::new(x.clone()));
        x
    })
}

/// The shapes `(n, k)` a training loop would call with step after step.
const SHAPES: [(usize, usize); 6] = [
    (1000, 1),
    (1000, 10),
    (1000, 333),
    (4097, 40),
    (65_537, 1),
    (65_537, 655),
];

/// Nine inputs of `n` elements, as the steps of a training loop bring
/// them: new draws of one distribution (a kept threshold usually still
/// holds), the last one's values reversed, rotated and negated (every
/// threshold passes as many as before, so only the positions tell a stale
/// answer), scaled up and down 64 times (a kept threshold passes far too
/// many, then far too few), heavy-tailed, and ties.
fn steps<E: Element>(n: usize, seed: u64) -> Vec<(String, Vec<E>)> {
    let draw = |s: u64| dense_values::<E>(n, ValueDist::Normal { std: 1.0 }, s);
    let second = draw(seed + 1);
    let reversed: Vec<E> = second.iter().rev().copied().collect();
    let mut negated: Vec<E> = second.iter().map(|&v| -v).collect();
    negated.rotate_left(n / 3);
    let scaled = |f: f64| -> Vec<E> {
        let wide: Vec<f64> = second.iter().map(|v| v.to_f64_exact() * f).collect();
        convert(&wide)
    };
    let ties: Vec<f64> = (0..n).map(|i| ((i * 7 + n) % 5) as f64 - 2.0).collect();
    vec![
        ("draw 1".into(), draw(seed)),
        ("draw 2".into(), second.clone()),
        ("draw 2 reversed".into(), reversed),
        ("draw 2 negated and rotated".into(), negated),
        ("draw 2 times 64".into(), scaled(64.0)),
        ("draw 2 over 64".into(), scaled(1.0 / 64.0)),
        (
            "heavy-tailed draw".into(),
            dense_values(n, ValueDist::HeavyTailed { scale: 1.0 }, seed + 2),
        ),
        ("ties".into(), convert(&ties)),
        ("draw 2 again".into(), second),
    ]
}

/// The suite's settings, shared by its parts.
struct Suite<'a, B, E, S, M, O> {
    b: &'a B,
    name: String,
    make: M,
    oracle: O,
    _selects: PhantomData<fn(&mut S, &[E])>,
}

impl<B, E, S, M, O> Suite<'_, B, E, S, M, O>
where
    B: Backend<E>,
    E: Element,
    S: Selector<B, E>,
    M: Fn() -> S,
    O: Fn(&[E], usize, &HostSelection<E>) -> std::result::Result<(), String>,
{
    /// One selection, downloaded.
    fn call(&self, s: &mut S, x: &B::Buffer<E>, k: usize) -> Result<HostSelection<E>> {
        let sel = s.select(self.b, x, k)?;
        HostSelection::download(self.b, &sel)
    }

    /// One selection of `x` (uploaded as `buf`), checked: the basic
    /// contract, then the oracle.
    fn check(
        &self,
        what: &str,
        s: &mut S,
        (x, buf): (&[E], &B::Buffer<E>),
        k: usize,
    ) -> HostSelection<E> {
        let got = self
            .call(s, buf, k)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        check_selection(what, x, &got);
        match k {
            0 => assert_eq!(got.count, 0, "{what}: k = 0 selects nothing"),
            k if k == x.len() => {
                assert_eq!(got.count, k, "{what}: k = n selects everything");
            }
            _ => {}
        }
        if let Err(e) = (self.oracle)(x, k, &got) {
            panic!("{what}: {e}");
        }
        got
    }

    fn upload(&self, x: &[E]) -> B::Buffer<E> {
        self.b.upload(x).expect("upload")
    }

    /// The empty input: nothing at `k = 0`, an error at `k = 1`.
    fn empty_input(&self, sel: &mut S) {
        let name = &self.name;
        let none = self.upload(&[]);
        let empty = self
            .call(sel, &none, 0)
            .unwrap_or_else(|e| panic!("{name}: empty input, k = 0: {e}"));
        assert_eq!(empty.count, 0, "{name}: empty input selects nothing");
        assert!(
            empty.indices.is_empty() && empty.values.is_empty(),
            "{name}: empty input"
        );
        assert_eq!(
            self.call(sel, &none, 1).err(),
            Some(Error::KOutOfRange { k: 1, len: 0 }),
            "{name}: k = 1 of the empty input"
        );
    }

    /// One input, every `k`: a fresh selector twice (the same selection),
    /// then the instance that has selected from every input before, twice
    /// (a selector that keeps state may choose otherwise, within its
    /// promise); `k = n + 1` is an error.
    fn case(&self, sel: &mut S, case: &str, x: &[E]) -> usize {
        let (n, name) = (x.len(), &self.name);
        let buf = self.upload(x);
        let ks = super::ks(n);
        for &k in &ks {
            let what = format!("{name}: {case}, k = {k}");
            let s = self.check(&what, &mut (self.make)(), (x, &buf), k);
            let fresh = self
                .call(&mut (self.make)(), &buf, k)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                fresh.indices, s.indices,
                "{what}: a fresh selector selects otherwise"
            );
            self.check(
                &format!("{what}, a selector called before"),
                sel,
                (x, &buf),
                k,
            );
            self.check(&format!("{what}, a second call"), sel, (x, &buf), k);
        }
        assert_eq!(
            self.call(sel, &buf, n + 1).err(),
            Some(Error::KOutOfRange { k: n + 1, len: n }),
            "{name}: {case}, k = n + 1"
        );
        ks.len()
    }

    /// The calls of a training loop: for each shape of [`SHAPES`], the
    /// inputs of [`steps`] in turn, each selected from by a fresh instance
    /// (which has seen only this shape's earlier steps) and by `sel` (which
    /// has seen everything before).
    fn same_shape_new_data(&self, sel: &mut S) -> usize {
        let mut checked = 0;
        for (j, &(n, k)) in SHAPES.iter().enumerate() {
            let mut fresh = (self.make)();
            for (step, (case, x)) in steps::<E>(n, 1000 + 10 * j as u64).iter().enumerate() {
                let buf = self.upload(x);
                for (who, s) in [
                    ("an instance of this shape", &mut fresh),
                    ("the shared instance", &mut *sel),
                ] {
                    let what = format!(
                        "{}: step {} at n = {n}, k = {k} ({case}), {who}",
                        self.name,
                        step + 1
                    );
                    self.check(&what, s, (x, &buf), k);
                    checked += 1;
                }
            }
        }
        checked
    }

    /// Two inputs of `2^22 + 7` elements, a heavy-tailed draw and its
    /// values negated and rotated by `n/3`, on `sel`: the draw with `k = 1`
    /// and `k = n/1000`, then the other input with `k = n/1000`, the same
    /// shape with new data right after a call that kept a threshold (the
    /// policy keeps one at this size), past every kernel's single-block
    /// paths. Three calls: a selector is slow here on software Vulkan.
    fn past_2_pow_22(&self, sel: &mut S) -> usize {
        let draw = past_2_pow_22_draw::<E>();
        let n = draw.len();
        // The same magnitudes elsewhere, signs flipped: a kept threshold
        // passes as many as before, and only the positions tell a stale
        // answer.
        let mut other: Vec<E> = draw.iter().map(|&v| -v).collect();
        other.rotate_left(n / 3);
        let inputs = [
            ("a heavy-tailed draw", draw),
            ("the draw negated and rotated", other),
        ];
        let mut calls = 0;
        for (j, (case, x)) in inputs.iter().enumerate() {
            let buf = self.upload(x);
            let ks: &[usize] = if j == 0 { &[1, n / 1000] } else { &[n / 1000] };
            for &k in ks {
                let what = format!("{}: {case} of n = {n}, k = {k}", self.name);
                self.check(&what, sel, (x, &buf), k);
                calls += 1;
            }
        }
        calls
    }

    /// NaN and infinity, each first at the start, in the middle and at the
    /// end, for every k, on the instance that just selected from a good
    /// input (a kept threshold must not skip the check) and on a fresh one.
    fn non_finite(&self, sel: &mut S) -> usize {
        let name = &self.name;
        let good: Vec<E> = (0..1000)
            .map(|i| E::from_f64_nearest(f64::from(i % 97) - 48.0))
            .collect();
        let good_buf = self.upload(&good);
        let mut checked = 0;
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
                let bad_buf = self.upload(&x);
                for k in [0, 1, 10, 999, 1000] {
                    let what = format!("{name}: {bad:?} at {at}, k = {k}");
                    self.call(sel, &good_buf, k.min(999))
                        .unwrap_or_else(|e| panic!("{what}: good input: {e}"));
                    for s in [&mut *sel, &mut (self.make)()] {
                        match self.call(s, &bad_buf, k) {
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
}

/// The basic contract of a selection: indices increasing and in range,
/// values `x` at them bit for bit, the count their number.
pub(super) fn check_selection<E: Element>(what: &str, x: &[E], s: &HostSelection<E>) {
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
