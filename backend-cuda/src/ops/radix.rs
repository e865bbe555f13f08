//! The select engine the selection primitives share: one digit's
//! histogram per segment, the MSD radix walk to each segment's k-th key, and
//! the two-pass compaction that takes the keys above it and its tie quota.

use super::tiles;
use crate::kernels::{compact, count, grid, histogram, short};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{Result, Selected};

/// Radix digits of the select: 8 bits from the top of the 32-bit key.
const DIGIT: u32 = 8;

impl<R: Runtime> CubeBackend<R> {
    /// One digit's histogram per segment over `tiles`: rows of `2^bits + 1`
    /// entries (the last counts NaNs).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn histogram(
        &self,
        x: &CubeBuffer<u32>,
        tiles: &CubeBuffer<u32>,
        want: &[u32],
        hi_mask: u32,
        shift: u32,
        bits: u32,
        order: u32,
    ) -> Result<Vec<u32>> {
        let bins = 1usize << bits;
        let segments = want.len() / 2;
        let hist = self.zeroed::<u32>(segments * (bins + 1));
        let want = self.put(want);
        self.launch(Reads::Whole, |c| {
            histogram::launch_digit_histogram(
                c,
                grid(tiles.len / 3),
                x,
                tiles,
                &want,
                &hist,
                hi_mask,
                shift,
                bins,
                order,
                bits > 11,
            )
        });
        self.get(&hist)
    }

    /// Per segment, the k-th largest key and how many of its copies the top
    /// k take (MSD radix select, every segment in the same launches).
    pub(super) fn radix(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Vec<(u32, u32)>> {
        let mut keys = vec![(0u32, 0u32); ks.len()];
        let mut active = vec![false; ks.len()];
        let mut left = vec![0u32; ks.len()];
        let mut prefix = vec![0u32; ks.len()];
        for (s, &k) in ks.iter().enumerate() {
            let len = offsets[s + 1] - offsets[s];
            if k == 0 {
                // No key is above u32::MAX, and no non-NaN key equals it.
                keys[s] = (u32::MAX, 0);
            } else if k == len {
                keys[s] = (0, u32::MAX);
            } else {
                active[s] = true;
                left[s] = k as u32;
            }
        }
        if !active.contains(&true) {
            return Ok(keys);
        }
        if (0..ks.len()).all(|s| !active[s] || offsets[s + 1] - offsets[s] <= short::SHORT) {
            // Short segments (buckets): the whole select on chip, one
            // launch and one readback of two words a segment.
            let live: Vec<usize> = (0..ks.len()).filter(|&s| active[s]).collect();
            let segs: Vec<u32> = live
                .iter()
                .flat_map(|&s| [offsets[s] as u32, offsets[s + 1] as u32, left[s]])
                .collect();
            let segs = self.put(&segs);
            let out = self.uninit::<u32>(2 * live.len());
            let bad = self.zeroed::<u32>(1);
            // No values in this mode: a word of their own (a buffer bound
            // twice as writable is invalid on some runtimes).
            let unused = self.uninit::<u32>(1);
            self.launch(Reads::Whole, |c| {
                short::launch_short_topk(
                    c,
                    grid(live.len()),
                    x,
                    &segs,
                    &out,
                    &unused,
                    &bad,
                    order,
                    false,
                )
            });
            if self.get(&bad)?[0] > 0 {
                return Err(self.first_nan(x));
            }
            let got = self.get(&out)?;
            for (j, &s) in live.iter().enumerate() {
                keys[s] = (got[2 * j], got[2 * j + 1]);
            }
            return Ok(keys);
        }
        let tiles = self.put(&tiles(offsets, |s| active[s]));
        let row = (1usize << DIGIT) + 1;
        for pass in 0..32 / DIGIT {
            let shift = 32 - DIGIT * (pass + 1);
            let top = shift + DIGIT;
            let hi_mask = if top >= 32 { 0 } else { u32::MAX << top };
            let want: Vec<u32> = (0..ks.len())
                .flat_map(|s| {
                    let w = if top >= 32 { 0 } else { prefix[s] << top };
                    [u32::from(active[s]), w]
                })
                .collect();
            let hist = self.histogram(x, &tiles, &want, hi_mask, shift, DIGIT, order)?;
            if hist.chunks(row).any(|r| r[row - 1] > 0) {
                return Err(self.first_nan(x));
            }
            for s in (0..ks.len()).filter(|&s| active[s]) {
                let h = &hist[s * row..(s + 1) * row - 1];
                let mut d = h.len() - 1;
                while h[d] < left[s] && d > 0 {
                    left[s] -= h[d];
                    d -= 1;
                }
                prefix[s] = (prefix[s] << DIGIT) | d as u32;
            }
        }
        for s in (0..ks.len()).filter(|&s| active[s]) {
            keys[s] = (prefix[s], left[s]);
        }
        Ok(keys)
    }

    /// Per segment `s`, every element whose key is above `keys[s].0` plus
    /// the first `keys[s].1` equal to it, in index order.
    pub(super) fn compact(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        offsets: &[usize],
        keys: &[(u32, u32)],
    ) -> Result<(CubeBuffer<u32>, CubeBuffer<u32>)> {
        let tiles = tiles(offsets, |_| true);
        let nt = tiles.len() / 3;
        if nt == 0 {
            return Ok((self.zeroed(0), self.zeroed(0)));
        }
        let tiles_b = self.put(&tiles);
        let flat: Vec<u32> = keys.iter().flat_map(|&(k, t)| [k, t]).collect();
        let keys_b = self.put(&flat);
        let counts_b = self.zeroed::<u32>(nt * 3);
        self.launch(Reads::Whole, |c| {
            count::launch_count_keys(c, grid(nt), x, &tiles_b, &keys_b, &counts_b, order)
        });
        let counts = self.get(&counts_b)?;
        if counts.chunks(3).any(|c| c[2] > 0) {
            return Err(self.first_nan(x));
        }
        let mut bases = Vec::with_capacity(nt * 2);
        let (mut total, mut eq_before, mut seg) = (0u32, 0u32, u32::MAX);
        for t in 0..nt {
            let s = tiles[3 * t + 2];
            if s != seg {
                seg = s;
                eq_before = 0;
            }
            let take = keys[s as usize].1;
            let (above, equal) = (counts[3 * t], counts[3 * t + 1]);
            bases.extend([eq_before, total]);
            total += above + take.saturating_sub(eq_before).min(equal);
            eq_before += equal;
        }
        let out_idx = self.uninit::<u32>(total as usize);
        let out_val = self.uninit::<u32>(total as usize);
        if total > 0 {
            let bases = self.put(&bases);
            self.launch(Reads::Whole, |c| {
                compact::launch_compact_keys(
                    c,
                    grid(nt),
                    x,
                    &tiles_b,
                    &keys_b,
                    &bases,
                    &out_idx,
                    &out_val,
                    order,
                )
            });
        }
        Ok((out_idx, out_val))
    }

    /// Exact top-k of each segment by key, in index order.
    pub(super) fn topk(
        &self,
        x: &CubeBuffer<f32>,
        order: u32,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, f32>> {
        let bits = x.bits();
        if offsets.windows(2).all(|w| w[1] - w[0] <= short::SHORT) {
            return self.short_topk(&bits, order, offsets, ks);
        }
        let keys = self.radix(&bits, order, offsets, ks)?;
        let (indices, values) = self.compact(&bits, order, offsets, &keys)?;
        Ok(Selected {
            indices,
            values: values.floats(),
        })
    }

    /// Exact top-k of segments of at most [`short::SHORT`] elements each
    /// (SparCML's buckets): one cube per segment selects in shared memory
    /// and writes its top k at the sum of the ks before it, so the call is
    /// one launch over the input (one pass) and one round trip (the NaN
    /// count), whatever the segments' number.
    fn short_topk(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, f32>> {
        let total: usize = ks.iter().sum();
        let out_idx = self.uninit::<u32>(total);
        let out_val = self.uninit::<u32>(total);
        let segments = ks.len();
        if segments > 0 && x.len > 0 {
            let mut segs = Vec::with_capacity(4 * segments);
            let mut base = 0u32;
            for (s, &k) in ks.iter().enumerate() {
                segs.extend([offsets[s] as u32, offsets[s + 1] as u32, k as u32, base]);
                base += k as u32;
            }
            let segs = self.put(&segs);
            let bad = self.zeroed::<u32>(1);
            self.launch(Reads::Whole, |c| {
                short::launch_short_topk(
                    c,
                    grid(segments),
                    x,
                    &segs,
                    &out_idx,
                    &out_val,
                    &bad,
                    order,
                    true,
                )
            });
            if self.get(&bad)?[0] > 0 {
                return Err(self.first_nan(x));
            }
        }
        Ok(Selected {
            indices: out_idx,
            values: out_val.floats(),
        })
    }

    /// Compaction of a whole buffer by one key and tie quota.
    pub(super) fn compact_one(
        &self,
        x: &CubeBuffer<f32>,
        order: u32,
        key: u32,
        take: u32,
    ) -> Result<Selected<Self, f32>> {
        let (indices, values) = self.compact(&x.bits(), order, &[0, x.len], &[(key, take)])?;
        Ok(Selected {
            indices,
            values: values.floats(),
        })
    }
}
