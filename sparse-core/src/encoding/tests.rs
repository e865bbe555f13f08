//! Round trips, exact lengths, and hostile-input tests for every encoding.

use super::*;
use crate::H0;
use crate::qsgd::QsgdParams;
use crate::testing_support::{random_vec, vectors};
use half::{bf16, f16};
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng as Rng;
use std::sync::Arc;

fn lossless_encodings<E: Element>() -> Vec<Box<dyn Encoding<E>>> {
    vec![
        Box::new(Coo(Raw)),
        Box::new(Block::default()),
        Box::new(Block::new(7, Raw).unwrap()),
        Box::new(Block::new(1, Raw).unwrap()),
        Box::new(Bitmap::new(Raw)),
    ]
}

fn check_roundtrip<E: Element>(enc: &dyn Encoding<E>, v: &SparseVec<E>) {
    let bytes = enc.encode(v).unwrap();
    assert_eq!(
        bytes.len(),
        enc.encoded_len(v).unwrap(),
        "{}: encoded_len",
        enc.name()
    );
    let back = enc.decode(&bytes).unwrap();
    assert_eq!(
        back.indices(),
        v.indices(),
        "{} dim={} nnz={}",
        enc.name(),
        v.dim(),
        v.nnz()
    );
    let bits = |s: &SparseVec<E>| {
        s.values()
            .iter()
            .map(|x| x.to_bits_u64())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&back), bits(v), "{} values", enc.name());
}

#[test]
fn lossless_roundtrips_all_sizes() {
    for v in vectors::<f32>(1) {
        for enc in lossless_encodings::<f32>() {
            check_roundtrip(enc.as_ref(), &v);
        }
        // The hash bitmap, partition by partition.
        if v.dim() <= 100_000 {
            let index = Arc::new(PartitionIndex::new(H0::new(3, 5).unwrap(), v.dim()).unwrap());
            for (p, part) in index.split(&v).unwrap().iter().enumerate() {
                check_roundtrip(
                    &HashBitmap::new(index.clone(), p as u32, Raw).unwrap(),
                    part,
                );
            }
        }
    }
}

#[test]
fn other_element_types_and_half_codecs() {
    for v in vectors::<f64>(2).into_iter().filter(|v| v.dim() <= 70_000) {
        for enc in lossless_encodings::<f64>() {
            check_roundtrip(enc.as_ref(), &v);
        }
    }
    for v in vectors::<f16>(3).into_iter().filter(|v| v.dim() <= 70_000) {
        check_roundtrip(&Coo(F16), &v);
        check_roundtrip(&Bitmap::new(F16), &v);
    }
    for v in vectors::<bf16>(4).into_iter().filter(|v| v.dim() <= 70_000) {
        check_roundtrip(&Coo(Bf16), &v);
        check_roundtrip(&Block::new(64, Bf16).unwrap(), &v);
    }
    // f32 through f16: each value rounded to the nearest f16.
    let v = random_vec::<f32>(1000, 300, 5);
    let back: SparseVec<f32> = Coo(F16).decode(&Coo(F16).encode(&v).unwrap()).unwrap();
    for (a, b) in v.values().iter().zip(back.values()) {
        assert_eq!(*b, f16::from_f32(*a).to_f32());
    }
    assert!(!Encoding::<f32>::lossless(&Coo(F16)) && Encoding::<f16>::lossless(&Coo(F16)));
}

#[test]
fn same_sign_mean() {
    let v = SparseVec::new(10, vec![1, 4, 7], vec![1.0f32, 2.0, 6.0]).unwrap();
    let back: SparseVec<f32> = Coo(SameSignMean)
        .decode(&Coo(SameSignMean).encode(&v).unwrap())
        .unwrap();
    assert_eq!(back.values(), &[3.0, 3.0, 3.0]);
    assert_eq!(back.indices(), v.indices());
    let neg = SparseVec::new(10, vec![0, 9], vec![-1.0f32, -0.0]).unwrap();
    let back: SparseVec<f32> = Coo(SameSignMean)
        .decode(&Coo(SameSignMean).encode(&neg).unwrap())
        .unwrap();
    assert_eq!(back.values(), &[-0.5, -0.5]);
    let mixed = SparseVec::new(10, vec![1, 2], vec![1.0f32, -1.0]).unwrap();
    assert!(matches!(
        Coo(SameSignMean).encode(&mixed),
        Err(Error::Unencodable { .. })
    ));
    // One value for all: the encoding is nnz-independent in its values part.
    assert_eq!(
        Coo(SameSignMean).encoded_len(&v).unwrap(),
        HEADER_BYTES + 4 + 12 + 4
    );
}

#[test]
fn qsgd_is_unbiased_and_bounded() {
    let v = random_vec::<f32>(5000, 3000, 6);
    for bits in [2u32, 4, 8] {
        let levels = ((1u32 << (bits - 1)) - 1) as f32;
        let trials = 400;
        let mut mean = vec![0.0f64; v.nnz()];
        for t in 0..trials {
            let enc = Coo(Qsgd(QsgdParams::new(bits, 1024, 1000 + t).unwrap()));
            let bytes = enc.encode(&v).unwrap();
            assert_eq!(bytes.len(), enc.encoded_len(&v).unwrap());
            let back: SparseVec<f32> = enc.decode(&bytes).unwrap();
            assert_eq!(back.indices(), v.indices());
            for (b, chunk) in v.values().chunks(1024).enumerate() {
                let scale = chunk.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                for (o, &x) in chunk.iter().enumerate() {
                    let d = back.values()[b * 1024 + o];
                    assert!(
                        approx::abs_diff_eq!(d, x, epsilon = scale / levels * (1.0 + 1e-6)),
                        "bits={bits}: |{d} - {x}| > {scale}/{levels}"
                    );
                    mean[b * 1024 + o] += d as f64 / trials as f64;
                }
            }
        }
        // Unbiased: the error of the mean shrinks as 1/sqrt(trials). Each draw
        // errs by at most scale/L, so the mean errs by at most
        // 5 * (scale/L) / sqrt(trials) except with negligible probability.
        for (b, chunk) in v.values().chunks(1024).enumerate() {
            let scale = chunk.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
            let tol = 5.0 * scale / levels as f64 / (trials as f64).sqrt();
            for (o, &x) in chunk.iter().enumerate() {
                let m = mean[b * 1024 + o];
                assert!(
                    approx::abs_diff_eq!(m, x as f64, epsilon = tol),
                    "bits={bits}: mean {m} vs {x} (tol {tol})"
                );
            }
        }
    }
}

#[test]
fn hash_bitmap_index_bytes_bound() {
    let n = 200_003;
    for parts in [1u32, 3, 16] {
        let index = Arc::new(PartitionIndex::new(H0::new(9, parts).unwrap(), n).unwrap());
        for density in [0.0, 0.0001, 0.01, 0.5, 1.0] {
            let v = random_vec::<f32>(n, (density * n as f64) as usize, 7);
            let mut index_bytes = 0;
            for (p, part) in index.split(&v).unwrap().iter().enumerate() {
                let enc = HashBitmap::new(index.clone(), p as u32, Raw).unwrap();
                index_bytes += enc.index_bytes(part).unwrap();
            }
            assert!(
                index_bytes <= n / 8 + 4 * parts as usize,
                "P={parts} d={density}: {index_bytes} > N/8 + 4P"
            );
            assert!(index_bytes >= n / 8);
        }
    }
}

#[test]
fn hash_bitmap_rejects_other_partitions_and_seeds() {
    let n = 1000;
    let a = Arc::new(PartitionIndex::new(H0::new(1, 4).unwrap(), n).unwrap());
    let b = Arc::new(PartitionIndex::new(H0::new(2, 4).unwrap(), n).unwrap());
    let parts = a.split(&random_vec::<f32>(n, 100, 8)).unwrap();
    let bytes = HashBitmap::new(a.clone(), 0, Raw)
        .unwrap()
        .encode(&parts[0])
        .unwrap();
    assert!(matches!(
        Encoding::<f32>::decode(&HashBitmap::new(b, 0, Raw).unwrap(), &bytes),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(
        Encoding::<f32>::decode(&HashBitmap::new(a.clone(), 1, Raw).unwrap(), &bytes),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(
        HashBitmap::new(a.clone(), 1, Raw)
            .unwrap()
            .encode(&parts[0]),
        Err(Error::Unencodable { .. })
    ));
    assert!(HashBitmap::new(a, 4, Raw).is_err());
}

#[test]
fn bitmap_over_a_range() {
    let v = SparseVec::new(100, vec![10, 20, 49], vec![1.0f32, 2.0, 3.0]).unwrap();
    let enc = Bitmap::over(10..50, Raw);
    check_roundtrip(&enc, &v);
    assert_eq!(enc.index_bytes(&v).unwrap(), 8);
    assert!(matches!(
        Bitmap::over(11..50, Raw).encode(&v),
        Err(Error::Unencodable { .. })
    ));
    assert!(matches!(
        Bitmap::over(10..49, Raw).encode(&v),
        Err(Error::Unencodable { .. })
    ));
}

/// Every encoding this test file can build, over one vector.
fn all_encodings(v: &SparseVec<f32>) -> Vec<(Box<dyn Encoding<f32>>, SparseVec<f32>)> {
    let index = Arc::new(PartitionIndex::new(H0::new(3, 3).unwrap(), v.dim()).unwrap());
    let part1 = index.split(v).unwrap().swap_remove(1);
    let positive = SparseVec::new(
        v.dim(),
        v.indices().to_vec(),
        v.values().iter().map(|x| x.abs()).collect(),
    )
    .unwrap();
    vec![
        (Box::new(Coo(Raw)), v.clone()),
        (Box::new(Coo(F16)), v.clone()),
        (Box::new(Coo(Bf16)), v.clone()),
        (Box::new(Coo(SameSignMean)), positive),
        (
            Box::new(Coo(Qsgd(QsgdParams::new(4, 16, 1).unwrap()))),
            v.clone(),
        ),
        (Box::new(Block::new(16, Raw).unwrap()), v.clone()),
        (
            Box::new(Block::new(8, Qsgd(QsgdParams::new(2, 5, 1).unwrap())).unwrap()),
            v.clone(),
        ),
        (Box::new(Bitmap::new(Raw)), v.clone()),
        (
            Box::new(Bitmap::new(Qsgd(QsgdParams::new(8, 7, 3).unwrap()))),
            v.clone(),
        ),
        (
            Box::new(HashBitmap::new(index.clone(), 1, Raw).unwrap()),
            part1.clone(),
        ),
        (Box::new(HashBitmap::new(index, 1, F16).unwrap()), part1),
    ]
}

#[test]
fn every_truncation_is_rejected() {
    for (dim, nnz) in [(1, 0), (1, 1), (37, 5), (300, 120)] {
        let v = random_vec::<f32>(dim, nnz, dim as u64);
        for (enc, input) in all_encodings(&v) {
            let bytes = enc.encode(&input).unwrap();
            assert!(enc.decode(&bytes).is_ok(), "{}", enc.name());
            for cut in 0..bytes.len() {
                assert!(
                    matches!(enc.decode(&bytes[..cut]), Err(Error::Corrupt { .. })),
                    "{}: prefix {cut}/{} accepted",
                    enc.name(),
                    bytes.len()
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(
                enc.decode(&longer).is_err(),
                "{}: trailing byte accepted",
                enc.name()
            );
        }
    }
}

#[test]
fn random_and_mutated_bytes_never_panic() {
    let v = random_vec::<f32>(200, 40, 99);
    let mut rng = Rng::seed_from_u64(12345);
    for (enc, input) in all_encodings(&v) {
        let valid = enc.encode(&input).unwrap();
        for t in 0..10_000 {
            let bytes: Vec<u8> = match t % 3 {
                // Pure noise.
                0 => (0..rng.random_range(0..64))
                    .map(|_| rng.next_u32() as u8)
                    .collect(),
                // A valid header, then noise.
                1 => {
                    let mut b = valid[..HEADER_BYTES.min(valid.len())].to_vec();
                    b.extend((0..rng.random_range(0..200)).map(|_| rng.next_u32() as u8));
                    b
                }
                // A valid encoding with a few bytes changed.
                _ => {
                    let mut b = valid.clone();
                    for _ in 0..1 + rng.random_range(0..3) {
                        let at = rng.random_range(0..b.len() as u64) as usize;
                        b[at] = rng.next_u32() as u8;
                    }
                    b
                }
            };
            // Either an error or a valid vector (new_unchecked's debug
            // assertions check validity in test builds).
            if let Ok(out) = enc.decode(&bytes) {
                assert!(crate::sparse::check_indices(out.dim(), out.indices()).is_ok());
                assert_eq!(out.indices().len(), out.values().len());
            }
        }
    }
}

#[test]
fn huge_length_headers_do_not_allocate() {
    // COO header claiming dim = nnz = u32::MAX with no payload.
    let mut b = vec![1u8, f32::CODE, 0, 1];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Encoding::<f32>::decode(&Coo(Raw), &b),
        Err(Error::Corrupt { .. })
    ));
    // Bitmap over 0..u32::MAX with 12 bytes of words.
    let mut b = vec![3u8, f32::CODE, 0, 1];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&[0xff; 12]);
    assert!(matches!(
        Encoding::<f32>::decode(&Bitmap::new(Raw), &b),
        Err(Error::Corrupt { .. })
    ));
    // Element type mismatch is caught by the header.
    let bytes = Coo(Raw).encode(&random_vec::<f64>(10, 3, 1)).unwrap();
    assert!(matches!(
        Encoding::<f32>::decode(&Coo(Raw), &bytes),
        Err(Error::Corrupt { .. })
    ));
}

/// Issue 11.4: an invalid vector from `new_unchecked` is an error for every
/// encoder (before, the block and hash-bitmap encoders indexed out of
/// bounds and panicked).
#[test]
fn encoders_reject_unchecked_invalid_vectors() {
    let v = random_vec::<f32>(300, 40, 3);
    let bad = [
        SparseVec::new_unchecked(300, vec![0, 299, 305], vec![1.0f32, 2.0, 3.0]),
        SparseVec::new_unchecked(300, vec![5, 2, 9], vec![1.0f32, 2.0, 3.0]),
        SparseVec::new_unchecked(300, vec![5, 5, 9], vec![1.0f32, 2.0, 3.0]),
        SparseVec::new_unchecked(300, vec![1, 2, 3], vec![1.0f32, 2.0]),
    ];
    for (enc, _) in all_encodings(&v) {
        for b in &bad {
            assert!(b.check().is_err());
            assert!(enc.encode(b).is_err(), "{} accepted {b:?}", enc.name());
        }
    }
}

/// A codec that breaks its own contract (a decoder that returns fewer
/// values than asked, one that leaves bytes unread, an `encoded_len` that
/// lies, even absurdly) is an error naming it from the default split,
/// never a silent empty split or an allocation of what it claims.
#[test]
fn a_codec_that_breaks_its_contract_is_an_error_from_the_split() {
    #[derive(Debug, Clone, Copy)]
    enum Broken {
        Short,
        Unread,
        HugeLen,
    }
    impl ValueCodec<f32> for Broken {
        const TAG: u8 = 250;
        fn name(&self) -> String {
            format!("{self:?}")
        }
        fn lossless(&self) -> bool {
            true
        }
        fn encoded_len(&self, n: usize) -> usize {
            match self {
                Broken::HugeLen => usize::MAX / 2,
                Broken::Unread => 4 * n + 1,
                Broken::Short => 4 * n,
            }
        }
        fn encode(&self, values: &[f32], out: &mut Vec<u8>) -> Result<()> {
            Raw.encode(values, out)?;
            if let Broken::Unread = self {
                out.push(0);
            }
            Ok(())
        }
        fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<f32>> {
            let mut v: Vec<f32> = Raw.decode(r, n)?;
            if let Broken::Short = self {
                v.pop();
            }
            Ok(v)
        }
    }
    for codec in [Broken::Short, Broken::Unread, Broken::HugeLen] {
        match codec.split(&[1.0f32, -2.0, 3.0]) {
            Err(Error::InvalidParameter { reason, .. }) => {
                assert!(reason.contains(&format!("{codec:?}")), "{reason}");
            }
            other => panic!("{codec:?}: {other:?}"),
        }
    }
}
