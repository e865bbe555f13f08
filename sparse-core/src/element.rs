//! Element types: the floating-point formats gradients come in.

use bytemuck::Pod;
use num_traits::{Float, FromPrimitive, ToPrimitive};
use std::fmt::Debug;

/// A gradient element: `f32`, `f64`, [`half::f16`] or [`half::bf16`].
///
/// Built on `num-traits` (arithmetic, comparison) and `bytemuck` (safe
/// little-endian byte views). Conversions go through `f64`, which holds every
/// value of every element type exactly.
pub trait Element:
    Float + FromPrimitive + ToPrimitive + Pod + Debug + Default + Send + Sync + 'static
{
    /// Size of one element in bytes.
    const BYTES: usize;
    /// A short, stable name (`"f32"`, `"bf16"`, ...).
    const NAME: &'static str;
    /// A one-byte code stored in encoding headers so that a decoder can
    /// reject bytes written for another element type.
    const CODE: u8;

    /// Exact widening conversion.
    fn to_f64_exact(self) -> f64;
    /// Conversion to `f32` (exact for all types but `f64`).
    fn to_f32_lossy(self) -> f32;
    /// Nearest-value conversion from `f64`.
    fn from_f64_nearest(v: f64) -> Self;
    /// Nearest-value conversion from `f32`.
    fn from_f32_nearest(v: f32) -> Self;
    /// The bit pattern as an unsigned integer, zero-extended to 64 bits.
    fn to_bits_u64(self) -> u64;
    /// The value with the given bit pattern (low `BYTES * 8` bits used).
    fn from_bits_u64(bits: u64) -> Self;
    /// Writes the little-endian bytes of `self` to `out`.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads one element from exactly [`Element::BYTES`] little-endian bytes.
    ///
    /// # Panics
    /// If `bytes.len() != Self::BYTES` (callers slice exactly).
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! impl_element {
    ($t:ty, $name:literal, $code:literal, $bits:ty,
     to64: $to64:expr, to32: $to32:expr, from64: $from64:expr, from32: $from32:expr) => {
        impl Element for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = $name;
            const CODE: u8 = $code;
            #[inline]
            fn to_f64_exact(self) -> f64 {
                ($to64)(self)
            }
            #[inline]
            fn to_f32_lossy(self) -> f32 {
                ($to32)(self)
            }
            #[inline]
            fn from_f64_nearest(v: f64) -> Self {
                ($from64)(v)
            }
            #[inline]
            fn from_f32_nearest(v: f32) -> Self {
                ($from32)(v)
            }
            #[inline]
            fn to_bits_u64(self) -> u64 {
                bytemuck::cast::<$t, $bits>(self) as u64
            }
            #[inline]
            fn from_bits_u64(bits: u64) -> Self {
                bytemuck::cast::<$bits, $t>(bits as $bits)
            }
            #[inline]
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&bytemuck::cast::<$t, $bits>(self).to_le_bytes());
            }
            #[inline]
            fn read_le(bytes: &[u8]) -> Self {
                let arr: [u8; std::mem::size_of::<$t>()] =
                    bytes.try_into().expect("read_le: slice of exactly BYTES");
                bytemuck::cast::<$bits, $t>(<$bits>::from_le_bytes(arr))
            }
        }
    };
}

impl_element!(f32, "f32", 1, u32,
    to64: |x: f32| x as f64, to32: |x: f32| x,
    from64: |v: f64| v as f32, from32: |v: f32| v);
impl_element!(f64, "f64", 2, u64,
    to64: |x: f64| x, to32: |x: f64| x as f32,
    from64: |v: f64| v, from32: |v: f32| v as f64);
impl_element!(half::f16, "f16", 3, u16,
    to64: |x: half::f16| x.to_f64(), to32: |x: half::f16| x.to_f32(),
    from64: half::f16::from_f64, from32: half::f16::from_f32);
impl_element!(half::bf16, "bf16", 4, u16,
    to64: |x: half::bf16| x.to_f64(), to32: |x: half::bf16| x.to_f32(),
    from64: half::bf16::from_f64, from32: half::bf16::from_f32);

/// Order-preserving key of `|x|`: for any non-NaN `a`, `b`,
/// `abs_key(a) < abs_key(b)` exactly when `|a| < |b|`.
///
/// Clearing the sign bit of an IEEE-754 value leaves a non-negative float
/// whose bit pattern, read as an unsigned integer, orders like the value. This
/// is the digit source of radix select.
#[inline]
pub fn abs_key<E: Element>(x: E) -> u64 {
    let bits = x.to_bits_u64();
    let sign = 1u64 << (E::BYTES * 8 - 1);
    bits & !sign
}

/// Order-preserving key of the signed value: `signed_key(a) < signed_key(b)`
/// exactly when `a < b` (with `-0.0 < +0.0`), for non-NaN inputs.
#[inline]
pub fn signed_key<E: Element>(x: E) -> u64 {
    let bits = x.to_bits_u64();
    let width = E::BYTES * 8;
    let sign = 1u64 << (width - 1);
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    if bits & sign != 0 {
        !bits & mask
    } else {
        bits | sign
    }
}

/// Whether `a - b` is exact in `E`: the error term of Knuth's TwoSum is
/// zero. For finite `a` and `b` of the same sign (or zero), where nothing
/// overflows; QSGD's and the collectives' exact remainders rest on it.
pub fn exact_difference<E: Element>(a: E, b: E) -> bool {
    let b = -b;
    let s = a + b;
    let a1 = s - b;
    let b1 = s - a1;
    (a - a1) + (b - b1) == E::zero()
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn roundtrip<E: Element>(v: f64) {
        let x = E::from_f64_nearest(v);
        let mut out = Vec::new();
        x.write_le(&mut out);
        assert_eq!(out.len(), E::BYTES);
        assert_eq!(E::read_le(&out).to_bits_u64(), x.to_bits_u64());
    }

    #[test]
    fn byte_roundtrip_all_types() {
        for v in [0.0, -0.0, 1.5, -3.25, 1e-3, 65504.0] {
            roundtrip::<f32>(v);
            roundtrip::<f64>(v);
            roundtrip::<f16>(v);
            roundtrip::<bf16>(v);
        }
    }

    #[test]
    fn keys_preserve_order() {
        let vals = [-5.0f32, -1.0, -0.0, 0.0, 1e-40, 0.5, 2.0, f32::INFINITY];
        for a in vals {
            for b in vals {
                assert_eq!(abs_key(a) < abs_key(b), a.abs() < b.abs(), "{a} {b}");
                if !(a == 0.0 && b == 0.0) {
                    assert_eq!(signed_key(a) < signed_key(b), a < b, "{a} {b}");
                }
            }
        }
        assert!(signed_key(-0.0f32) < signed_key(0.0f32));
        let h = [f16::from_f32(-2.0), f16::from_f32(-0.5), f16::from_f32(1.0)];
        assert!(signed_key(h[0]) < signed_key(h[1]) && signed_key(h[1]) < signed_key(h[2]));
        assert!(abs_key(bf16::from_f32(-3.0)) > abs_key(bf16::from_f32(2.0)));
    }
}
