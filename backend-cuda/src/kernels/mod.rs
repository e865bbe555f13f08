//! The kernels, one primitive per file, each beside its launcher.
//!
//! Conventions shared by every kernel:
//! - elements travel as their `u32` bit patterns wherever only their order
//!   matters (keys, compaction, histograms): integer comparisons are exact on
//!   every device, so integer outputs equal the CPU reference bit for bit;
//! - cubes have [`UNITS`] units; a *tile* is the stretch of input one cube
//!   owns ([`TILE`] elements, fewer at a segment's end). Tiles never cross a
//!   segment, so the same kernels serve whole buffers (one segment) and
//!   SparDL's block / SparCML's bucket top-k (many);
//! - the WGSL path offers atomic load, store, exchange and add only, and no
//!   plane operations: scans use shared memory, counters use atomic add;
//! - every `sync_cube` sits in uniform control flow (never inside a branch
//!   on the unit or the data), as WGSL requires.

// Kernel bodies are cubecl's device language, not host Rust: index loops
// become device loops, and nested ifs keep each bounds check ahead of the
// read it guards.
#![allow(
    clippy::collapsible_if,
    clippy::needless_range_loop,
    clippy::assign_op_pattern
)]

pub(crate) mod air;
pub(crate) mod axpy;
pub(crate) mod bitmap;
pub(crate) mod compact;
pub(crate) mod count;
pub(crate) mod feedback;
pub(crate) mod fill;
pub(crate) mod gather;
pub(crate) mod hash;
pub(crate) mod histogram;
pub(crate) mod mask;
pub(crate) mod outside;
pub(crate) mod qsgd;
pub(crate) mod scale;
pub(crate) mod scatter;
pub(crate) mod segmented;
pub(crate) mod short;
pub(crate) mod stats;

use cubecl::prelude::*;

/// Units per cube.
pub(crate) const UNITS: u32 = 256;
/// Elements each unit handles in a tile.
pub(crate) const ITEMS: usize = 16;
/// Elements per tile.
pub(crate) const TILE: usize = UNITS as usize * ITEMS;

/// Key orders (comptime codes of [`sparse_core::KeyOrder`]).
pub(crate) const ABS: u32 = 0;
pub(crate) const SIGNED: u32 = 1;
pub(crate) const REVERSED: u32 = 2;

/// The comptime code of a key order.
pub(crate) fn order_code(order: sparse_core::KeyOrder) -> u32 {
    match order {
        sparse_core::KeyOrder::Abs => ABS,
        sparse_core::KeyOrder::Signed => SIGNED,
        sparse_core::KeyOrder::SignedReversed => REVERSED,
    }
}

/// The key of an `f32` bit pattern in `order`: [`sparse_core::abs_key`],
/// [`sparse_core::signed_key`] or its complement, on 32 bits.
#[cube]
pub(crate) fn key_of(bits: u32, #[comptime] order: u32) -> u32 {
    let signed = select(bits >= 0x8000_0000u32, !bits, bits | 0x8000_0000u32);
    let mut k = bits & 0x7fff_ffffu32;
    if comptime![order == SIGNED] {
        k = signed;
    }
    if comptime![order == REVERSED] {
        k = !signed;
    }
    k
}

/// Records an index at or past the length of the buffer it addresses, in
/// the backend's four fault words: `fault[0]` counts such indices,
/// `fault[1]` is `u32::MAX` minus the first bad position (a maximum, so
/// zeroed words need no other initial value), `fault[2]` the largest bad
/// index and `fault[3]` the largest length checked against. The host reads
/// them at the next download ([`crate::CubeBackend`]'s deferred check).
#[cube]
pub(crate) fn record_fault(fault: &mut [Atomic<u32>], j: u32, i: u32, len: u32) {
    fault[0].fetch_add(1u32);
    fault[1].fetch_max(u32::MAX - j);
    fault[2].fetch_max(i);
    fault[3].fetch_max(len);
}

/// [`sparse_core::mix32`].
#[cube]
fn mix32(v: u32) -> u32 {
    let mut x = v;
    x ^= x >> 16u32;
    x *= 0x7feb_352du32;
    x ^= x >> 15u32;
    x *= 0x846c_a68bu32;
    x ^= x >> 16u32;
    x
}

/// [`sparse_core::CounterRng::u32_at`] of counter `c` under the keys
/// [`sparse_core::CounterRng::keys`].
#[cube]
pub(crate) fn counter_u32(c: u32, key0: u32, key1: u32) -> u32 {
    mix32(mix32(c ^ key0) + key1)
}

/// The high word of the 64-bit product `a * b`, in 32-bit arithmetic
/// (WGSL has no 64-bit integers): from the four 16-bit partial products.
#[cube]
pub(crate) fn mul_hi(a: u32, b: u32) -> u32 {
    let (a0, a1) = (a & 0xffffu32, a >> 16u32);
    let (b0, b1) = (b & 0xffffu32, b >> 16u32);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u32) + (p01 & 0xffffu32) + (p10 & 0xffffu32);
    a1 * b1 + (p01 >> 16u32) + (p10 >> 16u32) + (mid >> 16u32)
}

/// Whether an `f32` bit pattern is NaN.
#[cube]
pub(crate) fn is_nan(bits: u32) -> bool {
    (bits & 0x7fff_ffffu32) > 0x7f80_0000u32
}

/// Exclusive prefix sum of one value per unit across the cube
/// (Hillis-Steele over shared memory). Every unit of the cube must call it:
/// it synchronizes.
#[cube]
pub(crate) fn cube_exclusive_scan(v: u32) -> u32 {
    let mut scratch = Shared::<[u32]>::new_slice(UNITS as usize);
    let u = UNIT_POS as usize;
    scratch[u] = v;
    sync_cube();
    #[unroll]
    for step in 0..8u32 {
        let off = 1usize << step as usize;
        let mut add = 0u32;
        if u >= off {
            add = scratch[u - off];
        }
        sync_cube();
        scratch[u] += add;
        sync_cube();
    }
    scratch[u] - v
}

/// Sum (or, with `take_max`, maximum) of one value per unit, returned to
/// every unit: a tree over shared memory.
#[cube]
pub(crate) fn cube_reduce<N: Numeric>(v: N, #[comptime] take_max: bool) -> N {
    let mut scratch = Shared::<[N]>::new_slice(UNITS as usize);
    let u = UNIT_POS as usize;
    scratch[u] = v;
    sync_cube();
    #[unroll]
    for step in 0..8u32 {
        let off = (UNITS as usize) >> (step as usize + 1);
        if u < off {
            if comptime![take_max] {
                scratch[u] = max(scratch[u], scratch[u + off]);
            } else {
                scratch[u] = scratch[u] + scratch[u + off];
            }
        }
        sync_cube();
    }
    scratch[0]
}

/// A launch grid of `cubes` cubes: at most 65535 along x (the WGSL limit),
/// the rest along y. Kernels read `CUBE_POS` and skip positions past their
/// work.
pub(crate) fn grid(cubes: usize) -> CubeCount {
    let cubes = cubes.max(1) as u32;
    let x = cubes.min(65_535);
    CubeCount::Static(x, cubes.div_ceil(x), 1)
}

/// One dimension of [`UNITS`] units.
pub(crate) fn cube_dim() -> CubeDim {
    CubeDim::new_1d(UNITS)
}

/// Cubes for one unit per item.
pub(crate) fn cubes_for(items: usize) -> usize {
    items.div_ceil(UNITS as usize)
}
