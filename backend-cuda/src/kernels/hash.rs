//! Zen's hierarchical hashing (Alg. 1) in parallel rounds.
//!
//! Round `f` (one per rehash function, two launches of [`hash_round`]):
//! every entry not yet placed reads its slot `h_f(i) mod r1` in partition
//! `h0(i)` and, if empty, writes its index there (the claim); after the
//! launch ends, each such entry reads the slot back (the confirmation) and
//! owns it only if it reads its own index. Between the two launches no slot changes, so exactly one writer
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

/// Round `f`, one of its two launches. The claim: unplaced entries
/// (`state[j] == 0`) write their index into empty slots. The confirmation
/// (`confirm`, after the claim's launch has ended): the entry that reads
/// its own index back owns the slot, writes its value there and is placed.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn hash_round(
    indices: &[u32],
    values: &[u32],
    state: &mut [u32],
    slots: &mut [Atomic<u32>],
    tables: &[u32],
    parts: u32,
    r1: u32,
    width: u32,
    f: u32,
    #[comptime] confirm: bool,
) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        if state[j] == 0u32 {
            let i = indices[j];
            let q = slot_of(tables, i, parts, r1, width, f);
            if comptime![confirm] {
                if slots[q * 2].load() == i + 1 {
                    slots[q * 2 + 1].store(values[j]);
                    state[j] = 1u32;
                }
            } else if slots[q * 2].load() == 0u32 {
                slots[q * 2].store(i + 1);
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

/// The buffers and sizes of one hashing: the entries (indices and value
/// bits), their placement state (1 once placed), the slots (`parts`
/// partitions of `r1` hashed and `r2` serial slots, two words each), the
/// serial counters (one a partition, then the fallback's), the fallback
/// pairs and the tabulation tables (`h0`'s, then each rehash function's).
pub(crate) struct HashArgs<'a> {
    pub indices: &'a CubeBuffer<u32>,
    pub values: &'a CubeBuffer<u32>,
    pub state: &'a CubeBuffer<u32>,
    pub slots: &'a CubeBuffer<u32>,
    pub counters: &'a CubeBuffer<u32>,
    pub fallback: &'a CubeBuffer<u32>,
    pub tables: &'a CubeBuffer<u32>,
    pub parts: u32,
    pub r1: u32,
    pub r2: u32,
}

impl HashArgs<'_> {
    /// One unit per entry.
    fn entry_grid(&self) -> CubeCount {
        super::grid(super::cubes_for(self.indices.len))
    }
}

// SAFETY (both launchers): every buffer argument covers exactly its
// allocation (`CubeBuffer::arg`), and the kernels bounds-check their
// accesses against those lengths and the offsets their caller derived from
// them.

/// Launches round `f` of [`hash_round`]: its claim, or with `confirm` its
/// confirmation.
pub(crate) fn launch_round(client: &Client, a: &HashArgs<'_>, f: u32, confirm: bool) {
    let width = (a.r1 as usize + a.r2 as usize) as u32;
    unsafe {
        launch_kernel!(
            hash_round,
            client,
            a.entry_grid(),
            [a.indices, a.values, a.state, a.slots, a.tables],
            a.parts,
            a.r1,
            width,
            f,
            confirm
        )
    }
}

/// Launches [`hash_serial`]: the entries no round placed.
pub(crate) fn launch_serial(client: &Client, a: &HashArgs<'_>) {
    unsafe {
        launch_kernel!(
            hash_serial,
            client,
            a.entry_grid(),
            [
                a.indices, a.values, a.state, a.counters, a.slots, a.fallback, a.tables
            ],
            a.parts,
            a.r1,
            a.r2
        )
    }
}
