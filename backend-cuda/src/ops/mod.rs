//! The `Backend` traits over the kernels, for `f32` elements (the kernels'
//! type), one ops trait per file as burn's backends do: argument checks,
//! launches and the small host steps between launches (offsets from
//! per-tile counts; the segments' layout of the segmented top-k, in
//! `radix.rs`).
//! Kernels that only move or order elements take their `u32` bit patterns
//! ([`CubeBuffer::bits`]).

mod air;
mod buffer;
mod codec;
mod dense;
mod hash;
mod index;
mod radix;
mod reduce;
mod select;

use crate::kernels::{TILE, cubes_for, grid, outside, stats};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{Error, Result};

/// One-pass statistics of `|x|`.
pub(super) struct Stats {
    max_key: u32,
    above: usize,
    sum: f64,
    squares: f64,
}

/// `(start, end, segment)` of every tile of the segments `keep` accepts.
pub(super) fn tiles(offsets: &[usize], keep: impl Fn(usize) -> bool) -> Vec<u32> {
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

impl<R: Runtime> CubeBackend<R> {
    /// The error naming the first NaN of `x` (the slow path: taken only once
    /// a kernel has counted one).
    pub(super) fn first_nan(&self, x: &CubeBuffer<u32>) -> Error {
        self.first_key_above(x, 0x7f80_0000)
    }

    /// The [`Error::NonFinite`] naming the first element of `x` whose
    /// magnitude key is above `limit` (infinity's key for NaN only, just
    /// below it for any non-finite value).
    pub(super) fn first_key_above(&self, x: &CubeBuffer<u32>, limit: u32) -> Error {
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
    pub(super) fn check_range(
        &self,
        indices: &CubeBuffer<u32>,
        lo: u32,
        len: usize,
        dim: u64,
    ) -> Result<()> {
        if indices.len == 0 {
            return Ok(());
        }
        let count = self.zeroed::<u32>(1);
        let len32 = len.min(u32::MAX as usize) as u32;
        self.launch(Reads::Whole, |c| {
            outside::launch_count_outside(
                c,
                grid(cubes_for(indices.len)),
                indices,
                lo,
                len32,
                &count,
            )
        });
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

    /// Whether each buffer holds only finite values: one stats reduction
    /// per buffer, one readback of all their partial results.
    pub(super) fn finite_each(&self, xs: &[&CubeBuffer<u32>]) -> Result<Vec<bool>> {
        let parts: Vec<CubeBuffer<u32>> =
            xs.iter().map(|x| self.stats_parts(x, u32::MAX)).collect();
        let host = self.get_many(&parts.iter().collect::<Vec<_>>())?;
        // NaN counted apart (word 2); an infinity's magnitude key is the
        // largest a finite value cannot reach.
        Ok(host
            .iter()
            .map(|p| p.chunks(5).all(|c| c[2] == 0 && c[0] < 0x7f80_0000))
            .collect())
    }

    /// The stats kernel's partial results over `x`: five words per tile
    /// (largest magnitude key, count above `tkey`, NaN count, sum, sum of
    /// squares); nothing launched for an empty `x`.
    fn stats_parts(&self, x: &CubeBuffer<u32>, tkey: u32) -> CubeBuffer<u32> {
        let cubes = x.len.div_ceil(TILE);
        let parts = self.uninit::<u32>(cubes * 5);
        if cubes > 0 {
            self.launch(Reads::Whole, |c| {
                stats::launch_abs_stats(c, grid(cubes), x, tkey, &parts)
            });
        }
        parts
    }

    pub(super) fn stats(&self, x: &CubeBuffer<u32>, tkey: u32) -> Result<Stats> {
        let mut st = Stats {
            max_key: 0,
            above: 0,
            sum: 0.0,
            squares: 0.0,
        };
        if x.len == 0 {
            return Ok(st);
        }
        let parts = self.stats_parts(x, tkey);
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
