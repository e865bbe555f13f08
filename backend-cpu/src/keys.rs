//! The selection loops over elements viewed as unsigned integers of their
//! width (`u16`, `u32`, `u64`), where every order-preserving key of
//! [`sparse_core::KeyOrder`] is two or three integer operations. They are
//! written so that the compiler vectorizes the part of each pass that reads
//! every element (a fold over a chunk), and the scalar, branchy work only
//! touches the few chunks that hold a hit: a pass then runs near the speed
//! of reading the array (issue 14's memory floor), while staying a plain
//! loop whose result is checked against the sorting oracles of the suites.

use core::ops::{BitAnd, BitOr, BitXor, Not, Shr};
use sparse_core::{Digit, KeyOrder};

/// An unsigned integer as wide as an element: its bit pattern.
pub(crate) trait Word:
    bytemuck::Pod
    + Ord
    + Copy
    + Shr<u32, Output = Self>
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
{
    const SIGN: Self;
    const ZERO: Self;
    const BITS: u32;
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
    /// All ones when the sign bit is set, else zero.
    fn sign_fill(self) -> Self;
}

macro_rules! word {
    ($t:ty, $s:ty) => {
        impl Word for $t {
            const SIGN: Self = 1 << (<$t>::BITS - 1);
            const ZERO: Self = 0;
            const BITS: u32 = <$t>::BITS;
            #[inline]
            fn to_u64(self) -> u64 {
                self as u64
            }
            #[inline]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            #[inline]
            fn sign_fill(self) -> Self {
                ((self as $s) >> (<$t>::BITS - 1)) as $t
            }
        }
    };
}
word!(u16, i16);
word!(u32, i32);
word!(u64, i64);

/// Calls `$f::<W>(bits, ..)` with the elements viewed as integers of their
/// width.
macro_rules! by_width {
    ($x:expr, $f:ident ( $($arg:expr),* )) => {
        match E::BYTES {
            2 => $f::<u16>(bytemuck::cast_slice($x) $(, $arg)*),
            4 => $f::<u32>(bytemuck::cast_slice($x) $(, $arg)*),
            _ => $f::<u64>(bytemuck::cast_slice($x) $(, $arg)*),
        }
    };
}
pub(crate) use by_width;

/// The magnitude key (`abs_key`).
#[inline]
pub(crate) fn abs<W: Word>(b: W) -> W {
    b & !W::SIGN
}

/// The signed key (`signed_key`): negative values complemented, the sign
/// bit set on the others.
#[inline]
fn signed<W: Word>(b: W) -> W {
    b ^ (b.sign_fill() | W::SIGN)
}

/// The reversed signed key (smaller value, larger key).
#[inline]
fn reversed<W: Word>(b: W) -> W {
    !signed(b)
}

/// Calls `$f(bits, key, ..)` with `key` the integer key function of `order`
/// (one instantiation per order, so the key inlines into the loop).
macro_rules! by_order {
    ($order:expr, $f:ident ( $bits:expr $(, $arg:expr)* )) => {
        match $order {
            KeyOrder::Abs => $f($bits, abs::<W> $(, $arg)*),
            KeyOrder::Signed => $f($bits, signed::<W> $(, $arg)*),
            KeyOrder::SignedReversed => $f($bits, reversed::<W> $(, $arg)*),
        }
    };
}

/// Histogram of one radix digit of the keys in `order`, with the NaN test
/// (`abs key > inf`) fused in: `(histogram, NaN seen)`.
pub(crate) fn digit_histogram<W: Word>(
    bits: &[W],
    order: KeyOrder,
    d: Digit,
    inf: u64,
) -> (Vec<u32>, bool) {
    // The magnitude key's top bit is always clear, so a digit just below
    // it with prefix 0 matches every key.
    let all_match =
        order == KeyOrder::Abs && d.prefix == 0 && d.shift + d.digit_bits + 1 >= W::BITS;
    by_order!(order, histogram(bits, d, W::from_u64(inf), all_match))
}

fn histogram<W: Word>(
    bits: &[W],
    key: impl Fn(W) -> W + Copy,
    d: Digit,
    inf: W,
    all_match: bool,
) -> (Vec<u32>, bool) {
    let size = 1usize << d.digit_bits;
    let mask = size - 1;
    let top = d.shift + d.digit_bits;
    let digit = |k: W| ((k >> d.shift).to_u64() as usize) & mask;
    if (all_match || top >= W::BITS) && d.digit_bits <= SMALL_DIGIT {
        return small_histogram(bits, key, d, inf);
    }
    // A prefix: most keys miss it after the first digit, so the test is a
    // well-predicted branch; chunks are first screened as a whole.
    let mut nan = false;
    let prefix = W::from_u64(d.prefix);
    let matches = |k: W| top >= W::BITS || k >> top == prefix;
    let mut h = vec![0u32; size];
    for chunk in bits.chunks(64) {
        let (hit, n) = chunk.iter().fold((false, false), |(h, n), &b| {
            (h | matches(key(b)), n | (abs(b) > inf))
        });
        nan |= n;
        if hit {
            for &b in chunk {
                let k = key(b);
                if matches(k) {
                    h[digit(k)] += 1;
                }
            }
        }
    }
    (h, nan)
}

/// Widest digit of the fast histogram.
const SMALL_DIGIT: u32 = 12;

/// The histogram of a digit of at most [`SMALL_DIGIT`] bits over keys that
/// all match its prefix. Digits are computed a chunk at a time (a
/// vectorized loop), then counted into four interleaved fixed-size
/// histograms, so that runs of equal digits (most of a gradient sits in a
/// few exponents) do not wait on each other's increments and no index needs
/// a bounds check.
fn small_histogram<W: Word>(
    bits: &[W],
    key: impl Fn(W) -> W + Copy,
    d: Digit,
    inf: W,
) -> (Vec<u32>, bool) {
    const SIZE: usize = 1 << SMALL_DIGIT;
    let mut nan = false;
    let mask = (1usize << d.digit_bits) - 1;
    let mut h = vec![[0u32; SIZE]; 4];
    let mut digits = [0u16; 64];
    for chunk in bits.chunks(64) {
        nan |= chunk.iter().fold(false, |n, &b| n | (abs(b) > inf));
        for (g, &b) in digits.iter_mut().zip(chunk) {
            *g = (((key(b) >> d.shift).to_u64() as usize) & mask) as u16;
        }
        let digits = &digits[..chunk.len()];
        let mut quads = digits.chunks_exact(4);
        for q in &mut quads {
            h[0][usize::from(q[0]) % SIZE] += 1;
            h[1][usize::from(q[1]) % SIZE] += 1;
            h[2][usize::from(q[2]) % SIZE] += 1;
            h[3][usize::from(q[3]) % SIZE] += 1;
        }
        for &g in quads.remainder() {
            h[0][usize::from(g) % SIZE] += 1;
        }
    }
    let h = (0..=mask)
        .map(|g| h[0][g] + h[1][g] + h[2][g] + h[3][g])
        .collect();
    (h, nan)
}

/// Positions of every key above `kth` and of the first `take_equal` keys
/// equal to it, in order, with the NaN test fused in.
pub(crate) fn compact_key<W: Word>(
    bits: &[W],
    order: KeyOrder,
    kth: u64,
    take_equal: usize,
    inf: u64,
) -> (Vec<u32>, bool) {
    let abs_order = order == KeyOrder::Abs;
    by_order!(
        order,
        compact(bits, kth, take_equal, W::from_u64(inf), abs_order)
    )
}

fn compact<W: Word>(
    bits: &[W],
    key: impl Fn(W) -> W + Copy,
    kth: u64,
    take_equal: usize,
    inf: W,
    abs_order: bool,
) -> (Vec<u32>, bool) {
    let mut out = Vec::new();
    let mut nan = false;
    if kth > (!W::ZERO).to_u64() {
        // No key reaches it; only the NaN test is left.
        nan = bits.iter().fold(false, |n, &b| n | (abs(b) > inf));
        return (out, nan);
    }
    let kth = W::from_u64(kth);
    let mut equal_left = take_equal;
    // Where every NaN's key is at or above `kth` (the magnitude order up to
    // infinity's key), a NaN lands in a chunk with a hit and the scalar
    // pass sees it: the screen then needs one test, not two.
    let nan_hits = abs_order && kth <= inf;
    for (c, chunk) in bits.chunks(SCREEN).enumerate() {
        let (hit, n) = if nan_hits {
            (chunk.iter().fold(false, |h, &b| h | (key(b) >= kth)), false)
        } else {
            chunk.iter().fold((false, false), |(h, n), &b| {
                (h | (key(b) >= kth), n | (abs(b) > inf))
            })
        };
        nan |= n;
        if hit {
            push_where(&mut out, chunk, c * SCREEN, |b| {
                let k = key(b);
                nan |= abs(b) > inf;
                let take = k > kth || (k == kth && equal_left > 0);
                equal_left -= usize::from(k == kth && take);
                take
            });
        }
    }
    (out, nan)
}

/// Elements per screened chunk of a compaction: a chunk is first tested as
/// a whole (a vectorized any-hit fold), and only chunks with a hit are
/// visited element by element. At 1% hits, 15% of 16-element chunks hold
/// one (47% of 64-element chunks).
pub(crate) const SCREEN: usize = 16;

/// Bit `j` set where `hit(chunk[j])`, for a chunk of at most [`SCREEN`]
/// elements: a full chunk unrolls into one vector compare and a move of
/// its mask.
#[inline]
pub(crate) fn hit_mask<W: Word>(chunk: &[W], hit: impl Fn(W) -> bool) -> u32 {
    debug_assert!(chunk.len() <= SCREEN);
    if let Ok(full) = <&[W; SCREEN]>::try_from(chunk) {
        let mut m = 0u32;
        for (j, &b) in full.iter().enumerate() {
            m |= u32::from(hit(b)) << j;
        }
        return m;
    }
    chunk
        .iter()
        .enumerate()
        .fold(0u32, |m, (j, &b)| m | (u32::from(hit(b)) << j))
}

/// Appends to `out` the positions (from `base`) of the elements of `chunk`
/// (at most [`SCREEN`]) for which `take` holds, in order. Each position is written
/// and the end advanced by the test's result, with no branch per element:
/// the hit chunks of a compaction hold hits at random, which a branch
/// would mispredict.
#[inline]
pub(crate) fn push_where<W: Word>(
    out: &mut Vec<u32>,
    chunk: &[W],
    base: usize,
    mut take: impl FnMut(W) -> bool,
) {
    debug_assert!(chunk.len() <= SCREEN);
    let mut buf = [0u32; SCREEN];
    let mut end = 0usize;
    for (o, &b) in chunk.iter().enumerate() {
        buf[end % SCREEN] = (base + o) as u32;
        end += usize::from(take(b));
    }
    out.extend_from_slice(&buf[..end]);
}

/// Exact top-`k` magnitudes of `bits` (ties to the lower position), as
/// positions in increasing order. `k <= bits.len()`.
///
/// Small `k` keeps the best `k` in a scan (a chunk is only looked at
/// element by element when its largest key beats the worst kept).
/// Otherwise a lower bound for the top k is estimated from a sample
/// ([`sparse_core::topk::narrowing_sample`]) or, if too few keys reach it,
/// from a histogram of the top 12 key bits; one pass collects the keys at
/// or above it, and introselect runs on those candidates only. If neither
/// narrows (many equal magnitudes), introselect runs on every element.
pub(crate) fn topk_abs<W: Word>(bits: &[W], k: usize) -> Vec<u32> {
    let n = bits.len();
    if k == 0 {
        return Vec::new();
    }
    if k >= n {
        return (0..n as u32).collect();
    }
    if k == 1 {
        // The first position of the largest key.
        let top = bits.iter().fold(W::ZERO, |m, &b| m.max(abs(b)));
        return vec![bits.iter().position(|&b| abs(b) == top).unwrap_or(0) as u32];
    }
    if k <= 16 {
        return scan_topk(bits, k);
    }
    // A lower bound for the candidates from a sample, then from a
    // histogram of the top 12 key bits; each is kept only if at least k
    // keys reach it.
    if let Some(blocks) = sparse_core::topk::narrowing_sample(n) {
        let mut sample: Vec<W> = blocks
            .into_iter()
            .flat_map(|r| &bits[r])
            .map(|&b| abs(b))
            .collect();
        if let Some(r) = sparse_core::topk::sample_rank(k, n, sample.len()) {
            let (_, &mut lower, _) = sample.select_nth_unstable_by(r - 1, |a, b| b.cmp(a));
            if let Some(cand) = candidates(bits, lower, k) {
                return best_positions(cand, k);
            }
        }
    }
    const DIGIT: u32 = 12;
    if n >= 1 << 14 {
        // The magnitude key's top bit is always zero: the digit sits below.
        let d = Digit {
            shift: W::BITS - 1 - DIGIT,
            digit_bits: DIGIT,
            prefix: 0,
        };
        let (hist, _) = small_histogram(bits, abs::<W>, d, !W::ZERO);
        let (mut above, mut chosen) = (0usize, 0usize);
        for b in (0..hist.len()).rev() {
            if above + hist[b] as usize >= k {
                chosen = b;
                break;
            }
            above += hist[b] as usize;
        }
        if above + hist[chosen] as usize <= (n / 8).max(4 * k) && chosen > 0 {
            let lower = W::from_u64((chosen as u64) << d.shift);
            if let Some(cand) = candidates(bits, lower, k) {
                return best_positions(cand, k);
            }
        }
    }
    let all: Vec<(W, u32)> = bits
        .iter()
        .enumerate()
        .map(|(i, &b)| (abs(b), i as u32))
        .collect();
    best_positions(all, k)
}

/// Every `(key, position)` with a magnitude key at least `lower`, if there
/// are at least `k`.
fn candidates<W: Word>(bits: &[W], lower: W, k: usize) -> Option<Vec<(W, u32)>> {
    let mut cand: Vec<(W, u32)> = Vec::new();
    for (c, chunk) in bits.chunks(SCREEN).enumerate() {
        if chunk.iter().fold(false, |h, &b| h | (abs(b) >= lower)) {
            for (o, &b) in chunk.iter().enumerate() {
                if abs(b) >= lower {
                    cand.push((abs(b), (c * SCREEN + o) as u32));
                }
            }
        }
    }
    (cand.len() >= k).then_some(cand)
}

/// The `k` best `(key desc, position asc)` of `cand`, positions sorted.
fn best_positions<W: Word>(mut cand: Vec<(W, u32)>, k: usize) -> Vec<u32> {
    if k < cand.len() {
        cand.select_nth_unstable_by(k - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    let mut out: Vec<u32> = cand[..k].iter().map(|&(_, i)| i).collect();
    out.sort_unstable();
    out
}

/// Top-`k` by magnitude for small `k` (`1 <= k < len`): the best `k` so far
/// in a small array; an element enters only with a key above the worst
/// kept (an equal key comes later, so it loses the tie).
fn scan_topk<W: Word>(bits: &[W], k: usize) -> Vec<u32> {
    let mut kept: Vec<(W, u32)> = bits[..k]
        .iter()
        .enumerate()
        .map(|(i, &b)| (abs(b), i as u32))
        .collect();
    // The worst kept: smallest key, and among equal keys the later one.
    let worst_of = |kept: &[(W, u32)]| {
        let mut w = 0;
        for (j, &(key, i)) in kept.iter().enumerate() {
            if key < kept[w].0 || (key == kept[w].0 && i > kept[w].1) {
                w = j;
            }
        }
        w
    };
    let mut worst = worst_of(&kept);
    let rest = &bits[k..];
    for (c, chunk) in rest.chunks(32).enumerate() {
        let top = chunk.iter().fold(W::ZERO, |m, &b| m.max(abs(b)));
        if top <= kept[worst].0 {
            continue;
        }
        for (o, &b) in chunk.iter().enumerate() {
            let key = abs(b);
            if key > kept[worst].0 {
                kept[worst] = (key, (k + c * 32 + o) as u32);
                worst = worst_of(&kept);
            }
        }
    }
    let mut out: Vec<u32> = kept.iter().map(|&(_, i)| i).collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng as _, SeedableRng as _};

    fn oracle(x: &[f32], k: usize) -> Vec<u32> {
        let mut all: Vec<u32> = (0..x.len() as u32).collect();
        all.sort_by(|&a, &b| {
            sparse_core::abs_key(x[b as usize])
                .cmp(&sparse_core::abs_key(x[a as usize]))
                .then(a.cmp(&b))
        });
        let mut want = all[..k].to_vec();
        want.sort_unstable();
        want
    }

    /// Every path of the magnitude top-k (scan, narrowed, heavy bucket)
    /// against a full sort with the tie rule.
    #[test]
    fn topk_abs_equals_a_sort_on_every_path() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(14);
        for n in [1usize, 5, 100, 20_000, 70_000] {
            let spread: Vec<f32> = (0..n).map(|_| rng.random_range(-3.0f32..3.0)).collect();
            let ties: Vec<f32> = (0..n).map(|_| rng.random_range(-2..=2) as f32).collect();
            for x in [&spread, &ties] {
                for k in [1, 2, 16, 17, n / 100, n / 3, n - 1, n] {
                    let k = k.clamp(1, n);
                    let bits: &[u32] = bytemuck::cast_slice(x);
                    assert_eq!(topk_abs(bits, k), oracle(x, k), "n={n} k={k}");
                }
            }
        }
    }
}
