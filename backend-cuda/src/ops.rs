//! The `Backend` traits over the kernels, for `f32` elements (the kernels'
//! type): argument checks, launches and the small host steps between
//! launches (offsets from per-tile counts, the radix walk over digit
//! histograms). Kernels that only move or order elements take their `u32`
//! bit patterns ([`CubeBuffer::bits`]).

use crate::kernels::{
    ABS, REVERSED, SIGNED, TILE, axpy, bitmap, compact, count, cubes_for, gather, grid, hash,
    histogram, mask, order_code, outside, qsgd, scale, scatter, short, stats,
};
use crate::{CubeBackend, CubeBuffer};
use cubecl_runtime::runtime::Runtime;
use sparse_core::backend::{check_digit, check_k, check_len, check_segments};
use sparse_core::qsgd::QsgdParams;
use sparse_core::{
    BufferOps, CodecOps, CounterRng, DenseOps, Digit, Error, Extreme, HashOps, HashPartitions,
    HierarchicalHash, IndexOps, KeyOrder, ReduceOps, Result, Scalar, SelectOps, Selected, abs_key,
};

/// One-pass statistics of `|x|`.
struct Stats {
    max_key: u32,
    above: usize,
    sum: f64,
    squares: f64,
}

/// `(start, end, segment)` of every tile of the segments `keep` accepts.
fn tiles(offsets: &[usize], keep: impl Fn(usize) -> bool) -> Vec<u32> {
    let mut out = Vec::new();
    for (s, w) in offsets.windows(2).enumerate() {
        if !keep(s) {
            continue;
        }
        let mut start = w[0];
        while start < w[1] {
            let end = (start + TILE).min(w[1]);
            out.extend([start as u32, end as u32, s as u32]);
            start = end;
        }
    }
    out
}

/// Radix digits of the select: 8 bits from the top of the 32-bit key.
const DIGIT: u32 = 8;

impl<R: Runtime> CubeBackend<R> {
    /// The error naming the first NaN of `x` (the slow path: taken only once
    /// a kernel has counted one).
    fn first_nan(&self, x: &CubeBuffer<u32>) -> Error {
        self.first_key_above(x, 0x7f80_0000)
    }

    /// The [`Error::NonFinite`] naming the first element of `x` whose
    /// magnitude key is above `limit` (infinity's key for NaN only, just
    /// below it for any non-finite value).
    fn first_key_above(&self, x: &CubeBuffer<u32>, limit: u32) -> Error {
        match self.get(x) {
            Ok(bits) => Error::NonFinite {
                index: bits
                    .iter()
                    .position(|&b| b & 0x7fff_ffff > limit)
                    .unwrap_or(0),
            },
            Err(e) => e,
        }
    }

    /// Checks that every index lies in `lo..lo + len`.
    fn check_range(&self, indices: &CubeBuffer<u32>, lo: u32, len: usize, dim: u64) -> Result<()> {
        if indices.len == 0 {
            return Ok(());
        }
        let count = self.zeroed::<u32>(1);
        let len32 = len.min(u32::MAX as usize) as u32;
        outside::launch_count_outside(
            &self.client,
            grid(cubes_for(indices.len)),
            indices,
            lo,
            len32,
            &count,
        );
        if self.get(&count)?[0] == 0 {
            return Ok(());
        }
        let host = self.get(indices)?;
        let position = host
            .iter()
            .position(|&i| i < lo || (i - lo) as usize >= len)
            .unwrap_or(0);
        Err(Error::IndexOutOfRange {
            index: host[position] as u64,
            position,
            dim,
        })
    }

    fn stats(&self, x: &CubeBuffer<u32>, tkey: u32) -> Result<Stats> {
        let mut st = Stats {
            max_key: 0,
            above: 0,
            sum: 0.0,
            squares: 0.0,
        };
        if x.len == 0 {
            return Ok(st);
        }
        let cubes = x.len.div_ceil(TILE);
        let parts = self.uninit::<u32>(cubes * 5);
        stats::launch_abs_stats(&self.client, grid(cubes), x, tkey, &parts);
        let mut nan = 0;
        for p in self.get(&parts)?.chunks(5) {
            st.max_key = st.max_key.max(p[0]);
            st.above += p[1] as usize;
            nan += p[2];
            st.sum += f32::from_bits(p[3]) as f64;
            st.squares += f32::from_bits(p[4]) as f64;
        }
        if nan > 0 {
            return Err(self.first_nan(x));
        }
        Ok(st)
    }

    /// One digit's histogram per segment over `tiles`: rows of `2^bits + 1`
    /// entries (the last counts NaNs).
    #[allow(clippy::too_many_arguments)]
    fn histogram(
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
        histogram::launch_digit_histogram(
            &self.client,
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
        );
        self.get(&hist)
    }

    /// Per segment, the k-th largest key and how many of its copies the top
    /// k take (MSD radix select, every segment in the same launches).
    fn radix(
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
            short::launch_short_topk_keys(
                &self.client,
                grid(live.len()),
                x,
                &segs,
                &out,
                &bad,
                order,
            );
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
    fn compact(
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
        count::launch_count_keys(
            &self.client,
            grid(nt),
            x,
            &tiles_b,
            &keys_b,
            &counts_b,
            order,
        );
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
            compact::launch_compact_keys(
                &self.client,
                grid(nt),
                x,
                &tiles_b,
                &keys_b,
                &bases,
                &out_idx,
                &out_val,
                order,
            );
        }
        Ok((out_idx, out_val))
    }

    /// Exact top-k of each segment by key, in index order.
    fn topk(
        &self,
        x: &CubeBuffer<f32>,
        order: u32,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, f32>> {
        let bits = x.bits();
        let keys = self.radix(&bits, order, offsets, ks)?;
        let (indices, values) = self.compact(&bits, order, offsets, &keys)?;
        Ok(Selected {
            indices,
            values: values.floats(),
        })
    }

    /// Compaction of a whole buffer by one key and tie quota.
    fn compact_one(
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

impl<R: Runtime> BufferOps for CubeBackend<R> {
    type Buffer<T: Scalar> = CubeBuffer<T>;
    fn name(&self) -> &'static str {
        self.name
    }
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<CubeBuffer<T>> {
        Ok(self.write(data, &self.counters.uploaded))
    }
    fn download<T: Scalar>(&self, buf: &CubeBuffer<T>) -> Result<Vec<T>> {
        let out = self.read(buf, &self.counters.downloaded)?;
        self.take_fault()?;
        Ok(out)
    }
    fn zeros<T: Scalar>(&self, len: usize) -> Result<CubeBuffer<T>> {
        Ok(self.zeroed(len))
    }
    fn len<T: Scalar>(&self, buf: &CubeBuffer<T>) -> usize {
        buf.len
    }
}

impl<R: Runtime> ReduceOps<f32> for CubeBackend<R> {
    fn max_abs(&self, x: &CubeBuffer<f32>) -> Result<f32> {
        let st = self.stats(&x.bits(), u32::MAX)?;
        Ok(f32::from_bits(st.max_key))
    }
    fn mean_abs(&self, x: &CubeBuffer<f32>) -> Result<f64> {
        let st = self.stats(&x.bits(), u32::MAX)?;
        Ok(if x.len == 0 {
            0.0
        } else {
            st.sum / x.len as f64
        })
    }
    fn sum_squares(&self, x: &CubeBuffer<f32>) -> Result<f64> {
        Ok(self.stats(&x.bits(), u32::MAX)?.squares)
    }
    fn count_above(&self, x: &CubeBuffer<f32>, t: f32) -> Result<usize> {
        if t.is_nan() {
            self.stats(&x.bits(), u32::MAX)?;
            return Ok(0);
        }
        if t < 0.0 {
            self.stats(&x.bits(), u32::MAX)?;
            return Ok(x.len);
        }
        Ok(self.stats(&x.bits(), abs_key(t) as u32)?.above)
    }
}

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
        let mut hist = self.histogram(
            &bits,
            &tiles,
            &want,
            hi_mask,
            d.shift,
            d.digit_bits,
            order_code(order),
        )?;
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
    fn gather(&self, x: &CubeBuffer<f32>, indices: &CubeBuffer<u32>) -> Result<CubeBuffer<f32>> {
        let out = self.uninit::<u32>(indices.len);
        if indices.len > 0 {
            gather::launch_gather(
                &self.client,
                grid(cubes_for(indices.len)),
                &x.bits(),
                indices,
                &out,
                &self.fault(),
            );
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
        self.topk(x, ABS, &[0, x.len], &[k])
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
        self.topk(x, order, &[0, x.len], &[k])
    }
}

impl<R: Runtime> DenseOps<f32> for CubeBackend<R> {
    fn scatter_add(
        &self,
        dense: &mut CubeBuffer<f32>,
        indices: &CubeBuffer<u32>,
        values: &CubeBuffer<f32>,
    ) -> Result<()> {
        check_len("scatter_add indices vs values", indices.len, values.len)?;
        if indices.len > 0 {
            scatter::launch_scatter_add(
                &self.client,
                grid(cubes_for(indices.len)),
                dense,
                indices,
                values,
                &self.fault(),
            );
        }
        Ok(())
    }
    fn mask(&self, dense: &mut CubeBuffer<f32>, indices: &CubeBuffer<u32>) -> Result<()> {
        if indices.len > 0 {
            mask::launch_mask(
                &self.client,
                grid(cubes_for(indices.len)),
                dense,
                indices,
                &self.fault(),
            );
        }
        Ok(())
    }
    fn axpy(&self, a: f32, x: &CubeBuffer<f32>, y: &mut CubeBuffer<f32>) -> Result<()> {
        check_len("axpy x vs y", y.len, x.len)?;
        if y.len > 0 {
            axpy::launch_axpy(&self.client, grid(cubes_for(y.len)), a, x, y);
        }
        Ok(())
    }
    fn scale(&self, a: f32, x: &mut CubeBuffer<f32>) -> Result<()> {
        if x.len > 0 {
            scale::launch_scale(&self.client, grid(cubes_for(x.len)), a, x);
        }
        Ok(())
    }
}

impl<R: Runtime> HashOps<f32> for CubeBackend<R> {
    fn hash_partition(
        &self,
        indices: &CubeBuffer<u32>,
        values: &CubeBuffer<f32>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<f32>> {
        check_len("hash_partition indices vs values", indices.len, values.len)?;
        let parts = h.h0.partitions();
        let (r1, r2) = (h.r1, h.r2);
        let width = r1 as usize + r2 as usize;
        let n = indices.len;
        let mut table = h.h0.hash().tables().to_vec();
        for f in &h.rehash {
            table.extend_from_slice(f.tables());
        }
        let tables = self.put(&table);
        let slots = self.zeroed::<u32>(parts as usize * width * 2);
        let state = self.zeroed::<u32>(n);
        let counters = self.zeroed::<u32>(parts as usize + 1);
        let fallback = self.uninit::<u32>(2 * n);
        let vals = values.bits();
        if n > 0 {
            let count = grid(cubes_for(n));
            for f in 1..=h.rehash.len() as u32 {
                hash::launch_hash_claim(
                    &self.client,
                    count.clone(),
                    indices,
                    &state,
                    &slots,
                    &tables,
                    parts,
                    r1,
                    width as u32,
                    f,
                );
                hash::launch_hash_confirm(
                    &self.client,
                    count.clone(),
                    indices,
                    &vals,
                    &state,
                    &slots,
                    &tables,
                    parts,
                    r1,
                    width as u32,
                    f,
                );
            }
            hash::launch_hash_serial(
                &self.client,
                count,
                indices,
                &vals,
                &state,
                &counters,
                &slots,
                &fallback,
                &tables,
                parts,
                r1,
                r2,
            );
        }
        let slots = self.get(&slots)?;
        let counters = self.get(&counters)?;
        let spilled = counters[parts as usize] as usize;
        let fallback = if spilled > 0 {
            self.get(&fallback)?
        } else {
            Vec::new()
        };
        let mut by_part: Vec<Vec<(u32, u32)>> = vec![Vec::new(); parts as usize];
        for pair in fallback[..2 * spilled].chunks(2) {
            by_part[h.h0.partition(pair[0]) as usize].push((pair[0], pair[1]));
        }
        let value = f32::from_bits;
        let mut out = HashPartitions {
            offsets: vec![0],
            indices: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
            serial: counters[..parts as usize]
                .iter()
                .map(|&c| c.min(r2) as usize)
                .sum(),
            fallback: spilled,
        };
        for (p, spill) in by_part.iter().enumerate() {
            for q in p * width..(p + 1) * width {
                if slots[2 * q] != 0 {
                    out.indices.push(slots[2 * q] - 1);
                    out.values.push(value(slots[2 * q + 1]));
                }
            }
            for &(i, v) in spill {
                out.indices.push(i);
                out.values.push(value(v));
            }
            out.offsets.push(out.indices.len());
        }
        Ok(out)
    }
}

impl<R: Runtime> IndexOps for CubeBackend<R> {
    fn gather_indices(
        &self,
        src: &CubeBuffer<u32>,
        positions: &CubeBuffer<u32>,
    ) -> Result<CubeBuffer<u32>> {
        let out = self.uninit::<u32>(positions.len);
        if positions.len > 0 {
            gather::launch_gather(
                &self.client,
                grid(cubes_for(positions.len)),
                src,
                positions,
                &out,
                &self.fault(),
            );
        }
        Ok(out)
    }
    fn bitmap_encode(
        &self,
        indices: &CubeBuffer<u32>,
        lo: u32,
        len: usize,
    ) -> Result<CubeBuffer<u32>> {
        self.check_range(indices, lo, len, lo as u64 + len as u64)?;
        let nw = len.div_ceil(32);
        if len == 0 {
            return Ok(self.zeroed(0));
        }
        let flags = self.zeroed::<u32>(len);
        let words = self.uninit::<u32>(nw);
        if indices.len > 0 {
            bitmap::launch_bitmap_flags(
                &self.client,
                grid(cubes_for(indices.len)),
                indices,
                lo,
                &flags,
            );
        }
        bitmap::launch_bitmap_pack(&self.client, grid(cubes_for(nw)), &flags, &words);
        Ok(words)
    }
    fn bitmap_decode(
        &self,
        words: &CubeBuffer<u32>,
        lo: u32,
        len: usize,
    ) -> Result<CubeBuffer<u32>> {
        check_len("bitmap words", len.div_ceil(32), words.len)?;
        if len == 0 {
            return Ok(self.zeroed(0));
        }
        let nt = words.len.div_ceil(TILE);
        let counts = self.uninit::<u32>(nt);
        bitmap::launch_bitmap_count(&self.client, grid(nt), words, len as u32, &counts);
        let mut bases = Vec::with_capacity(nt);
        let mut total = 0u32;
        for c in self.get(&counts)? {
            bases.push(total);
            total += c;
        }
        let out = self.uninit::<u32>(total as usize);
        if total > 0 {
            let bases = self.put(&bases);
            bitmap::launch_bitmap_write(
                &self.client,
                grid(nt),
                words,
                len as u32,
                lo,
                &bases,
                &out,
            );
        }
        Ok(out)
    }
}

impl<R: Runtime> CodecOps<f32> for CubeBackend<R> {
    fn qsgd_quantize(
        &self,
        x: &CubeBuffer<f32>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(CubeBuffer<f32>, CubeBuffer<u32>)> {
        let n = x.len;
        if n == 0 {
            return Ok((self.zeroed(0), self.zeroed(0)));
        }
        let (nb, nw) = (p.buckets(n), p.words(n));
        let scales = self.uninit::<u32>(nb);
        let bad = self.zeroed::<u32>(1);
        let words = self.uninit::<u32>(nw);
        let bits = x.bits();
        qsgd::launch_qsgd_scales(
            &self.client,
            grid(nb),
            &bits,
            p.bucket() as u32,
            &scales,
            &bad,
        );
        if self.get(&bad)?[0] > 0 {
            return Err(self.first_key_above(&bits, 0x7f7f_ffff));
        }
        let [key0, key1] = CounterRng::new(p.seed()).keys();
        qsgd::launch_qsgd_codes(
            &self.client,
            grid(cubes_for(nw)),
            x,
            &scales.floats(),
            &words,
            p.bucket() as u32,
            p.levels(),
            key0,
            key1,
            counter_base,
            p.bits(),
        );
        Ok((scales.floats(), words))
    }
    fn qsgd_dequantize(
        &self,
        scales: &CubeBuffer<f32>,
        words: &CubeBuffer<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<CubeBuffer<f32>> {
        check_len("qsgd scales", p.buckets(n), scales.len)?;
        check_len("qsgd words", p.words(n), words.len)?;
        let out = self.uninit::<f32>(n);
        if n > 0 {
            qsgd::launch_qsgd_decode(
                &self.client,
                grid(cubes_for(n)),
                words,
                scales,
                &out,
                p.bucket() as u32,
                p.levels(),
                p.bits(),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::tiles;
    use crate::kernels::TILE;

    #[test]
    fn tiles_cover_each_segment_without_crossing() {
        let offsets = [0, 3, 3, TILE + 5, 2 * TILE + 5];
        let t = tiles(&offsets, |_| true);
        let triples: Vec<&[u32]> = t.chunks(3).collect();
        let want: Vec<[u32; 3]> = vec![
            [0, 3, 0],
            [3, TILE as u32 + 3, 2],
            [TILE as u32 + 3, TILE as u32 + 5, 2],
            [TILE as u32 + 5, 2 * TILE as u32 + 5, 3],
        ];
        assert_eq!(triples.len(), want.len());
        for (got, want) in triples.iter().zip(&want) {
            assert_eq!(*got, want);
        }
        assert_eq!(tiles(&offsets, |s| s == 0), vec![0, 3, 0]);
    }
}
