//! The block encoding with raw values, written and read in place (issue
//! 30), gives back exactly the stored entries whose value is not zero, for
//! every element type, block sizes that do not divide the dimension or 8
//! bytes, negative zeros and explicit zeros included, and rejects every
//! strict prefix of its bytes.

use sparse_core::encoding::{Block, Encoding, Raw};
use sparse_core::{Element, SparseVec};

fn round_trip<E: Element>() {
    for dim in [1usize, 7, 64, 1000, 4099] {
        for block in [1usize, 3, 5, 8, 256, 5000] {
            // Every third coordinate, values cycling through zero, -0 and
            // non-zeros.
            let idx: Vec<u32> = (0..dim as u32).filter(|i| i % 3 != 1).collect();
            let val: Vec<E> = idx
                .iter()
                .map(|&i| match i % 5 {
                    0 => E::zero(),
                    1 => -E::zero(),
                    k => E::from_f64_nearest(k as f64 - 2.5),
                })
                .collect();
            let v = SparseVec::new(dim, idx, val).expect("a valid vector");
            let enc = Block::new(block, Raw).expect("a block size");
            let bytes = enc.encode(&v).expect("encodable");
            assert_eq!(bytes.len(), enc.encoded_len(&v).expect("a length"));
            let back: SparseVec<E> = enc.decode(&bytes).expect("decodable");
            let (wi, wv): (Vec<u32>, Vec<E>) = v.iter().filter(|&(_, x)| x != E::zero()).unzip();
            assert_eq!(
                back.indices(),
                &wi[..],
                "{} dim {dim} block {block}",
                E::NAME
            );
            assert_eq!(
                back.values(),
                &wv[..],
                "{} dim {dim} block {block}",
                E::NAME
            );
            for cut in [0, 1, 8, bytes.len() / 2, bytes.len() - 1] {
                assert!(Encoding::<E>::decode(&enc, &bytes[..cut]).is_err());
            }
        }
    }
}

#[test]
fn raw_blocks_round_trip_in_place_for_every_element() {
    round_trip::<f32>();
    round_trip::<f64>();
    round_trip::<half::f16>();
    round_trip::<half::bf16>();
}
