//! Threshold-based selection: RedSync's threshold binary search (Alg. 3),
//! its reuse across iterations (Alg. 5), and DGC's sampled threshold.

use crate::radix::in_input;
use crate::{Selection, Selector, check_k, empty, selection, stats, to_threshold};
use sparse_core::backend::{check_finite_buffer, first_non_finite};
use sparse_core::state::{Scope, State};
use sparse_core::{Backend, Element, Error, KeyOrder, Result};

/// The exact fallback: every element whose magnitude is at least the k-th
/// largest. It holds at least k elements, at most 2k unless ties at the
/// k-th magnitude make that impossible, and then it is the fewest elements
/// above any threshold that still holds k. One backend primitive
/// ([`sparse_core::SelectOps::topk_ties`]: on `backend-cuda` three passes
/// and one round trip).
fn at_least_kth<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    k: usize,
) -> Result<Selection<B, E>> {
    let (s, key) = b.topk_ties(x, KeyOrder::Abs, k)?;
    // Every selected |x| is >= the k-th magnitude v; the largest
    // representable value below v is a strict threshold.
    let t = if key == 0 {
        -1.0
    } else {
        E::from_bits_u64(key - 1).to_f64_exact()
    };
    Ok(selection(b, s, Some(t)))
}

/// RedSync's threshold binary search (Alg. 3): bisect `ratio` in `[0, 1]`
/// for a threshold `mean + ratio (max - mean)` of `|x|` that between k and
/// 2k elements pass; stop when the interval is narrower than `epsilon`.
///
/// The listing assigns the threshold to the ratio bounds and tests
/// `nnz < k/2`; this bisects the ratio and moves the bounds by the target
/// band `[k, 2k]`. If the search ends without a threshold in the band (the
/// band lies below the mean, or ties), the exact fallback selects every
/// element at least as large as the k-th: never fewer than k, never more
/// than 2k unless ties force it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdBinarySearch {
    /// Stop when `r - l <= epsilon`; must be above 0 (a call with any
    /// other value is [`Error::InvalidParameter`]).
    pub epsilon: f64,
}

impl Default for ThresholdBinarySearch {
    fn default() -> Self {
        Self { epsilon: 1e-3 }
    }
}

impl ThresholdBinarySearch {
    /// The threshold found (`Some`, with its count) or `None`.
    fn search<B: Backend<E>, E: Element>(
        &self,
        b: &B,
        x: &B::Buffer<E>,
        k: usize,
        max: f64,
        mean: f64,
    ) -> Result<Option<(E, usize)>> {
        let (mut l, mut r) = (0.0f64, 1.0f64);
        while r - l > self.epsilon {
            let ratio = l + (r - l) / 2.0;
            let t = to_threshold::<E>(mean + ratio * (max - mean));
            let c = b.count_above(x, t)?;
            if c >= k && c <= 2 * k {
                return Ok(Some((t, c)));
            } else if c < k {
                r = ratio;
            } else {
                l = ratio;
            }
        }
        Ok(None)
    }

    fn run<B: Backend<E>, E: Element>(
        &self,
        b: &B,
        x: &B::Buffer<E>,
        k: usize,
    ) -> Result<(Selection<B, E>, Option<E>)> {
        if self.epsilon.is_nan() || self.epsilon <= 0.0 {
            // A bisection to width 0 would never end.
            return Err(Error::invalid(
                "epsilon",
                format!("{} must be above 0", self.epsilon),
            ));
        }
        check_k(b, x, k)?;
        let (max, mean) = stats(b, x)?;
        if k == 0 {
            return Ok((empty(b)?, None));
        }
        match self.search(b, x, k, max, mean)? {
            Some((t, _)) => Ok((
                selection(b, b.compact_above(x, t)?, Some(t.to_f64_exact())),
                Some(t),
            )),
            None => Ok((at_least_kth(b, x, k)?, None)),
        }
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for ThresholdBinarySearch {
    fn name(&self) -> String {
        "threshold_bsearch".into()
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        sparse_core::backend::resolve_non_finite_in(
            b,
            x,
            (|| -> Result<Selection<B, E>> { Ok(self.run(b, x, k)?.0) })(),
        )
    }
}

/// Threshold binary search whose threshold is reused for the next calls
/// (RedSync Alg. 5: a search every `interval` calls, default 5). A reused
/// threshold costs one count: if between k and 2k elements still pass, they
/// are selected; otherwise the search runs again and the interval restarts.
#[derive(Debug, Clone)]
pub struct ThresholdReuse<E> {
    /// The search.
    pub search: ThresholdBinarySearch,
    /// Calls per search.
    pub interval: usize,
    threshold: Option<E>,
    since_search: usize,
    /// Searches run so far.
    pub searches: usize,
    /// Calls served by a reused threshold.
    pub reuses: usize,
}

impl<E> ThresholdReuse<E> {
    /// Reuse for `interval` calls (1 disables reuse).
    pub fn new(interval: usize) -> Self {
        Self {
            search: ThresholdBinarySearch::default(),
            interval: interval.max(1),
            threshold: None,
            since_search: 0,
            searches: 0,
            reuses: 0,
        }
    }
}

impl<E: Element> ThresholdReuse<E> {
    /// The state's kind, without the element type ([`ThresholdReuse::kind`]).
    pub const KIND: &'static str = "sparse_select::ThresholdReuse";

    /// The state's kind with the element type (the threshold is `E`'s
    /// bits): `sparse_select::ThresholdReuse<f32>`.
    pub fn kind() -> String {
        format!("{}<{}>", Self::KIND, E::NAME)
    }

    /// The state ([`Selector::save_state`]): the reused threshold and the
    /// calls since its search (both this rank's: [`Scope::Local`]), the
    /// counters, and the interval (a setting, checked on load).
    pub fn state(&self) -> State {
        let mut s = State::new(Self::kind(), 1);
        s.put_u64("interval", Scope::Shared, self.interval as u64)
            .put_opt_u64(
                "threshold",
                Scope::Local,
                self.threshold.map(E::to_bits_u64),
            )
            .put_u64("since_search", Scope::Local, self.since_search as u64)
            .put_u64("searches", Scope::Local, self.searches as u64)
            .put_u64("reuses", Scope::Local, self.reuses as u64);
        s
    }

    /// Restores [`ThresholdReuse::state`]'s state.
    ///
    /// # Errors
    /// As [`Selector::load_state`]; an interval that differs from this
    /// selector's.
    pub fn load(&mut self, s: &State) -> Result<()> {
        s.expect(&Self::kind(), 1)?;
        let interval = s.u64("interval")?;
        if interval != self.interval as u64 {
            return Err(Error::corrupt(
                "training state",
                format!(
                    "{}: the saved reuse interval is {interval}, this selector's {}",
                    Self::KIND,
                    self.interval
                ),
            ));
        }
        let count = |name: &str| -> Result<usize> {
            usize::try_from(s.local_u64(name, 0)?).map_err(|_| {
                Error::corrupt(
                    "training state",
                    format!("{}: {name} does not fit", Self::KIND),
                )
            })
        };
        let threshold = s.local_opt_u64("threshold")?.map(E::from_bits_u64);
        let (since_search, searches, reuses) =
            (count("since_search")?, count("searches")?, count("reuses")?);
        self.threshold = threshold;
        self.since_search = since_search;
        self.searches = searches;
        self.reuses = reuses;
        Ok(())
    }
}

impl<E> Default for ThresholdReuse<E> {
    fn default() -> Self {
        Self::new(5)
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for ThresholdReuse<E> {
    fn name(&self) -> String {
        "threshold_bsearch_reuse".into()
    }
    fn save_state(&self) -> Result<State> {
        Ok(self.state())
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        self.load(s)
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        sparse_core::backend::resolve_non_finite_in(
            b,
            x,
            (|| -> Result<Selection<B, E>> {
                if let Some(t) = self.threshold
                    && self.since_search < self.interval
                    && k > 0
                {
                    check_k(b, x, k)?;
                    let c = b.count_above(x, t)?;
                    if c >= k && c <= 2 * k {
                        // `count_above` rejects NaN; an infinity passes the finite
                        // threshold, so it is among the compacted values.
                        let passed = b.compact_above(x, t)?;
                        if b.max_abs(&passed.values)?.is_infinite() {
                            return Err(first_non_finite(b, x));
                        }
                        self.since_search = self.since_search.saturating_add(1);
                        self.reuses = self.reuses.saturating_add(1);
                        return Ok(selection(b, passed, Some(t.to_f64_exact())));
                    }
                }
                let (s, t) = self.search.run(b, x, k)?;
                self.searches = self.searches.saturating_add(1);
                self.threshold = t;
                self.since_search = 1;
                Ok(s)
            })(),
        )
    }
}

/// DGC's sampled threshold (Lin et al., discussed in RedSync sec. 5.2.2):
/// the threshold is the `r`-th largest magnitude of a random sample of
/// `m = rate n` elements (at least `min_sample`), with `r = e + 2 sqrt(e) +
/// 1` for the expected rank `e = k m / n` of the k-th largest (DGC takes
/// `e` itself, so that half the calls pass fewer than k). If more than 2k
/// elements pass it, the top k of those are selected exactly (DGC's second
/// selection on the already-selected set, which is the exact top k of the
/// input); if fewer than k pass, the exact fallback of
/// [`ThresholdBinarySearch`] runs. Cost: one compaction (which also finds
/// NaN and infinity) and work on the sample
/// ([`sparse_core::SelectOps::compact_above_kth_of`]), plus an exact
/// top-k where the threshold missed. On `backend-cuda`: one pass over the
/// input and one host round trip, two round trips where it missed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampledThreshold {
    /// Sampled fraction of the input (DGC: 0.1% to 1%), in `(0, 1]`.
    pub rate: f64,
    /// Smallest sample, at least 1. A call with `rate` or `min_sample`
    /// out of range is [`Error::InvalidParameter`].
    pub min_sample: usize,
    /// Seed of the sample positions; advanced on every call.
    pub seed: u64,
    /// Calls that needed the exact re-selection after an overshoot.
    pub reselections: usize,
}

impl Default for SampledThreshold {
    fn default() -> Self {
        Self {
            rate: 0.01,
            min_sample: 1024,
            seed: 0x5eed,
            reselections: 0,
        }
    }
}

impl SampledThreshold {
    /// The state's kind.
    pub const KIND: &'static str = "sparse_select::SampledThreshold";
}

impl<B: Backend<E>, E: Element> Selector<B, E> for SampledThreshold {
    fn name(&self) -> String {
        "sampled_threshold".into()
    }
    /// The sample's seed, advanced alike on every rank that started from
    /// the same value ([`Scope::Shared`]), the re-selection counter, and
    /// the settings `rate` and `min_sample` (checked on load).
    fn save_state(&self) -> Result<State> {
        let mut s = State::new(Self::KIND, 1);
        s.put_u64("seed", Scope::Shared, self.seed)
            .put_u64("reselections", Scope::Local, self.reselections as u64)
            .put_f64("rate", Scope::Shared, self.rate)
            .put_u64("min_sample", Scope::Shared, self.min_sample as u64);
        Ok(s)
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect(Self::KIND, 1)?;
        let (rate, min_sample) = (s.f64("rate")?, s.u64("min_sample")?);
        if rate.to_bits() != self.rate.to_bits() || min_sample != self.min_sample as u64 {
            return Err(Error::corrupt(
                "training state",
                format!(
                    "{}: saved with rate {rate} and min_sample {min_sample}, this selector has {} and {}",
                    Self::KIND,
                    self.rate,
                    self.min_sample
                ),
            ));
        }
        let seed = s.u64("seed")?;
        let reselections = usize::try_from(s.local_u64("reselections", 0)?)
            .map_err(|_| Error::corrupt("training state", "reselections does not fit"))?;
        self.seed = seed;
        self.reselections = reselections;
        Ok(())
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        sparse_core::backend::resolve_non_finite_in(
            b,
            x,
            (|| -> Result<Selection<B, E>> {
                if !(self.rate > 0.0 && self.rate <= 1.0) || self.min_sample == 0 {
                    return Err(Error::invalid(
                        "rate, min_sample",
                        format!(
                            "rate {} not in (0, 1] or min_sample {} not at least 1",
                            self.rate, self.min_sample
                        ),
                    ));
                }
                let n = check_k(b, x, k)?;
                if k == 0 {
                    check_finite_buffer(b, x)?;
                    return empty(b);
                }
                let m = ((self.rate * n as f64).ceil() as usize)
                    .max(self.min_sample)
                    .min(n);
                // The sample's positions are drawn where the backend
                // gathers (on the device for `backend-cuda`: no host work
                // of m draws and a sort, no upload).
                let seed = self.seed;
                self.seed = self.seed.wrapping_add(1);
                let sample = b.gather_sampled(x, seed, m)?;
                // The expected rank of the k-th largest in the sample, plus two of
                // its standard deviations and one: fewer than k then pass (and the
                // exact fallback runs) in about 2% of calls, not in half of them.
                let expected = (k as f64 * m as f64 / n as f64).max(1.0);
                let ks = ((expected + 2.0 * expected.sqrt()).ceil() as usize + 1).min(m);
                // Strictly above the sampled k-th magnitude, kept where at most
                // 2k pass: one backend primitive, which checks the input's
                // finiteness on the way (on `backend-cuda` the key stays on the
                // device: one pass over `x`, one round trip).
                let above = b
                    .compact_above_kth_of(x, &sample, ks, k.saturating_mul(2))
                    .map_err(|e| in_input(b, x, e))?;
                let t = E::from_bits_u64(above.key);
                let passed = match above.selected {
                    Some(passed) if above.count >= k => passed,
                    Some(_) => return at_least_kth(b, x, k),
                    None => {
                        // DGC's second selection: the top k of those that passed,
                        // which are the top k of `x` (every element that passed is
                        // above every one that did not).
                        self.reselections += 1;
                        return Ok(selection(b, b.topk_abs(x, k)?, None));
                    }
                };
                Ok(selection(b, passed, Some(t.to_f64_exact())))
            })(),
        )
    }
}
