//! Exact top-k of a whole buffer in three passes over it, with one host
//! round trip per call (`kernels/air.rs`): the k-th key is found and
//! applied on the device, and the host reads back only the state words,
//! for the NaN count.

use crate::kernels::TILE;
use crate::kernels::air::{
    self, AirArgs, BINS, ST_DONE, ST_INF, ST_KEY, ST_NAN, ST_TAKE, ST_WORDS, TABLE,
};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{Result, Selected};

impl<R: Runtime> CubeBackend<R> {
    /// Exact top-k of `x` by the keys of `order` (ties to the lower index),
    /// in index order, `k <= len` checked by the caller.
    ///
    /// Per call with `0 < k < n`: 9 launches (two clears, two histogram
    /// passes, two one-cube choices, the collection pass, the offsets and
    /// the merge), 3 passes over `x`, 1 round trip (the state words, 32
    /// bytes); with `k = n`, the collection, offsets and merge: 3
    /// launches, 1 pass, 1 round trip; with `k = 0` the collection alone.
    /// Also returns how many elements of `x` are infinite (counted on the
    /// way, for [`sparse_core::SelectOps::topk_finite`]).
    pub(super) fn air_topk(
        &self,
        x: &CubeBuffer<f32>,
        order: u32,
        k: usize,
    ) -> Result<(Selected<Self, f32>, u32)> {
        let n = x.len;
        if n == 0 {
            let s = Selected {
                indices: self.zeroed(0),
                values: self.zeroed(0),
            };
            return Ok((s, 0));
        }
        let bits = x.bits();
        let tiles = n.div_ceil(TILE);
        let search = k > 0 && k < n;
        // No search where every key (k = n) or none (k = 0) is taken: the
        // collection still counts NaNs and infinities.
        let mut words = [0u32; ST_WORDS];
        if !search {
            words[ST_DONE] = 1;
            (words[ST_KEY], words[ST_TAKE]) = if k == 0 { (u32::MAX, 0) } else { (0, u32::MAX) };
        }
        let st = self.put(&words);
        let (hist, table) = if search {
            (self.zeroed::<u32>(2 * BINS), self.zeroed::<u32>(TABLE))
        } else {
            (self.uninit::<u32>(1), self.uninit::<u32>(1))
        };
        let tmp = self.uninit::<u32>(tiles * TILE);
        let counts = self.uninit::<u32>(2 * tiles);
        let bases = self.uninit::<u32>(2 * tiles);
        let out_idx = self.uninit::<u32>(k);
        let out_val = self.uninit::<u32>(k);
        let a = AirArgs {
            x: &bits,
            st: &st,
            hist: &hist,
            table: &table,
            tmp: &tmp,
            counts: &counts,
            bases: &bases,
            out_idx: &out_idx,
            out_val: &out_val,
        };
        if search {
            let k = k as u32;
            for level in [1, 2] {
                self.launch(Reads::Whole, |c| air::launch_histogram(c, &a, level, order));
                self.launch(Reads::Part, |c| air::launch_choose(c, &a, k, level));
            }
        }
        self.launch(Reads::Whole, |c| air::launch_collect(c, &a, order));
        if k > 0 {
            self.launch(Reads::Part, |c| air::launch_offsets(c, &a));
            self.launch(Reads::Part, |c| air::launch_emit(c, &a));
        }
        let state = self.get(&st)?;
        if state[ST_NAN] > 0 {
            return Err(self.first_nan(&bits));
        }
        let s = Selected {
            indices: out_idx,
            values: out_val.floats(),
        };
        Ok((s, state[ST_INF]))
    }
}
