//! The segmented top-k (SparDL's block and SparCML's bucket top-k) over
//! its three engines (short segments on chip, one segment by the
//! whole-buffer top-k, the segmented select on the device), and what the
//! compactions share: the two-pass compaction that takes the keys above a
//! key and its tie quota.

use super::air::Search;
use super::tiles;
use crate::kernels::air::TAKE_FIT;
use crate::kernels::count::{self, KeyArgs};
use crate::kernels::segmented::{
    self, BINS, G_MISMATCH, G_NAN, G_WORDS, SG_BASE, SG_DONE, SG_K, SG_KEY, SG_ROW, SG_T0, SG_T1,
    SG_TAKE, SG_WORDS, SegArgs,
};
use crate::kernels::{TILE, compact, short};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{Error, Result, Selected};

impl<R: Runtime> CubeBackend<R> {
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
        let a = KeyArgs {
            x,
            tiles: &tiles_b,
            keys: &keys_b,
        };
        let counts_b = self.zeroed::<u32>(nt * 3);
        self.launch(Reads::Whole, |c| {
            count::launch_count_keys(c, &a, &counts_b, order)
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
                compact::launch_compact_keys(c, &a, &bases, &out_idx, &out_val, order)
            });
        }
        Ok((out_idx, out_val))
    }

    /// Exact top-k of each segment by key, in index order, segment after
    /// segment: where every segment holds at most [`short::SHORT`]
    /// elements, one launch ([`CubeBackend::short_topk`]); a single
    /// segment, the whole-buffer top-k (`air.rs`: 3 passes); otherwise the
    /// segmented select ([`CubeBackend::segmented_topk`]: 4 passes). One
    /// round trip each.
    pub(super) fn topk(
        &self,
        x: &CubeBuffer<f32>,
        order: u32,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, f32>> {
        let bits = x.bits();
        let s = Segments {
            x: &bits,
            order,
            offsets,
            ks,
        };
        if offsets.windows(2).all(|w| w[1] - w[0] <= short::SHORT) {
            return self.short_topk(&s);
        }
        if ks.len() == 1 {
            let search = Search {
                input: &bits,
                reads: Reads::Whole,
                k: ks[0],
                rule: TAKE_FIT,
                counted: None,
            };
            return Ok(self.air_select(&bits, order, &search)?.0);
        }
        self.segmented_topk(&s)
    }

    /// Exact top-k of each segment where some are longer than
    /// [`short::SHORT`], the radix select on the device
    /// (`kernels/segmented.rs`): the short segments that select (`0 < k <
    /// len`) in one launch of the short kernel (reading those segments
    /// only), the long ones by three histogram levels and their one-cube-
    /// per-segment choices, then every other segment with them through
    /// one collection pass, the per-segment offsets and the merge, each
    /// segment's output at the sum of the ks before it. 4 passes over the
    /// input, 1 round trip (the two global words: NaNs and a kernel
    /// fault's count, 8 bytes); 11 launches with the short kernel, 9
    /// without selecting long segments (no histogram).
    fn segmented_topk(&self, s: &Segments<'_>) -> Result<Selected<Self, f32>> {
        let Segments {
            x,
            order,
            offsets,
            ks,
        } = *s;
        let plan = SegPlan::new(offsets, ks)?;
        let out_idx = self.uninit::<u32>(plan.total);
        let out_val = self.uninit::<u32>(plan.total);
        let g = self.zeroed::<u32>(G_WORDS);
        if !plan.short.is_empty() {
            let segs = self.put(&plan.short);
            self.launch(Reads::Part, |c| {
                short::launch_short_topk(c, x, &segs, &out_idx, &out_val, &g, order)
            });
        }
        let seg = self.put(&plan.seg);
        let hist_tiles = self.put(&plan.hist_tiles);
        let rows = self.put(&plan.rows);
        let tiles = self.put(&plan.tiles);
        let segs = self.put(&plan.segs);
        let hist = if plan.rows.is_empty() {
            self.uninit::<u32>(1)
        } else {
            self.zeroed::<u32>(plan.rows.len() * BINS)
        };
        let nt = plan.tiles.len() / 3;
        let a = SegArgs {
            x,
            seg: &seg,
            hist_tiles: &hist_tiles,
            hist: &hist,
            rows: &rows,
            tiles: &tiles,
            segs: &segs,
            tmp: &self.uninit::<u32>(x.len),
            counts: &self.uninit::<u32>(2 * nt.max(1)),
            bases: &self.uninit::<u32>(2 * nt.max(1)),
            g: &g,
            out_idx: &out_idx,
            out_val: &out_val,
        };
        if !plan.rows.is_empty() {
            for level in 1..=3 {
                self.launch(Reads::Whole, |c| {
                    segmented::launch_histogram(c, &a, level, order)
                });
                self.launch(Reads::Part, |c| segmented::launch_choose(c, &a, level));
            }
        }
        if nt > 0 {
            self.launch(Reads::Whole, |c| segmented::launch_collect(c, &a, order));
            self.launch(Reads::Part, |c| segmented::launch_offsets(c, &a));
            if plan.total > 0 {
                self.launch(Reads::Part, |c| segmented::launch_emit(c, &a));
            }
        }
        let words = self.get(&g)?;
        if words[G_NAN] > 0 {
            return Err(self.first_nan(x));
        }
        if words[G_MISMATCH] > 0 {
            return Err(Error::Device {
                backend: self.name,
                detail: format!(
                    "a segmented top-k over {} segments found {} whose selection's length \
                     is not its k: a kernel fault; report it with the device",
                    ks.len(),
                    words[G_MISMATCH]
                ),
            });
        }
        Ok(Selected {
            indices: out_idx,
            values: out_val.floats(),
        })
    }

    /// Exact top-k of segments of at most [`short::SHORT`] elements each
    /// (SparCML's buckets): one cube per segment selects in shared memory
    /// and writes its top k at the sum of the ks before it, so the call is
    /// one launch over the input (one pass) and one round trip (the NaN
    /// count), whatever the segments' number.
    fn short_topk(&self, s: &Segments<'_>) -> Result<Selected<Self, f32>> {
        let (offsets, ks) = (s.offsets, s.ks);
        let total: usize = ks.iter().sum();
        let segments = ks.len();
        let mut segs = Vec::with_capacity(4 * segments);
        let mut base = 0u32;
        for (j, &k) in ks.iter().enumerate() {
            segs.extend([offsets[j] as u32, offsets[j + 1] as u32, k as u32, base]);
            base += k as u32;
        }
        let segs = if segments > 0 && s.x.len > 0 {
            self.put(&segs)
        } else {
            self.uninit::<u32>(0)
        };
        self.short_topk_on(s.x, s.order, &segs, total)
    }

    /// [`CubeBackend::short_topk`] over equal buckets (`bucket` at most
    /// [`short::SHORT`], `min(per, length)` from each), their records laid
    /// out by a kernel ([`short::bucket_segs`]): no host loop over the
    /// buckets, nothing uploaded. Two launches, one pass over `x`, one
    /// round trip.
    pub(super) fn bucket_topk(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        bucket: usize,
        per: usize,
    ) -> Result<Selected<Self, f32>> {
        let n = x.len;
        let (full, last) = (n / bucket, n % bucket);
        let per_full = per.min(bucket);
        let total = full * per_full + per.min(last);
        let buckets = n.div_ceil(bucket);
        let segs = self.uninit::<u32>(4 * buckets);
        if buckets > 0 {
            self.launch(Reads::Part, |c| {
                short::launch_bucket_segs(c, &segs, n as u32, bucket as u32, per_full as u32)
            });
        }
        self.short_topk_on(x, order, &segs, total)
    }

    /// [`short::short_topk`] over the records `segs` (four words a
    /// segment, on the device) selecting `total` in all.
    fn short_topk_on(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        segs: &CubeBuffer<u32>,
        total: usize,
    ) -> Result<Selected<Self, f32>> {
        let out_idx = self.uninit::<u32>(total);
        let out_val = self.uninit::<u32>(total);
        let segments = segs.len / 4;
        if segments > 0 && x.len > 0 {
            let bad = self.zeroed::<u32>(1);
            self.launch(Reads::Whole, |c| {
                short::launch_short_topk(c, x, segs, &out_idx, &out_val, &bad, order)
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

/// A segmented top-k as [`CubeBackend::topk`] hands it to its engines:
/// the input's bits, the key order's code, the segments' offsets and
/// their ks (checked by the caller).
#[derive(Clone, Copy)]
struct Segments<'a> {
    x: &'a CubeBuffer<u32>,
    order: u32,
    offsets: &'a [usize],
    ks: &'a [usize],
}

/// What the host lays out for [`CubeBackend::segmented_topk`]: the
/// segments' records, the short selecting segments for the short kernel,
/// the tiles and rows of the long selecting ones, and the tiles and
/// segments of the collection (every segment but the short selecting
/// ones).
struct SegPlan {
    /// [`SG_WORDS`] words a segment.
    seg: Vec<u32>,
    /// `(start, end, k, base)` of each short selecting segment.
    short: Vec<u32>,
    /// `(start, end, segment)` of each tile of the long selecting segments.
    hist_tiles: Vec<u32>,
    /// The segment of each histogram row.
    rows: Vec<u32>,
    /// `(start, end, segment)` of each tile of the collection.
    tiles: Vec<u32>,
    /// The non-empty segments of the collection.
    segs: Vec<u32>,
    /// Elements selected: the sum of the ks.
    total: usize,
}

impl SegPlan {
    /// The layout of `offsets` and `ks` (checked by the caller), or
    /// [`Error::InvalidParameter`] where an offset or the selection does
    /// not fit the kernels' 32-bit words.
    fn new(offsets: &[usize], ks: &[usize]) -> Result<Self> {
        let n = *offsets.last().unwrap_or(&0);
        let total: usize = ks.iter().sum();
        if n > u32::MAX as usize || ks.len() > (u32::MAX as usize) / SG_WORDS {
            return Err(Error::invalid(
                "offsets",
                format!(
                    "{n} elements in {} segments: the kernels address at most 2^32 - 1 \
                     elements and 2^32 / {SG_WORDS} segments; split the call",
                    ks.len()
                ),
            ));
        }
        let mut p = SegPlan {
            seg: vec![0; ks.len() * SG_WORDS],
            short: Vec::new(),
            hist_tiles: Vec::new(),
            rows: Vec::new(),
            tiles: Vec::new(),
            segs: Vec::new(),
            total,
        };
        let mut base = 0u32;
        for (s, &k) in ks.iter().enumerate() {
            let (a, b) = (offsets[s], offsets[s + 1]);
            let len = b - a;
            let w = &mut p.seg[s * SG_WORDS..(s + 1) * SG_WORDS];
            w[SG_K] = k as u32;
            w[SG_BASE] = base;
            let selecting = k > 0 && k < len;
            if selecting && len <= short::SHORT {
                p.short.extend([a as u32, b as u32, k as u32, base]);
            } else {
                if selecting {
                    w[SG_ROW] = p.rows.len() as u32;
                    p.rows.push(s as u32);
                    push_tiles(&mut p.hist_tiles, a, b, s);
                } else {
                    // k = 0: no key is above u32::MAX, no non-NaN key
                    // equals it; k = len: every key is at least 0.
                    w[SG_DONE] = 1;
                    (w[SG_KEY], w[SG_TAKE]) = if k == 0 { (u32::MAX, 0) } else { (0, u32::MAX) };
                }
                w[SG_T0] = (p.tiles.len() / 3) as u32;
                push_tiles(&mut p.tiles, a, b, s);
                w[SG_T1] = (p.tiles.len() / 3) as u32;
                if len > 0 {
                    p.segs.push(s as u32);
                }
            }
            base += k as u32;
        }
        Ok(p)
    }
}

/// Appends `(start, end, s)` for each tile of `a..b`.
fn push_tiles(out: &mut Vec<u32>, a: usize, b: usize, s: usize) {
    let mut start = a;
    while start < b {
        let end = (start + TILE).min(b);
        out.extend([start as u32, end as u32, s as u32]);
        start = end;
    }
}
