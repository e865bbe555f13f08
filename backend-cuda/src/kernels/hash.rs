//! Zen's hierarchical hashing (Alg. 1) in parallel rounds.
//!
//! Round `f` (one per rehash function): every entry not yet placed reads
//! its slot `h_f(i) mod r1` in partition `h0(i)` and, if empty, writes its
//! index there ([`hash_claim`]); after the launch ends, each such entry reads
//! the slot back ([`hash_confirm`]) and owns it only if it reads its own
//! index. Between the two launches no slot changes, so exactly one writer
//! wins each slot: this read-after-write check needs no compare-exchange,
//! which the WGSL path lacks. Entries still unplaced take a position in the
//! partition's serial overflow area from an atomic counter, and past its end
//! an atomic position in the fallback list ([`hash_serial`]): nothing is
//! lost.
//!
//! Slots are pairs `(index + 1, value bits)`; 0 marks an empty slot.
//! `tables` holds `h0`'s 1024 table words, then each rehash function's.

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// Simple tabulation hashing, the function at `tables[base..base + 1024]`
/// ([`sparse_core::UniversalHash::hash`]).
#[cube]
fn tab_hash(tables: &[u32], base: usize, x: u32) -> u32 {
    tables[base + (x & 0xffu32) as usize]
        ^ tables[base + 256 + ((x >> 8) & 0xffu32) as usize]
        ^ tables[base + 512 + ((x >> 16) & 0xffu32) as usize]
        ^ tables[base + 768 + (x >> 24) as usize]
}

/// Slot of index `i` under rehash function `f` (1-based).
#[cube]
fn slot_of(tables: &[u32], i: u32, parts: u32, r1: u32, width: u32, f: u32) -> usize {
    let part = tab_hash(tables, 0, i) % parts;
    part as usize * width as usize + (tab_hash(tables, f as usize * 1024, i) % r1) as usize
}

/// Round `f`, write: unplaced entries (`state[j] == 0`) write into empty
/// slots.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn hash_claim(
    indices: &[u32],
    state: &[u32],
    slots: &mut [Atomic<u32>],
    tables: &[u32],
    parts: u32,
    r1: u32,
    width: u32,
    f: u32,
) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        if state[j] == 0u32 {
            let i = indices[j];
            let q = slot_of(tables, i, parts, r1, width, f);
            if slots[q * 2].load() == 0u32 {
                slots[q * 2].store(i + 1);
            }
        }
    }
}

/// Round `f`, read back: the entry that reads its own index owns the slot.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn hash_confirm(
    indices: &[u32],
    values: &[u32],
    state: &mut [u32],
    slots: &mut [Atomic<u32>],
    tables: &[u32],
    parts: u32,
    r1: u32,
    width: u32,
    f: u32,
) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        if state[j] == 0u32 {
            let i = indices[j];
            let q = slot_of(tables, i, parts, r1, width, f);
            if slots[q * 2].load() == i + 1 {
                slots[q * 2 + 1].store(values[j]);
                state[j] = 1u32;
            }
        }
    }
}

/// The serial overflow area (`counters[p]` counts partition `p`'s requests)
/// and the fallback list (`counters[parts]` counts its entries; `fallback`
/// holds `(index, value bits)` pairs).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn hash_serial(
    indices: &[u32],
    values: &[u32],
    state: &[u32],
    counters: &mut [Atomic<u32>],
    slots: &mut [Atomic<u32>],
    fallback: &mut [u32],
    tables: &[u32],
    parts: u32,
    r1: u32,
    r2: u32,
) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        if state[j] == 0u32 {
            let i = indices[j];
            let part = tab_hash(tables, 0, i) % parts;
            let c = counters[part as usize].fetch_add(1u32);
            if c < r2 {
                let q = part as usize * (r1 + r2) as usize + (r1 + c) as usize;
                slots[q * 2].store(i + 1);
                slots[q * 2 + 1].store(values[j]);
            } else {
                let at = counters[parts as usize].fetch_add(1u32) as usize;
                fallback[at * 2] = i;
                fallback[at * 2 + 1] = values[j];
            }
        }
    }
}

/// Launches [`hash_claim`] on `cubes` cubes of [`super::UNITS`] units.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_hash_claim(
    client: &Client,
    cubes: CubeCount,
    indices: &CubeBuffer<u32>,
    state: &CubeBuffer<u32>,
    slots: &CubeBuffer<u32>,
    tables: &CubeBuffer<u32>,
    parts: u32,
    r1: u32,
    width: u32,
    f: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        hash_claim::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            indices.arg(),
            state.arg(),
            slots.arg(),
            tables.arg(),
            parts,
            r1,
            width,
            f,
        );
    }
}

/// Launches [`hash_confirm`] on `cubes` cubes of [`super::UNITS`] units.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_hash_confirm(
    client: &Client,
    cubes: CubeCount,
    indices: &CubeBuffer<u32>,
    values: &CubeBuffer<u32>,
    state: &CubeBuffer<u32>,
    slots: &CubeBuffer<u32>,
    tables: &CubeBuffer<u32>,
    parts: u32,
    r1: u32,
    width: u32,
    f: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        hash_confirm::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            indices.arg(),
            values.arg(),
            state.arg(),
            slots.arg(),
            tables.arg(),
            parts,
            r1,
            width,
            f,
        );
    }
}

/// Launches [`hash_serial`] on `cubes` cubes of [`super::UNITS`] units.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_hash_serial(
    client: &Client,
    cubes: CubeCount,
    indices: &CubeBuffer<u32>,
    values: &CubeBuffer<u32>,
    state: &CubeBuffer<u32>,
    counters: &CubeBuffer<u32>,
    slots: &CubeBuffer<u32>,
    fallback: &CubeBuffer<u32>,
    tables: &CubeBuffer<u32>,
    parts: u32,
    r1: u32,
    r2: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        hash_serial::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            indices.arg(),
            values.arg(),
            state.arg(),
            counters.arg(),
            slots.arg(),
            fallback.arg(),
            tables.arg(),
            parts,
            r1,
            r2,
        );
    }
}
