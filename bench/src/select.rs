//! `sparse-bench select`: every selection algorithm on one dense residual,
//! with three baselines measured in the same run: an exact top-k through
//! `select_nth_unstable_by` (the standard library's introselect), a plain
//! copy of the array into a preallocated buffer (the host's memory floor),
//! and one read of the array on the backend itself, `max_abs` of the
//! uploaded buffer with its scalar brought back (the backend's floor: every
//! selector reads the array at least once and returns to the host, and on a
//! GPU the host's copy says nothing about the device's memory).

use crate::{Progress, time_median};
use sparse_core::generate::{ValueDist, dense_values};
use sparse_core::{Backend, Result, abs_key};
use sparse_select::{
    BlockTopK, BucketTopK, Policy, RadixTopK, SampledThreshold, Selector, ThresholdBinarySearch,
    ThresholdReuse, TrimmedTopK,
};
use std::time::Duration;

/// Parameters of the select benchmark (`sparse-bench select`'s flags).
#[derive(Debug, Clone, clap::Args)]
pub struct SelectArgs {
    /// Elements in the residual.
    #[arg(long, default_value_t = 1 << 20)]
    pub n: usize,
    /// Fraction to select, in (0, 1]: `k = round(density * n)`, at least 1.
    #[arg(long, default_value_t = 0.001)]
    pub density: f64,
    /// Seed of the residual.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Minimum measuring time per algorithm, in milliseconds.
    #[arg(long = "min-ms", value_name = "MS", default_value = "200", value_parser = crate::parse_millis)]
    pub min_time: Duration,
}

/// One row of the select table.
#[derive(Debug, Clone)]
pub struct SelectRow {
    /// Algorithm.
    pub algo: String,
    /// Elements selected by the first call on a fresh selector.
    pub selected: usize,
    /// Fraction of the exact top-k that the first call selected.
    pub recall: f64,
    /// Median milliseconds per call, over the calls after the first (a
    /// stateful selector keeps its state across them, as in training).
    pub ms: f64,
    /// Median ms of copying the array, measured just before this row (the
    /// row's own floor: the machine's speed drifts over a run).
    pub copy_ms: f64,
    /// The device work of the first call (the selection alone, not the
    /// download of what it selected), where the backend counts it
    /// ([`run_counted`]).
    pub work: Option<CallWork>,
}

/// A kernel backend's counts of one call: kernel launches, host round
/// trips (readbacks the host waits on) and passes over the input (kernels
/// that read the whole array), as `backend_cuda::Work` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallWork {
    /// Kernels launched.
    pub launches: u64,
    /// Readbacks the host waited on.
    pub round_trips: u64,
    /// Kernels that read the whole input.
    pub passes: u64,
}

impl CallWork {
    /// The counts between `earlier` and this reading of cumulative counters.
    #[must_use]
    pub fn since(&self, earlier: &CallWork) -> CallWork {
        CallWork {
            launches: self.launches.saturating_sub(earlier.launches),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            passes: self.passes.saturating_sub(earlier.passes),
        }
    }
}

/// The result of a run: rows plus the baselines.
#[derive(Debug, Clone)]
pub struct SelectReport {
    /// Elements.
    pub n: usize,
    /// Target count.
    pub k: usize,
    /// One row per algorithm.
    pub rows: Vec<SelectRow>,
    /// Median ms of copying the array: the median of the rows' own copies.
    pub copy_ms: f64,
    /// Median ms of an exact top-k with `select_nth_unstable_by`.
    pub nth_ms: f64,
    /// Median ms of one read of the array on the backend (`max_abs` of the
    /// uploaded buffer, its result downloaded): the backend's own floor.
    pub read_ms: f64,
}

/// The exact top-k by `select_nth_unstable_by` on `(|x| key, index)`, the
/// baseline the radix select must beat; indices sorted.
pub fn nth_topk(x: &[f32], k: usize) -> Vec<u32> {
    let mut order: Vec<(u64, u32)> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| (abs_key(v), i as u32))
        .collect();
    if k > 0 && k < order.len() {
        order.select_nth_unstable_by(k - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    let mut idx: Vec<u32> = order[..k].iter().map(|p| p.1).collect();
    idx.sort_unstable();
    idx
}

/// Every selector, by name, for backend `B`.
pub fn selectors<B: Backend<f32>>() -> Vec<Box<dyn Selector<B, f32>>> {
    vec![
        Box::new(RadixTopK::magnitude()),
        Box::new(TrimmedTopK::default()),
        Box::new(ThresholdBinarySearch::default()),
        Box::new(ThresholdReuse::<f32>::default()),
        Box::new(SampledThreshold::default()),
        Box::new(BlockTopK { blocks: 8 }),
        Box::new(BucketTopK::default()),
        Box::new(Policy::<f32>::new(false)),
    ]
}

/// Runs every selector on backend `b`.
///
/// # Errors
/// Invalid parameters or backend errors.
pub fn run<B: Backend<f32>>(b: &B, a: &SelectArgs) -> Result<SelectReport> {
    run_counted(b, a, None)
}

/// [`run`], with `work` reading the backend's cumulative counters
/// ([`CallWork`]): each row then carries the counts of its first call.
///
/// # Errors
/// As [`run`].
pub fn run_counted<B: Backend<f32>>(
    b: &B,
    a: &SelectArgs,
    work: Option<&dyn Fn() -> CallWork>,
) -> Result<SelectReport> {
    if !(a.density > 0.0 && a.density <= 1.0) {
        return Err(sparse_core::Error::invalid(
            "density",
            format!("{} not in (0, 1]", a.density),
        ));
    }
    let x: Vec<f32> = dense_values(a.n, ValueDist::Normal { std: 1.0 }, a.seed);
    let k = ((a.density * a.n as f64).round() as usize).clamp(1, a.n);
    let exact = nth_topk(&x, k);
    let mut in_exact = vec![false; a.n];
    for &i in &exact {
        in_exact[i as usize] = true;
    }
    // The memory floor: one read and one write of the array, into a buffer
    // allocated (and faulted in) beforehand.
    let mut dst = x.clone();
    let mut copy = || {
        ms(time_median(3, a.min_time, || {
            dst.copy_from_slice(&x);
            dst[0]
        }))
    };
    let nth_ms = ms(time_median(3, a.min_time, || nth_topk(&x, k)));
    let buf = b.upload(&x)?;
    let read_ms = ms(time_fallible(a.min_time, || b.max_abs(&buf))?);
    let mut sels = selectors::<B>();
    let mut bar = Progress::new(sels.len() as u64, "selectors");
    let mut rows = Vec::new();
    for s in sels.iter_mut() {
        // The row's selection is the first call's on a fresh selector, so
        // it does not depend on how many timed calls follow (stateful
        // selectors, the threshold reuse and the sampled threshold's draws,
        // would otherwise report whichever call came last).
        let copy_ms = copy();
        let before = work.map(|w| w());
        let sel = s.select(b, &buf, k)?;
        let call = work.zip(before).map(|(w, before)| w().since(&before));
        let first = b.download(&sel.indices)?;
        let recall = first.iter().filter(|&&i| in_exact[i as usize]).count() as f64 / k as f64;
        let t = time_fallible(a.min_time, || {
            s.select(b, &buf, k)
                .and_then(|sel| b.download(&sel.indices))
        })?;
        rows.push(SelectRow {
            algo: s.name(),
            selected: first.len(),
            recall,
            ms: ms(t),
            copy_ms,
            work: call,
        });
        bar.inc();
    }
    bar.finish();
    let mut copies: Vec<f64> = rows.iter().map(|r| r.copy_ms).collect();
    copies.sort_by(f64::total_cmp);
    let copy_ms = copies.get(copies.len() / 2).copied().unwrap_or(f64::NAN);
    Ok(SelectReport {
        n: a.n,
        k,
        rows,
        copy_ms,
        nth_ms,
        read_ms,
    })
}

/// [`time_median`] of at least 5 calls of a fallible `f`: the first error
/// any call returned, if one did.
fn time_fallible<T>(min_time: Duration, mut f: impl FnMut() -> Result<T>) -> Result<Duration> {
    let mut failed = None;
    let t = time_median(5, min_time, || {
        if let Err(e) = f() {
            failed.get_or_insert(e);
        }
    });
    failed.map_or(Ok(t), Err)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
