//! QSGD quantization and decoding, bit-identical to
//! [`sparse_core::qsgd`]: the same counter-based draws
//! ([`sparse_core::CounterRng`]) and the same `f32` operations in the same
//! order. That generator, not a `rand` one, is used on the host so that these
//! kernels reproduce its draws bit for bit.

use super::{UNITS, counter_u32, cube_reduce};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;
use sparse_core::CounterRng;
use sparse_core::qsgd::QsgdParams;

/// One cube per bucket: `scales[b]` = the bits of `max |x|` over bucket `b`;
/// `bad[0]` counts the non-finite values.
#[cube(launch_unchecked)]
pub(crate) fn qsgd_scales(x: &[u32], bucket: u32, scales: &mut [u32], bad: &mut [Atomic<u32>]) {
    let b = CUBE_POS;
    let start = b * bucket as usize;
    let mut end = start;
    if b < scales.len() {
        end = min(start + bucket as usize, x.len());
    }
    let mut mx = 0u32;
    let mut nonfinite = 0u32;
    let mut i = start + UNIT_POS as usize;
    while i < end {
        let k = x[i] & 0x7fff_ffffu32;
        mx = max(mx, k);
        if k >= 0x7f80_0000u32 {
            nonfinite += 1;
        }
        i += UNITS as usize;
    }
    let mx = cube_reduce::<u32>(mx, true);
    let nonfinite = cube_reduce::<u32>(nonfinite, false);
    if UNIT_POS == 0 && b < scales.len() {
        scales[b] = mx;
        if nonfinite > 0 {
            bad[0].fetch_add(nonfinite);
        }
    }
}

/// One unit per code word: the codes of values `32 / bits` at a time
/// ([`sparse_core::qsgd::code_of`]).
///
/// `one` is 1.0, passed at launch so that no compiler can see its value: a
/// device compiler may contract a multiply and the add or subtract that
/// uses it into one fused multiply-add (NVRTC does by default, `--fmad`),
/// and `(ratio * levels) - floor(..)` fused rounds once where the CPU
/// rounds the product first, so a draw on the boundary picked the other
/// level (seen on an H100: a code word of 2^22 values differed). Multiplying the
/// rounded product by an opaque one gives the subtraction an operand that
/// is no longer the product itself; fused or not, `t * one - lo` is then
/// `t - lo` rounded once, which is exact, as on the CPU.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn qsgd_codes(
    x: &[f32],
    scales: &[f32],
    words: &mut [u32],
    bucket: u32,
    levels: u32,
    key0: u32,
    key1: u32,
    counter_base: u32,
    one: f32,
    #[comptime] bits: u32,
) {
    let w = ABSOLUTE_POS;
    if w < words.len() {
        let per = comptime![32 / bits];
        let lv = f32::cast_from(levels);
        let mut acc = 0u32;
        for o in 0..per {
            let j = w * per as usize + o as usize;
            if j < x.len() {
                let v = x[j];
                let s = scales[j / bucket as usize];
                let h = counter_u32(counter_base + j as u32, key0, key1);
                let u = f32::cast_from(h >> 8u32) * 5.960_464_5e-8f32;
                let mut code = 0u32;
                if s > 0.0f32 && v != 0.0f32 {
                    // The ratio first (at most 1), as the CPU does.
                    let r = ((f32::abs(v) / s) * lv) * one;
                    let lo = f32::floor(r);
                    let mut level = lo;
                    if u < r - lo {
                        level = lo + 1.0f32;
                    }
                    let l = min(u32::cast_from(level), levels);
                    if l != 0u32 {
                        code = l;
                        if v < 0.0f32 {
                            code |= 1u32 << (bits - 1);
                        }
                    }
                }
                acc |= code << (o * bits);
            }
        }
        words[w] = acc;
    }
}

/// Value `j` decoded: `scale * (level / levels)` (in that order, so no
/// finite scale overflows; [`sparse_core::qsgd::magnitude`]), negated by the
/// sign bit.
#[cube(launch_unchecked)]
pub(crate) fn qsgd_decode(
    words: &[u32],
    scales: &[f32],
    out: &mut [f32],
    bucket: u32,
    levels: u32,
    #[comptime] bits: u32,
) {
    let j = ABSOLUTE_POS;
    if j < out.len() {
        let mask = comptime![(1u32 << bits) - 1];
        let at = j * bits as usize;
        let code = (words[at / 32] >> (at % 32) as u32) & mask;
        let level = code & (mask >> 1u32);
        let mag = scales[j / bucket as usize] * (f32::cast_from(level) / f32::cast_from(levels));
        let mut v = mag;
        if (code >> (bits - 1)) != 0u32 {
            v = -mag;
        }
        out[j] = v;
    }
}

// SAFETY (every launcher below): every buffer argument covers exactly its
// allocation (`CubeBuffer::arg`), and the kernels bounds-check their
// accesses against those lengths and the offsets their caller derived
// from them.

/// Launches [`qsgd_scales`], one cube per bucket of `scales`.
pub(crate) fn launch_qsgd_scales(
    client: &Client,
    x: &CubeBuffer<u32>,
    p: &QsgdParams,
    scales: &CubeBuffer<u32>,
    bad: &CubeBuffer<u32>,
) {
    let (cubes, bucket) = (super::grid(scales.len), p.bucket() as u32);
    unsafe {
        launch_kernel!(
            qsgd_scales,
            client,
            cubes,
            [x],
            bucket,
            scales.arg(),
            bad.arg()
        )
    }
}

/// Launches [`qsgd_codes`], one unit per code word of `words`, the draws
/// from counter `counter_base` of `p`'s generator.
pub(crate) fn launch_qsgd_codes(
    client: &Client,
    x: &CubeBuffer<f32>,
    scales: &CubeBuffer<f32>,
    words: &CubeBuffer<u32>,
    p: &QsgdParams,
    counter_base: u32,
) {
    let cubes = super::grid(super::cubes_for(words.len));
    let [key0, key1] = CounterRng::new(p.seed()).keys();
    let (bucket, levels) = (p.bucket() as u32, p.levels());
    unsafe {
        launch_kernel!(
            qsgd_codes,
            client,
            cubes,
            [x, scales, words],
            bucket,
            levels,
            key0,
            key1,
            counter_base,
            1.0f32,
            p.bits()
        )
    }
}

/// Launches [`qsgd_decode`], one unit per value of `out`.
pub(crate) fn launch_qsgd_decode(
    client: &Client,
    words: &CubeBuffer<u32>,
    scales: &CubeBuffer<f32>,
    out: &CubeBuffer<f32>,
    p: &QsgdParams,
) {
    let cubes = super::grid(super::cubes_for(out.len));
    let (bucket, levels) = (p.bucket() as u32, p.levels());
    unsafe {
        launch_kernel!(
            qsgd_decode,
            client,
            cubes,
            [words, scales, out],
            bucket,
            levels,
            p.bits()
        )
    }
}
