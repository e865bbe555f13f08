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

/// Launches the kernel `$kernel` (a `#[cube(launch_unchecked)]` function
/// in scope) on `client` over the grid `$cubes` of [`UNITS`]-unit cubes:
/// the buffers first, each as its [`crate::CubeBuffer::arg`] (which covers
/// exactly its allocation), then the other arguments, in the kernel's
/// order. It expands to the unchecked launch, so each launcher writes it
/// inside `unsafe`, with the reason the kernel stays within those buffers.
/// (Defined before the kernel modules, so in scope in each.)
macro_rules! launch_kernel {
    ($kernel:ident, $client:expr, $cubes:expr, [$($buffer:expr),* $(,)?] $(, $arg:expr)* $(,)?) => {
        $kernel::launch_unchecked(
            $client,
            $cubes,
            $crate::kernels::cube_dim(),
            $($buffer.arg(),)*
            $($arg),*
        )
    };
}

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

/// A cube's shared histogram of `bins` counters, zeroed (each unit clears
/// every [`UNITS`]-th bin). Every unit of the cube must call it: it
/// synchronizes.
#[cube]
pub(crate) fn zeroed_bins(#[comptime] bins: usize) -> Shared<[Atomic<u32>]> {
    let local = Shared::<[Atomic<u32>]>::new_slice(bins);
    let mut b = UNIT_POS as usize;
    while b < bins {
        local[b].store(0u32);
        b += UNITS as usize;
    }
    sync_cube();
    local
}

/// Adds the non-zero counters of a cube's shared histogram `local` to
/// `hist[row..row + bins]` with global atomics (each unit every
/// [`UNITS`]-th bin).
#[cube]
pub(crate) fn add_bins(
    local: &Shared<[Atomic<u32>]>,
    hist: &mut [Atomic<u32>],
    row: usize,
    #[comptime] bins: usize,
) {
    let mut b = UNIT_POS as usize;
    while b < bins {
        let c = local[b].load();
        if c > 0u32 {
            hist[row + b].fetch_add(c);
        }
        b += UNITS as usize;
    }
}

/// Over `x[lo..hi]`, every `step`-th element: how many keys (in `order`)
/// are above `key`, how many equal it, how many elements are NaN and how
/// many infinite.
#[cube]
pub(crate) fn tally(
    x: &[u32],
    lo: usize,
    hi: usize,
    key: u32,
    #[comptime] step: usize,
    #[comptime] order: u32,
) -> (u32, u32, u32, u32) {
    let mut above = 0u32;
    let mut equal = 0u32;
    let mut nan = 0u32;
    let mut inf = 0u32;
    let mut i = lo;
    while i < hi {
        let bits = x[i];
        let k = key_of(bits, order);
        if k > key {
            above += 1;
        }
        if k == key {
            equal += 1;
        }
        if is_nan(bits) {
            nan += 1;
        }
        if (bits & 0x7fff_ffffu32) == 0x7f80_0000u32 {
            inf += 1;
        }
        i += step;
    }
    (above, equal, nan, inf)
}

/// How many of `equal` keys equal to the k-th one are taken where `before`
/// came earlier in index order and `take` are taken in all.
#[cube]
pub(crate) fn quota(take: u32, before: u32, equal: u32) -> u32 {
    let mut q = 0u32;
    if take > before {
        q = min(take - before, equal);
    }
    q
}

/// The collection of one tile `x[start..end]` against the k-th key `key`:
/// each unit takes its [`ITEMS`] consecutive elements and writes, in index
/// order, the indices of those whose keys are above `key` from
/// `tmp[start]` on and of those equal to it from `tmp[back - 1]` down (two
/// cube-wide scans place them after the units before). Returns the
/// unit's counts past its elements, above and equal (the last unit's:
/// the tile's), and its NaNs and infinities. Every unit of the cube must
/// call it: it synchronizes.
#[cube]
pub(crate) fn collect_tile(
    x: &[u32],
    tmp: &mut [u32],
    start: usize,
    end: usize,
    back: usize,
    key: u32,
    #[comptime] order: u32,
) -> (u32, u32, u32, u32) {
    let lo = min(start + UNIT_POS as usize * ITEMS, end);
    let hi = min(lo + ITEMS, end);
    let (above, equal, nan, inf) = tally(x, lo, hi, key, 1usize, order);
    let mut a = cube_exclusive_scan(above);
    let mut e = cube_exclusive_scan(equal);
    for i in lo..hi {
        let k = key_of(x[i], order);
        if k > key {
            tmp[start + a as usize] = i as u32;
            a += 1;
        }
        if k == key {
            tmp[back - 1 - e as usize] = i as u32;
            e += 1;
        }
    }
    (a, e, nan, inf)
}

/// A tile's two lists in the scratch buffer, as a collection left them:
/// `above` indices from `start` on, `q` taken of those equal to the k-th
/// key from `back` down; their merge goes to the output from `base`.
#[derive(CubeType)]
pub(crate) struct TileLists {
    pub start: usize,
    pub back: usize,
    pub above: u32,
    pub q: u32,
    pub base: u32,
}

/// Merges a tile's two lists (`t`) in index order into the output at
/// `t.base`, with their values from `x` (a binary search of each entry in
/// the other list gives its place); with `zero`, each selected element of
/// `x` becomes `+0.0` once its value is out.
#[cube]
pub(crate) fn emit_lists(
    x: &mut [u32],
    tmp: &[u32],
    t: &TileLists,
    out_idx: &mut [u32],
    out_val: &mut [u32],
    #[comptime] zero: bool,
) {
    let mut j = UNIT_POS;
    while j < t.above {
        let i = tmp[t.start + j as usize];
        let pos = (t.base + j + below(tmp, t.back, t.q, i, true)) as usize;
        emit_one(x, i, pos, out_idx, out_val, zero);
        j += UNITS;
    }
    let mut r = UNIT_POS;
    while r < t.q {
        let i = tmp[t.back - r as usize];
        let pos = (t.base + r + below(tmp, t.start, t.above, i, false)) as usize;
        emit_one(x, i, pos, out_idx, out_val, zero);
        r += UNITS;
    }
}

/// Index `i` and its value at output position `pos` (nothing past the
/// output's end); with `zero`, `x[i]` becomes `+0.0`.
#[cube]
fn emit_one(
    x: &mut [u32],
    i: u32,
    pos: usize,
    out_idx: &mut [u32],
    out_val: &mut [u32],
    #[comptime] zero: bool,
) {
    if pos < out_idx.len() {
        out_idx[pos] = i;
        out_val[pos] = x[i as usize];
        if comptime![zero] {
            x[i as usize] = 0u32;
        }
    }
}

/// How many of the `len` increasing indices in `tmp` (from `from`, every
/// `step`-th word: 1 forward, or backwards with `back`) are below `i`.
#[cube]
pub(crate) fn below(tmp: &[u32], from: usize, len: u32, i: u32, #[comptime] back: bool) -> u32 {
    let mut lo = 0u32;
    let mut hi = len;
    while lo < hi {
        let mid = (lo + hi) / 2u32;
        let mut at = from + mid as usize;
        if comptime![back] {
            at = from - mid as usize;
        }
        if tmp[at] < i {
            lo = mid + 1u32;
        } else {
            hi = mid;
        }
    }
    lo
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
