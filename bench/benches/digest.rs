//! divan benches of the trainer's commit-round digest of a dense result
//! (the Fashion-MNIST MLP's 203,530 parameters, 814 KB): FNV-1a byte by
//! byte, as the trainer digested until 2026-11-28, against
//! `sparse_core::hash::digest_f32` (`digest_words` over the values packed
//! two to a word), as it digests now. Throughput in bytes of the result.

use divan::{Bencher, black_box, counter::BytesCount};

fn main() {
    divan::main();
}

const N: usize = 203_530;

fn sum() -> Vec<f32> {
    (0..N).map(|i| (i as f32 * 0.618).sin()).collect()
}

#[divan::bench]
fn fnv1a_bytes(bencher: Bencher) {
    let v = sum();
    bencher.counter(BytesCount::new(4 * N)).bench_local(|| {
        sparse_core::hash::fnv1a(black_box(&v).iter().flat_map(|x| x.to_bits().to_le_bytes()))
    });
}

#[divan::bench]
fn digest_f32(bencher: Bencher) {
    let v = sum();
    bencher
        .counter(BytesCount::new(4 * N))
        .bench_local(|| sparse_core::hash::digest_f32(black_box(&v)));
}
