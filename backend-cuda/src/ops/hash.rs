//! [`HashOps`]: Zen's hierarchical hashing.

use crate::kernels::hash::{self, HashArgs};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::backend::check_len;
use sparse_core::{HashOps, HashPartitions, HierarchicalHash, Result};

/// The device buffers one hashing leaves: the slots of every partition
/// (index + 1 and value bits, 0 where empty), the per-partition serial
/// counters plus the fallback count, and the fallback pairs.
struct Placed {
    slots: CubeBuffer<u32>,
    counters: CubeBuffer<u32>,
    fallback: CubeBuffer<u32>,
}

impl<R: Runtime> HashOps<f32> for CubeBackend<R> {
    fn hash_partition(
        &self,
        indices: &CubeBuffer<u32>,
        values: &CubeBuffer<f32>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<f32>> {
        check_len("hash_partition indices vs values", indices.len, values.len)?;
        let placed = self.place(indices, values, h);
        self.collect(&placed, h, indices.len)
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// Zen's Alg. 1 on the device: one claim and one confirm launch per
    /// rehash function, then the serial slots and the fallback.
    fn place(
        &self,
        indices: &CubeBuffer<u32>,
        values: &CubeBuffer<f32>,
        h: &HierarchicalHash,
    ) -> Placed {
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
        let a = HashArgs {
            indices,
            values: &vals,
            state: &state,
            slots: &slots,
            counters: &counters,
            fallback: &fallback,
            tables: &tables,
            parts,
            r1,
            r2,
        };
        if n > 0 {
            for f in 1..=h.rehash.len() as u32 {
                for confirm in [false, true] {
                    self.launch(Reads::Whole, |c| hash::launch_round(c, &a, f, confirm));
                }
            }
            self.launch(Reads::Whole, |c| hash::launch_serial(c, &a));
        }
        Placed {
            slots,
            counters,
            fallback,
        }
    }

    /// The partitions on the host, from one readback of the slots and the
    /// counters (and of the fallback pairs, where any spilled).
    fn collect(
        &self,
        placed: &Placed,
        h: &HierarchicalHash,
        n: usize,
    ) -> Result<HashPartitions<f32>> {
        let parts = h.h0.partitions();
        let (r1, r2) = (h.r1, h.r2);
        let width = r1 as usize + r2 as usize;
        let slots = self.get(&placed.slots)?;
        let counters = self.get(&placed.counters)?;
        let spilled = counters[parts as usize] as usize;
        let fallback = if spilled > 0 {
            self.get(&placed.fallback)?
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
