//! divan benches of every encoding: encode and decode of a gradient of
//! density 0.1%, throughput in sparse-input bytes (8 per entry).

mod common;

use divan::{Bencher, counter::BytesCount};
use sparse_core::encoding::{
    Bitmap, Block, Coo, Encoding, F16, HashBitmap, PartitionIndex, Qsgd, Raw,
};
use sparse_core::{H0, SparseVec};
use std::sync::Arc;

fn main() {
    divan::main();
}

fn encodings(n: usize) -> Vec<(Box<dyn Encoding<f32>>, SparseVec<f32>)> {
    let v = common::gradient(n);
    let index = Arc::new(
        PartitionIndex::new(H0::new(1, 8).expect("8 partitions"), n).expect("dimension fits"),
    );
    let part0 = index.split(&v).expect("same dimension").swap_remove(0);
    vec![
        (Box::new(Coo(Raw)), v.clone()),
        (Box::new(Coo(F16)), v.clone()),
        (Box::new(Coo(Qsgd::new(4, 1).expect("4 bits"))), v.clone()),
        (Box::new(Block::default()), v.clone()),
        (Box::new(Bitmap::new(Raw)), v.clone()),
        (
            Box::new(HashBitmap::new(index, 0, Raw).expect("partition 0")),
            part0,
        ),
    ]
}

const NAMES: &[&str] = &[
    "coo",
    "coo+f16",
    "coo+qsgd4",
    "block",
    "bitmap",
    "hash-bitmap(part 0 of 8)",
];

fn case(n: usize, name: &str) -> (Box<dyn Encoding<f32>>, SparseVec<f32>) {
    let at = NAMES
        .iter()
        .position(|x| *x == name)
        .expect("known encoding");
    encodings(n).swap_remove(at)
}

#[divan::bench(consts = [65_536, 1_048_576, 4_194_304], args = NAMES)]
fn encode<const N: usize>(bencher: Bencher, name: &str) {
    let (enc, v) = case(N, name);
    let mut out = Vec::with_capacity(enc.encoded_len(&v).expect("encodable"));
    bencher
        .counter(BytesCount::new(v.nnz() * 8))
        .bench_local(|| {
            out.clear();
            enc.encode_into(&v, &mut out).expect("encodable");
            out.len()
        });
}

#[divan::bench(consts = [65_536, 1_048_576, 4_194_304], args = NAMES)]
fn decode<const N: usize>(bencher: Bencher, name: &str) {
    let (enc, v) = case(N, name);
    let bytes = enc.encode(&v).expect("encodable");
    bencher
        .counter(BytesCount::new(v.nnz() * 8))
        .bench_local(|| enc.decode(&bytes).expect("valid").nnz());
}
