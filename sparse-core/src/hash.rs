//! Seeded hashing shared by every rank and backend.
//!
//! Everything here uses 32-bit integer arithmetic only (xor, shifts, wrapping
//! multiplies, table lookups), so a GPU kernel without 64-bit integers (WGSL)
//! computes bit-identical results.
//!
//! - [`mix32`] and [`CounterRng`]: a counter-based generator (the value for
//!   counter `c` is a pure function of the seed and `c`), used by QSGD's
//!   stochastic rounding so that every backend draws the same numbers.
//! - [`UniversalHash`]: simple tabulation hashing, a 3-independent (hence
//!   universal) family, seeded.
//! - [`H0`]: Zen's partition function `h0`, shared by all ranks.
//! - [`HierarchicalHash`]: `h0` plus the `k` rehash functions of Zen Alg. 1.
//! - [`fnv1a`]: the host's digest of bytes (64-bit, so not for kernels);
//!   [`digest_words`] the same kind of digest of 64-bit words, for large
//!   arrays (a step's results).

/// A bijective 32-bit finalizer with strong avalanche ("lowbias32", C.
/// Wellons' hash prospector).
#[inline]
pub fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// FNV-1a (64 bits) of `bytes`: the digests the ranks compare (weights,
/// results, settings) and user algorithms' identifiers. Host only, not
/// seeded, not for partitioning.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A digest of 64-bit words (host only, not seeded): four FNV-1a-style
/// lanes, word `i` folded into lane `i mod 4` as `lane = (lane ^ word) *
/// FNV prime`, the lanes and the word count then digested by [`fnv1a`].
/// One multiply per 8 bytes in four independent chains, where [`fnv1a`]
/// makes one per byte in one: the trainer's commit round digests each
/// step's results with it (a dense layer's whole sum; `benches/digest.rs`
/// of the bench crate times both).
///
/// Any one word changed changes its lane before the fold (`x -> (x ^ w) *
/// prime` is a bijection for each `w`, the prime odd); the fold of the
/// lanes by [`fnv1a`] is not proven to keep every such change (a miss is
/// a 64-bit coincidence). Like [`fnv1a`] it is not collision resistant
/// against an adversary, only a check that ranks hold the same values.
/// Callers that pack smaller values into words must keep the packing
/// unambiguous: two `f32` a word with the last alone makes `[a]` and
/// `[+0.0, a]` one word each and the same; [`digest_f32`] packs so and
/// adds the values' count.
pub fn digest_words(words: impl IntoIterator<Item = u64>) -> u64 {
    const PRIME: u64 = 0x100_0000_01b3;
    let basis = 0xcbf2_9ce4_8422_2325u64;
    let mut lanes = [basis, basis ^ 1, basis ^ 2, basis ^ 3];
    let mut n = 0u64;
    let mut words = words.into_iter();
    'words: loop {
        for lane in &mut lanes {
            let Some(w) = words.next() else {
                break 'words;
            };
            *lane = (*lane ^ w).wrapping_mul(PRIME);
            n += 1;
        }
    }
    fnv1a(lanes.iter().chain([&n]).flat_map(|x| x.to_le_bytes()))
}

/// [`digest_words`] of `values`' bits, two values a word (the last alone
/// where their number is odd), then their number: the trainer's digest of
/// a dense result.
pub fn digest_f32(values: &[f32]) -> u64 {
    digest_words(
        values
            .chunks(2)
            .map(|c| c.iter().fold(0u64, |w, x| w << 32 | u64::from(x.to_bits())))
            .chain([values.len() as u64]),
    )
}

/// SplitMix64: a small sequential generator used to expand seeds (host only).
///
/// Seeds of hash functions only; synthetic data and test inputs draw from
/// the named `rand` generator ([`crate::generate::Rng`]).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Next 32 random bits.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in `0..n` (`n > 0`), by rejection (unbiased).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let r = self.next_u64();
            if r < zone {
                return r % n;
            }
        }
    }
}

/// Counter-based generator: `u32_at(c)` depends only on the seed and `c`.
///
/// Two keys derived from the seed are mixed with the counter in two rounds of
/// [`mix32`]. A kernel reproduces it from [`CounterRng::keys`].
///
/// It is kept instead of a `rand` generator because QSGD's stochastic
/// rounding draws it on the host and in the kernels of `backend-cuda`,
/// which must reproduce every draw bit for bit with 32-bit integer
/// operations only, and each draw must be addressable by its counter so
/// that any unit can compute its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRng {
    key0: u32,
    key1: u32,
}

impl CounterRng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut s = SplitMix64(seed);
        Self {
            key0: s.next_u32(),
            key1: s.next_u32(),
        }
    }
    /// The two 32-bit keys (for kernels).
    pub fn keys(&self) -> [u32; 2] {
        [self.key0, self.key1]
    }
    /// 32 random bits for counter `c`.
    #[inline]
    pub fn u32_at(&self, c: u32) -> u32 {
        mix32(mix32(c ^ self.key0).wrapping_add(self.key1))
    }
    /// Uniform in `[0, 1)` with 24 random bits, exactly representable in
    /// `f32`: `(u32_at(c) >> 8) * 2^-24`.
    #[inline]
    pub fn unit_f32_at(&self, c: u32) -> f32 {
        (self.u32_at(c) >> 8) as f32 * (1.0 / 16_777_216.0)
    }
}

/// One function of the simple tabulation family: four tables of 256 random
/// words, `h(x) = T0[x0] ^ T1[x1] ^ T2[x2] ^ T3[x3]` over the bytes of `x`.
///
/// Simple tabulation is 3-independent (Patrascu and Thorup 2012), so it is a
/// universal family as Zen requires of `h0` and of the rehash functions.
#[derive(Clone, PartialEq, Eq)]
pub struct UniversalHash {
    tables: Box<[u32; 1024]>,
    seed: u64,
}

impl std::fmt::Debug for UniversalHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UniversalHash")
            .field("seed", &self.seed)
            .finish()
    }
}

impl UniversalHash {
    /// The function drawn from the family by `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = SplitMix64(seed ^ 0x5a17_ab1e_0000_0000);
        let mut tables = Box::new([0u32; 1024]);
        for t in tables.iter_mut() {
            *t = rng.next_u32();
        }
        Self { tables, seed }
    }
    /// The seed it was drawn with.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// The 1024 table words (table `j` at `[256 j .. 256 (j + 1)]`), for
    /// uploading to a device.
    pub fn tables(&self) -> &[u32; 1024] {
        &self.tables
    }
    /// The 32-bit hash of `x`.
    #[inline]
    pub fn hash(&self, x: u32) -> u32 {
        let t = &self.tables;
        t[(x & 0xff) as usize]
            ^ t[256 + ((x >> 8) & 0xff) as usize]
            ^ t[512 + ((x >> 16) & 0xff) as usize]
            ^ t[768 + (x >> 24) as usize]
    }
    /// The hash reduced to `0..m` (`m > 0`) by `hash(x) % m`. The bias is at
    /// most `m / 2^32`; `%` keeps the mapping reproducible on any device.
    #[inline]
    pub fn hash_to(&self, x: u32, m: u32) -> u32 {
        self.hash(x) % m
    }
}

/// Zen's partition function `h0`: index -> partition (server) in
/// `0..partitions`. Every rank builds it from the same seed, so an index maps
/// to the same partition everywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H0 {
    hash: UniversalHash,
    partitions: u32,
}

impl H0 {
    /// `h0` over `partitions` partitions.
    ///
    /// # Errors
    /// [`crate::Error::InvalidParameter`] if `partitions == 0`.
    pub fn new(seed: u64, partitions: u32) -> crate::Result<Self> {
        if partitions == 0 {
            return Err(crate::Error::invalid("partitions", "must be at least 1"));
        }
        Ok(Self {
            hash: UniversalHash::new(seed),
            partitions,
        })
    }
    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }
    /// The seed.
    pub fn seed(&self) -> u64 {
        self.hash.seed()
    }
    /// The underlying hash function.
    pub fn hash(&self) -> &UniversalHash {
        &self.hash
    }
    /// The partition of `idx`.
    #[inline]
    pub fn partition(&self, idx: u32) -> u32 {
        self.hash.hash_to(idx, self.partitions)
    }
    /// Zen's index sets `I_i = { idx < dim : h0(idx) = i }`, each sorted.
    /// Computed once per (dimension, `h0`) and shared by encoder and decoder;
    /// `4 * dim` bytes in all, allocated fallibly.
    ///
    /// # Errors
    /// [`crate::Error::OutOfMemory`] where the allocator refuses.
    pub fn index_sets(&self, dim: usize) -> crate::Result<Vec<Vec<u32>>> {
        let p = self.partitions as usize;
        let mut counts = vec![0usize; p];
        for idx in 0..dim as u32 {
            counts[self.partition(idx) as usize] += 1;
        }
        let mut sets: Vec<Vec<u32>> = counts
            .iter()
            .map(|&c| crate::alloc::try_with_capacity(c, "partition index sets"))
            .collect::<crate::Result<_>>()?;
        for idx in 0..dim as u32 {
            sets[self.partition(idx) as usize].push(idx);
        }
        Ok(sets)
    }
}

/// Zen Alg. 1's hash functions and memory sizes: `h0` (shared by all ranks)
/// picks the partition; `k` rehash functions place an index among `r1`
/// parallel slots of that partition; collisions go to `r2` serial overflow
/// slots through an atomic counter; if those are full too, to an unbounded
/// fallback list (nothing is ever lost).
#[derive(Debug, Clone)]
pub struct HierarchicalHash {
    /// The partition function.
    pub h0: H0,
    /// The rehash functions `h_1 .. h_k`.
    pub rehash: Vec<UniversalHash>,
    /// Parallel slots per partition.
    pub r1: u32,
    /// Serial overflow slots per partition.
    pub r2: u32,
}

impl HierarchicalHash {
    /// Zen's defaults for `nnz` non-zeros: `k = 3`, `r1 = 2 nnz`,
    /// `r2 = r1 / 10` (at least 1 each).
    ///
    /// # Errors
    /// As [`H0::new`].
    pub fn with_defaults(
        h0_seed: u64,
        rehash_seed: u64,
        partitions: u32,
        nnz: usize,
    ) -> crate::Result<Self> {
        let r1 = (2 * nnz).clamp(1, u32::MAX as usize) as u32;
        Self::new(h0_seed, rehash_seed, partitions, 3, r1, (r1 / 10).max(1))
    }

    /// Explicit parameters.
    ///
    /// # Errors
    /// [`crate::Error::InvalidParameter`] if `partitions`, `k` or `r1` is 0.
    pub fn new(
        h0_seed: u64,
        rehash_seed: u64,
        partitions: u32,
        k: usize,
        r1: u32,
        r2: u32,
    ) -> crate::Result<Self> {
        if k == 0 {
            return Err(crate::Error::invalid("k", "at least one rehash function"));
        }
        if r1 == 0 {
            return Err(crate::Error::invalid("r1", "at least one parallel slot"));
        }
        let mut s = SplitMix64(rehash_seed);
        Ok(Self {
            h0: H0::new(h0_seed, partitions)?,
            rehash: (0..k).map(|_| UniversalHash::new(s.next_u64())).collect(),
            r1,
            r2,
        })
    }
}

/// The partitions produced by hierarchical hashing, on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HashPartitions<E> {
    /// Partition `p` is `indices[offsets[p]..offsets[p + 1]]`.
    pub offsets: Vec<usize>,
    /// Indices grouped by partition; order inside a partition unspecified.
    pub indices: Vec<u32>,
    /// The value of each index.
    pub values: Vec<E>,
    /// Indices written to the serial overflow area.
    pub serial: usize,
    /// Indices that found the overflow area full and went to the fallback
    /// list (still delivered: nothing is dropped).
    pub fallback: usize,
}

impl<E> HashPartitions<E> {
    /// Number of entries in each partition.
    pub fn sizes(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// Zen's hierarchical hash partitioning (Alg. 1) on the host: the plain
/// reference that `backend-cpu` runs and the kernels are diffed against.
/// Every entry lands in partition `h.h0(index)`: in the first free slot of
/// its rehash functions' parallel memory (`r1` slots), else in the serial
/// overflow area (`r2` slots), else in a fallback list; nothing is lost.
/// Partition `p` lists its parallel and serial slots in slot order, then
/// its fallback entries in input order. Indices must be unique.
///
/// # Errors
/// [`crate::Error::LengthMismatch`] if `indices` and `values` differ in
/// length; [`crate::Error::OutOfMemory`] if the table of `P (r1 + r2)`
/// slots cannot be allocated.
pub fn partition_host<E: crate::Element>(
    indices: &[u32],
    values: &[E],
    h: &HierarchicalHash,
) -> crate::Result<HashPartitions<E>> {
    use crate::{Error, checks::check_len};
    check_len(
        "hash_partition indices vs values",
        indices.len(),
        values.len(),
    )?;
    let p = h.h0.partitions() as usize;
    let (r1, width) = (h.r1 as usize, h.r1 as usize + h.r2 as usize);
    // Slot value 0 is empty; an index is stored as index + 1 (Zen's
    // indices start at 1 for the same reason).
    // The table is `P (r1 + r2)` slots, sized by the hash's parameters,
    // not by the input: allocated fallibly, so that a table too large
    // for the machine is `OutOfMemory`, not an abort.
    let cells = p.checked_mul(width).ok_or(Error::OutOfMemory {
        what: "hash partition table",
        bytes: u64::MAX,
    })?;
    let mut slots = crate::alloc::try_filled(cells, 0u32, "hash partition table")?;
    let mut slot_val = crate::alloc::try_filled(cells, E::zero(), "hash partition values")?;
    let mut counter = vec![r1; p];
    let mut fallback: Vec<Vec<(u32, E)>> = vec![Vec::new(); p];
    let (mut serial, mut spilled) = (0, 0);
    'entries: for (&idx, &val) in indices.iter().zip(values) {
        let part = h.h0.partition(idx) as usize;
        let row = part * width;
        for f in &h.rehash {
            let q = row + f.hash_to(idx, h.r1) as usize;
            if slots[q] == 0 {
                slots[q] = idx + 1;
                slot_val[q] = val;
                continue 'entries;
            }
        }
        let c = counter[part];
        counter[part] += 1;
        if c < width {
            slots[row + c] = idx + 1;
            slot_val[row + c] = val;
            serial += 1;
        } else {
            fallback[part].push((idx, val));
            spilled += 1;
        }
    }
    let mut out = HashPartitions {
        offsets: vec![0],
        indices: Vec::with_capacity(indices.len()),
        values: Vec::with_capacity(indices.len()),
        serial,
        fallback: spilled,
    };
    for (part, spill) in fallback.iter().enumerate() {
        for q in part * width..(part + 1) * width {
            if slots[q] != 0 {
                out.indices.push(slots[q] - 1);
                out.values.push(slot_val[q]);
            }
        }
        for &(i, v) in spill {
            out.indices.push(i);
            out.values.push(v);
        }
        out.offsets.push(out.indices.len());
    }
    Ok(out)
}

/// What [`partition_host`] counts, without the partitions: Zen Alg. 1's
/// placement replayed on the occupancy of the parallel slots alone, for a
/// caller that needs only the statistics (each partition's entries in index
/// order are the input split by `h0`, which its caller makes directly).
///
/// Only whether a parallel slot is taken decides where the next entry
/// goes (the serial area is a per-partition counter), so a bitmap of the
/// `P r1` parallel slots (`P r1 / 8` bytes, a sixty-fourth of the table's
/// `P (r1 + r2) (4 + E)` bytes) and `P` counters reproduce
/// [`partition_host`]'s `serial` and `fallback` exactly. Both are kept in
/// the struct and reused across calls.
#[derive(Debug, Clone, Default)]
pub struct HashProbe {
    occupied: Vec<u64>,
    overflow: Vec<usize>,
}

impl HashProbe {
    /// An empty probe (it allocates on its first call).
    pub fn new() -> Self {
        Self::default()
    }
    /// `(serial, fallback)` of [`partition_host`] on `indices` (unique)
    /// with `h`.
    ///
    /// # Errors
    /// [`crate::Error::OutOfMemory`] if the bitmap of `P r1` slots cannot
    /// be allocated.
    pub fn probe(
        &mut self,
        indices: &[u32],
        h: &HierarchicalHash,
    ) -> crate::Result<(usize, usize)> {
        self.probe_with(indices, h, |_, _| {})
    }
    /// [`HashProbe::probe`], calling `f(k, part)` for each entry `k` of
    /// `indices`, in order, with its partition `h0(indices[k])` (nothing
    /// is called if the bitmap cannot be allocated).
    ///
    /// # Errors
    /// As [`HashProbe::probe`].
    pub fn probe_with(
        &mut self,
        indices: &[u32],
        h: &HierarchicalHash,
        mut f: impl FnMut(usize, usize),
    ) -> crate::Result<(usize, usize)> {
        let p = h.h0.partitions() as usize;
        let r1 = h.r1 as usize;
        let oom = |bytes: u64| crate::Error::OutOfMemory {
            what: "hash probe bitmap",
            bytes,
        };
        let words = p.checked_mul(r1).ok_or(oom(u64::MAX))?.div_ceil(64);
        self.occupied.clear();
        self.occupied
            .try_reserve(words)
            .map_err(|_| oom(8 * words as u64))?;
        self.occupied.resize(words, 0);
        self.overflow.clear();
        self.overflow.resize(p, 0);
        'entries: for (k, &idx) in indices.iter().enumerate() {
            let part = h.h0.partition(idx) as usize;
            f(k, part);
            let row = part * r1;
            for f in &h.rehash {
                let q = row + f.hash_to(idx, h.r1) as usize;
                let (w, bit) = (q / 64, 1u64 << (q % 64));
                if self.occupied[w] & bit == 0 {
                    self.occupied[w] |= bit;
                    continue 'entries;
                }
            }
            self.overflow[part] += 1;
        }
        let r2 = h.r2 as usize;
        Ok(self.overflow.iter().fold((0, 0), |(serial, fallback), &o| {
            (serial + o.min(r2), fallback + o.saturating_sub(r2))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `digest_words` against the definition written out by index, and
    /// every one-bit change of any word of an array (and its length)
    /// changing it.
    #[test]
    fn digest_words_follows_its_definition_and_sees_every_bit() {
        let reference = |w: &[u64]| {
            let mut lanes = [0u64; 4];
            for (l, lane) in lanes.iter_mut().enumerate() {
                *lane = 0xcbf2_9ce4_8422_2325 ^ l as u64;
            }
            for (i, &x) in w.iter().enumerate() {
                lanes[i % 4] = (lanes[i % 4] ^ x).wrapping_mul(0x100_0000_01b3);
            }
            let mut bytes = Vec::new();
            for x in lanes.iter().chain([&(w.len() as u64)]) {
                bytes.extend(x.to_le_bytes());
            }
            fnv1a(bytes)
        };
        let mut g = SplitMix64(7);
        let w: Vec<u64> = (0..37).map(|_| g.next_u64()).collect();
        for n in 0..=w.len() {
            assert_eq!(
                digest_words(w[..n].iter().copied()),
                reference(&w[..n]),
                "{n}"
            );
        }
        let d = digest_words(w.iter().copied());
        for i in 0..w.len() {
            for bit in 0..64 {
                let mut v = w.clone();
                v[i] ^= 1 << bit;
                assert_ne!(digest_words(v), d, "word {i} bit {bit}");
            }
        }
        assert_ne!(digest_words([0u64]), digest_words([0u64, 0]));
        assert_ne!(digest_words([]), digest_words([0u64]));
        // digest_f32: the words written out, then the count; the packing's
        // `[a]` and `[+0.0, a]` told apart by it.
        let v = [1.5f32, -2.0, 3.25];
        let words = [
            u64::from(1.5f32.to_bits()) << 32 | u64::from((-2.0f32).to_bits()),
            u64::from(3.25f32.to_bits()),
            3,
        ];
        assert_eq!(digest_f32(&v), reference(&words));
        assert_ne!(digest_f32(&[3.25]), digest_f32(&[0.0, 3.25]));
    }

    /// The published FNV-1a 64-bit test vectors.
    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(*b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn pinned_values() {
        // Value-stability: these pin the exact mapping every backend must reproduce.
        assert_eq!(mix32(0), 0);
        assert_eq!(mix32(1), 0x6889_90c0);
        let rng = CounterRng::new(42);
        let a: Vec<u32> = (0..4).map(|c| rng.u32_at(c)).collect();
        let rng2 = CounterRng::new(42);
        assert_eq!(a, (0..4).map(|c| rng2.u32_at(c)).collect::<Vec<_>>());
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn same_seed_same_mapping_and_balance() {
        let a = H0::new(7, 16).unwrap();
        let b = H0::new(7, 16).unwrap();
        let sets = a.index_sets(100_000).unwrap();
        for (i, s) in sets.iter().enumerate() {
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            for &idx in s.iter().take(50) {
                assert_eq!(b.partition(idx), i as u32);
            }
            // Expected 6250 each; a universal hash keeps every bin within 10%.
            assert!((5600..6900).contains(&s.len()), "bin {i}: {}", s.len());
        }
        assert_eq!(sets.iter().map(Vec::len).sum::<usize>(), 100_000);
        assert!(H0::new(1, 0).is_err());
    }

    /// The probe counts what the table of `partition_host` counts, with
    /// few slots (serial and fallback both used) and many.
    #[test]
    fn probe_counts_as_partition_host() {
        let mut probe = HashProbe::new();
        for p in [1u32, 2, 3, 5] {
            for (r1, r2) in [(4u32, 1u32), (64, 8), (4096, 16), (1, 0)] {
                let indices: Vec<u32> = (0..3000u32).map(|i| i * 7 + i % 5).collect();
                let values = vec![1.0f32; indices.len()];
                let h = HierarchicalHash::new(9, 100 + u64::from(p), p, 3, r1, r2).unwrap();
                let parts = partition_host(&indices, &values, &h).unwrap();
                let got = probe.probe(&indices, &h).unwrap();
                assert_eq!(got, (parts.serial, parts.fallback), "P {p} r1 {r1} r2 {r2}");
            }
        }
    }

    #[test]
    fn unit_f32_is_uniform() {
        let rng = CounterRng::new(3);
        let n = 100_000;
        let mean: f64 = (0..n).map(|c| rng.unit_f32_at(c) as f64).sum::<f64>() / n as f64;
        approx::assert_abs_diff_eq!(mean, 0.5, epsilon = 0.005);
        assert!((0..n).all(|c| (0.0..1.0).contains(&rng.unit_f32_at(c))));
    }
}
