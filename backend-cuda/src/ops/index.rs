//! [`IndexOps`]: gathers of indices and the bitmap codec.

use crate::kernels::{TILE, bitmap, cubes_for, gather, grid};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::backend::check_len;
use sparse_core::{IndexOps, Result};

impl<R: Runtime> IndexOps for CubeBackend<R> {
    fn gather_indices(
        &self,
        src: &CubeBuffer<u32>,
        positions: &CubeBuffer<u32>,
    ) -> Result<CubeBuffer<u32>> {
        let out = self.uninit::<u32>(positions.len);
        if positions.len > 0 {
            self.launch(Reads::Part, |c| {
                gather::launch_gather(
                    c,
                    grid(cubes_for(positions.len)),
                    src,
                    positions,
                    &out,
                    &self.fault(),
                )
            });
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
            self.launch(Reads::Whole, |c| {
                bitmap::launch_bitmap_flags(c, grid(cubes_for(indices.len)), indices, lo, &flags)
            });
        }
        self.launch(Reads::Part, |c| {
            bitmap::launch_bitmap_pack(c, grid(cubes_for(nw)), &flags, &words)
        });
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
        self.launch(Reads::Whole, |c| {
            bitmap::launch_bitmap_count(c, grid(nt), words, len as u32, &counts)
        });
        let mut bases = Vec::with_capacity(nt);
        let mut total = 0u32;
        for c in self.get(&counts)? {
            bases.push(total);
            total += c;
        }
        let out = self.uninit::<u32>(total as usize);
        if total > 0 {
            let bases = self.put(&bases);
            self.launch(Reads::Whole, |c| {
                bitmap::launch_bitmap_write(c, grid(nt), words, len as u32, lo, &bases, &out)
            });
        }
        Ok(out)
    }
}
