//! [`SelectOps`]: histograms, compaction and exact top-k over the radix
//! engine (`radix.rs`).

use super::air::Search;
use super::tiles;
use crate::kernels::air::{TAKE_ALL, TAKE_NONE};
use crate::kernels::histogram::{self, DigitArgs};
use crate::kernels::{ABS, REVERSED, SIGNED, cubes_for, gather, grid, order_code, short};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::backend::check_len;
use sparse_core::backend::{
    bucket_plan, check_digit, check_k, check_rank, check_sample, check_segments, first_non_finite,
};
use sparse_core::{
    Above, Digit, Error, Extreme, Feedback, KeyOrder, Result, SelectOps, Selected, abs_key,
};

impl<R: Runtime> SelectOps<f32> for CubeBackend<R> {
    fn digit_histogram(&self, x: &CubeBuffer<f32>, order: KeyOrder, d: Digit) -> Result<Vec<u32>> {
        check_digit::<f32>(d)?;
        let bins = 1usize << d.digit_bits;
        if x.len == 0 {
            return Ok(vec![0; bins]);
        }
        let top = d.shift + d.digit_bits;
        // A prefix that cannot occur above the digit matches nothing (the
        // pass still counts NaNs).
        let (hi_mask, want) = if top >= 32 {
            (0, [u32::from(d.prefix == 0), 0])
        } else if d.prefix < 1u64 << (32 - top) {
            (u32::MAX << top, [1, (d.prefix as u32) << top])
        } else {
            (u32::MAX << top, [0, 0])
        };
        let bits = x.bits();
        let tiles = self.put(&tiles(&[0, x.len], |_| true));
        let hist = self.zeroed::<u32>(bins + 1);
        let want = self.put(&want);
        let a = DigitArgs {
            x: &bits,
            tiles: &tiles,
            want: &want,
            hist: &hist,
            hi_mask,
            shift: d.shift,
            bits: d.digit_bits,
            order: order_code(order),
        };
        self.launch(Reads::Whole, |c| histogram::launch_digit_histogram(c, &a));
        let mut hist = self.get(&hist)?;
        if hist[bins] > 0 {
            return Err(self.first_nan(&bits));
        }
        hist.truncate(bins);
        Ok(hist)
    }
    fn compact_key(
        &self,
        x: &CubeBuffer<f32>,
        order: KeyOrder,
        key: u64,
        take_equal: usize,
    ) -> Result<Selected<Self, f32>> {
        // No non-NaN key reaches u32::MAX: a larger key selects nothing.
        let (key, take) = if key > u32::MAX as u64 {
            (u32::MAX, 0)
        } else {
            (key as u32, take_equal.min(u32::MAX as usize) as u32)
        };
        self.compact_one(x, order_code(order), key, take)
    }
    fn topk_abs_segmented(
        &self,
        x: &CubeBuffer<f32>,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, f32>> {
        check_segments(offsets, ks, x.len)?;
        self.topk(x, ABS, offsets, ks)
    }
    /// On the device where buckets hold at most 2,048: their bounds laid
    /// out by a kernel, then the short select (one pass, one round trip,
    /// nothing uploaded); longer buckets as any segments.
    fn topk_abs_buckets(
        &self,
        x: &CubeBuffer<f32>,
        bucket: usize,
        per: usize,
    ) -> Result<Selected<Self, f32>> {
        if bucket == 0 {
            return Err(Error::invalid("bucket", "must be at least 1"));
        }
        if bucket > short::SHORT || u32::try_from(x.len).is_err() {
            let (offsets, ks) = bucket_plan(x.len, bucket, per)?;
            return self.topk_abs_segmented(x, &offsets, &ks);
        }
        self.bucket_topk(&x.bits(), ABS, bucket, per)
    }
    /// The top-k pass counts the infinities on the way: no check of its
    /// own, still three passes and one round trip.
    fn topk_finite(
        &self,
        x: &CubeBuffer<f32>,
        order: KeyOrder,
        k: usize,
    ) -> Result<Selected<Self, f32>> {
        check_k(k, x.len)?;
        let (s, infinite) = self.air_topk(x, order_code(order), k)?;
        if infinite > 0 {
            return Err(first_non_finite(self, x));
        }
        Ok(s)
    }
    /// On the device: the search of the exact top-k with every copy of
    /// the k-th key taken, the selection's length read back with the
    /// state words: three passes, one round trip.
    fn topk_ties(
        &self,
        x: &CubeBuffer<f32>,
        order: KeyOrder,
        k: usize,
    ) -> Result<(Selected<Self, f32>, u64)> {
        check_k(k, x.len)?;
        if k == 0 {
            return Err(Error::invalid(
                "k",
                "topk_ties takes every element at least the k-th largest: k must be at least 1",
            ));
        }
        let bits = x.bits();
        let search = Search {
            input: &bits,
            reads: Reads::Whole,
            k,
            rule: TAKE_ALL,
            counted: None,
        };
        let (s, found) = self.air_select(&bits, order_code(order), &search)?;
        Ok((s, u64::from(found.key)))
    }
    /// On the device: the sample's key found by the top-k's search (over
    /// the sample: no pass over `x`), then one collection pass over `x`
    /// strictly above it that counts NaNs and infinities too, one round
    /// trip (the state words), and the merge where the count fits `cap`.
    fn compact_above_kth_of(
        &self,
        x: &CubeBuffer<f32>,
        sample: &CubeBuffer<f32>,
        rank: usize,
        cap: usize,
    ) -> Result<Above<Self, f32>> {
        check_rank(rank, sample.len)?;
        let (bits, sample) = (x.bits(), sample.bits());
        let search = Search {
            input: &sample,
            reads: Reads::Part,
            k: rank,
            rule: TAKE_NONE,
            counted: None,
        };
        let c = self.air_collect(&bits, ABS, &search)?;
        if c.found.infinite > 0 {
            return Err(first_non_finite(self, x));
        }
        let count = c.found.count;
        let selected = if count <= cap {
            Some(self.air_emit(&bits, &c)?)
        } else {
            None
        };
        Ok(Above {
            key: u64::from(c.found.key),
            count,
            selected,
        })
    }
    /// On the device: the accumulation and the first digit's histogram in
    /// one pass, the top-k's second histogram and collection passes, one
    /// round trip, and the merge that zeroes the selected entries.
    fn accumulate_topk(
        &self,
        v: &mut CubeBuffer<f32>,
        g: &CubeBuffer<f32>,
        feedback: Feedback<'_, Self, f32>,
        k: usize,
    ) -> Result<Selected<Self, f32>> {
        check_len(
            "accumulate_topk: gradient g against residual v",
            v.len,
            g.len,
        )?;
        let (u, gain) = match feedback {
            Feedback::Plain { gain } => (None, gain),
            Feedback::Momentum { u, m } => {
                check_len(
                    "accumulate_topk: momentum u against residual v",
                    v.len,
                    u.len,
                )?;
                (Some((&*u, m)), 1.0)
            }
        };
        check_k(k, v.len)?;
        self.air_feedback(v, g, u, gain, k)
    }
    fn gather(&self, x: &CubeBuffer<f32>, indices: &CubeBuffer<u32>) -> Result<CubeBuffer<f32>> {
        let out = self.uninit::<u32>(indices.len);
        if indices.len > 0 {
            self.launch(Reads::Part, |c| {
                gather::launch_gather(
                    c,
                    grid(cubes_for(indices.len)),
                    &x.bits(),
                    indices,
                    &out,
                    &self.fault(),
                )
            });
        }
        Ok(out.floats())
    }
    /// On the device: the positions drawn in the gather kernel (one
    /// launch, no upload), in `j`'s order.
    fn gather_sampled(&self, x: &CubeBuffer<f32>, seed: u64, m: usize) -> Result<CubeBuffer<f32>> {
        check_sample(x.len, m)?;
        let out = self.uninit::<u32>(m);
        if m > 0 {
            let keys = sparse_core::CounterRng::new(seed).keys();
            self.launch(Reads::Part, |c| {
                gather::launch_gather_sampled(c, grid(cubes_for(m)), &x.bits(), &out, keys)
            });
        }
        Ok(out.floats())
    }
    fn compact_above(&self, x: &CubeBuffer<f32>, t: f32) -> Result<Selected<Self, f32>> {
        let (key, take) = if t.is_nan() {
            (u32::MAX, 0)
        } else if t < 0.0 {
            (0, u32::MAX)
        } else {
            (abs_key(t) as u32, 0)
        };
        self.compact_one(x, ABS, key, take)
    }
    fn topk_abs(&self, x: &CubeBuffer<f32>, k: usize) -> Result<Selected<Self, f32>> {
        check_k(k, x.len)?;
        Ok(self.air_topk(x, ABS, k)?.0)
    }
    fn topk_signed(
        &self,
        x: &CubeBuffer<f32>,
        k: usize,
        end: Extreme,
    ) -> Result<Selected<Self, f32>> {
        check_k(k, x.len)?;
        let order = match end {
            Extreme::Largest => SIGNED,
            Extreme::Smallest => REVERSED,
        };
        Ok(self.air_topk(x, order, k)?.0)
    }
}
