//! Exact top-k of a whole buffer in three passes over it, with one host
//! round trip per call (`kernels/air.rs`): the k-th key is found and
//! applied on the device, and the host reads back only the state words,
//! for the NaN and infinity counts and the selection's length. The same
//! kernels take every element at least the k-th largest (all its ties)
//! and every element strictly above the k-th largest key of another
//! buffer (DGC's sample): the tie rules of [`air::air_choose`].

use crate::kernels::air::{
    self, AirArgs, BINS, ST_COUNT, ST_DONE, ST_INF, ST_KEY, ST_NAN, ST_TAKE, ST_WORDS, TABLE,
    TAKE_FIT,
};
use crate::kernels::{ABS, TILE, feedback};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{Error, Result, Selected};

/// Where the k-th key comes from: the `k`-th largest key of `input` (the
/// selection's own input, or a sample of it: `reads` says which, for the
/// pass count), taken by the tie `rule` (`kernels::air::TAKE_*`); or, with
/// `k` 0 or the input's length, nothing to search.
pub(super) struct Search<'a> {
    pub input: &'a CubeBuffer<u32>,
    pub reads: Reads,
    pub k: usize,
    pub rule: u32,
    /// The histogram rows with the first digit counted already (by the
    /// error feedback's pass), so that the search starts at the first
    /// choice.
    pub counted: Option<&'a CubeBuffer<u32>>,
}

/// What a collection found, read back in the call's one round trip.
pub(super) struct Found {
    /// The k-th key (every key above it is selected).
    pub key: u32,
    /// Elements selected.
    pub count: usize,
    /// Infinities in the input.
    pub infinite: u32,
}

/// The buffers a collection leaves for the emission.
pub(super) struct Collected {
    tmp: CubeBuffer<u32>,
    counts: CubeBuffer<u32>,
    bases: CubeBuffer<u32>,
    pub found: Found,
}

impl<R: Runtime> CubeBackend<R> {
    /// Exact top-k of `x` by the keys of `order` (ties to the lower index),
    /// in index order, `k <= len` checked by the caller.
    ///
    /// Per call with `0 < k < n`: 9 launches (two clears, two histogram
    /// passes, two one-cube choices, the collection pass, the offsets and
    /// the merge), 3 passes over `x`, 1 round trip (the state words, 32
    /// bytes); with `k = n`, the collection, offsets and merge: 3
    /// launches, 1 pass, 1 round trip; with `k = 0` the collection and
    /// the offsets. Also returns how many elements of `x` are infinite
    /// (counted on the way, for [`sparse_core::SelectOps::topk_finite`]).
    pub(super) fn air_topk(
        &self,
        x: &CubeBuffer<f32>,
        order: u32,
        k: usize,
    ) -> Result<(Selected<Self, f32>, u32)> {
        let bits = x.bits();
        let search = Search {
            input: &bits,
            reads: Reads::Whole,
            k,
            rule: TAKE_FIT,
            counted: None,
        };
        let (s, found) = self.air_select(&bits, order, &search)?;
        Ok((s, found.infinite))
    }

    /// Error feedback fused with the exact top-k by magnitude
    /// ([`sparse_core::SelectOps::accumulate_topk`]): the accumulation and
    /// the first digit's histogram in one pass (`kernels/feedback.rs`),
    /// then the top-k's second histogram pass and its collection, one round
    /// trip, and the merge, which zeroes the selected entries of `v`: 3
    /// passes over `v` for `0 < k < n` (2 with `k` 0 or `n`). Lengths and
    /// `k` are checked by the caller; `u` is the momentum and its factor.
    pub(super) fn air_feedback(
        &self,
        v: &CubeBuffer<f32>,
        g: &CubeBuffer<f32>,
        u: Option<(&CubeBuffer<f32>, f32)>,
        gain: f32,
        k: usize,
    ) -> Result<Selected<Self, f32>> {
        if v.len == 0 {
            return Ok(Selected {
                indices: self.zeroed(0),
                values: self.zeroed(0),
            });
        }
        let hist = self.zeroed::<u32>(2 * BINS);
        // Without a momentum, a word of its own in its place (a buffer
        // bound twice as writable is invalid on some runtimes).
        let unused = self.uninit::<f32>(1);
        self.launch(Reads::Whole, |c| {
            feedback::launch_feedback_histogram(c, v, g, &hist, gain, u, &unused)
        });
        let bits = v.bits();
        let search = Search {
            input: &bits,
            reads: Reads::Whole,
            k,
            rule: TAKE_FIT,
            counted: Some(&hist),
        };
        let c = self.air_collect(&bits, ABS, &search)?;
        self.air_emit_into(&bits, &c, true)
    }

    /// The selection of `x` that `search` defines, in index order: the
    /// search (two histogram passes over its input, two one-cube
    /// choices), the collection pass over `x` and the offsets, the one
    /// round trip (the state words), then the merge into an output of the
    /// length read back. NaN in `x` is [`Error::NonFinite`] naming the
    /// first; infinities are counted ([`Found::infinite`]).
    pub(super) fn air_select(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        search: &Search<'_>,
    ) -> Result<(Selected<Self, f32>, Found)> {
        let c = self.air_collect(x, order, search)?;
        let s = self.air_emit(x, &c)?;
        Ok((s, c.found))
    }

    /// The search, collection and offsets of [`CubeBackend::air_select`],
    /// and its round trip; the emission is [`CubeBackend::air_emit`].
    pub(super) fn air_collect(
        &self,
        x: &CubeBuffer<u32>,
        order: u32,
        search: &Search<'_>,
    ) -> Result<Collected> {
        let n = x.len;
        let tiles = n.div_ceil(TILE);
        let m = search.input.len;
        let k = search.k;
        // A search at k = m too where the rule needs the key itself (the
        // smallest: `TAKE_ALL` returns it, `TAKE_NONE` compares with it).
        let searching = (k > 0 && k < m) || (k == m && m > 0 && search.rule != TAKE_FIT);
        // No search where every key (k = n) or none (k = 0) is taken: the
        // collection still counts NaNs and infinities.
        let mut words = [0u32; ST_WORDS];
        if !searching {
            words[ST_DONE] = 1;
            (words[ST_KEY], words[ST_TAKE]) = if k == 0 { (u32::MAX, 0) } else { (0, u32::MAX) };
        }
        let st = self.put(&words);
        let (hist, table) = if searching {
            let hist = match search.counted {
                Some(h) => h.share(),
                None => self.zeroed::<u32>(2 * BINS),
            };
            (hist, self.zeroed::<u32>(TABLE))
        } else {
            (self.uninit::<u32>(1), self.uninit::<u32>(1))
        };
        let tmp = self.uninit::<u32>(tiles.max(1) * TILE);
        let counts = self.uninit::<u32>(2 * tiles.max(1));
        let bases = self.uninit::<u32>(2 * tiles.max(1));
        let none = self.uninit::<u32>(1);
        let on = |input| AirArgs {
            x: input,
            st: &st,
            hist: &hist,
            table: &table,
            tmp: &tmp,
            counts: &counts,
            bases: &bases,
            out_idx: &none,
            out_val: &none,
        };
        if searching {
            let a = on(search.input);
            let kk = k as u32;
            for level in [1, 2] {
                if level == 2 || search.counted.is_none() {
                    self.launch(search.reads, |c| air::launch_histogram(c, &a, level, order));
                }
                self.launch(Reads::Part, |c| {
                    air::launch_choose(c, &a, kk, level, search.rule)
                });
            }
        }
        let a = on(x);
        if n > 0 {
            self.launch(Reads::Whole, |c| air::launch_collect(c, &a, order));
            self.launch(Reads::Part, |c| air::launch_offsets(c, &a));
        }
        let state = if n > 0 {
            self.get(&st)?
        } else {
            words.to_vec()
        };
        if state[ST_NAN] > 0 {
            return Err(self.first_nan(x));
        }
        let found = Found {
            key: state[ST_KEY],
            count: if n > 0 { state[ST_COUNT] as usize } else { 0 },
            infinite: state[ST_INF],
        };
        if found.count > n {
            return Err(Error::Device {
                backend: self.name,
                detail: format!(
                    "a selection of {n} elements counted {} selected: a kernel fault; \
                     report it with the device",
                    found.count
                ),
            });
        }
        Ok(Collected {
            tmp,
            counts,
            bases,
            found,
        })
    }

    /// The collected selection merged in index order into an output of
    /// the length found, with its values: one launch reading the selected
    /// entries only, no round trip.
    pub(super) fn air_emit(
        &self,
        x: &CubeBuffer<u32>,
        c: &Collected,
    ) -> Result<Selected<Self, f32>> {
        self.air_emit_into(x, c, false)
    }

    /// [`CubeBackend::air_emit`], and with `zero` the selected elements of
    /// `x` set to `+0.0` once their values are out.
    fn air_emit_into(
        &self,
        x: &CubeBuffer<u32>,
        c: &Collected,
        zero: bool,
    ) -> Result<Selected<Self, f32>> {
        let out_idx = self.uninit::<u32>(c.found.count);
        let out_val = self.uninit::<u32>(c.found.count);
        if c.found.count > 0 {
            let a = AirArgs {
                x,
                st: &c.counts,
                hist: &c.counts,
                table: &c.counts,
                tmp: &c.tmp,
                counts: &c.counts,
                bases: &c.bases,
                out_idx: &out_idx,
                out_val: &out_val,
            };
            self.launch(Reads::Part, |cl| air::launch_emit(cl, &a, zero));
        }
        Ok(Selected {
            indices: out_idx,
            values: out_val.floats(),
        })
    }
}
