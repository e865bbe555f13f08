//! divan benches of every selection algorithm on the CPU backend over
//! n = 2^16 .. 2^24 at density 0.1% (RedSync Fig. 3), with the two
//! baselines of `sparse-bench select`: `select_nth_unstable_by` and a copy.

use backend_cpu::Cpu;
use bench::select::{nth_topk, selectors};
use divan::{Bencher, counter::BytesCount};
use sparse_core::BufferOps;
use sparse_core::generate::{ValueDist, dense_values};

fn main() {
    divan::main();
}

const SIZES: [usize; 5] = [1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24];

fn residual(n: usize) -> Vec<f32> {
    dense_values(n, ValueDist::Normal { std: 1.0 }, 1)
}

fn names() -> Vec<String> {
    selectors::<Cpu>().iter().map(|s| s.name()).collect()
}

#[divan::bench(args = SIZES)]
fn copy(bencher: Bencher, n: usize) {
    let x = residual(n);
    bencher
        .counter(BytesCount::new(n * 4))
        .bench_local(|| x.clone());
}

#[divan::bench(args = SIZES)]
fn select_nth(bencher: Bencher, n: usize) {
    let x = residual(n);
    bencher
        .counter(BytesCount::new(n * 4))
        .bench_local(|| nth_topk(&x, n / 1000));
}

macro_rules! selector_bench {
    ($($fn:ident => $at:expr),* $(,)?) => {$(
        #[divan::bench(args = SIZES)]
        fn $fn(bencher: Bencher, n: usize) {
            let x = Cpu.upload(&residual(n)).expect("upload");
            let mut s = selectors::<Cpu>().swap_remove($at);
            debug_assert!(!names()[$at].is_empty());
            bencher.counter(BytesCount::new(n * 4)).bench_local(|| s.select(&Cpu, &x, n / 1000).expect("select").count);
        }
    )*};
}

selector_bench!(
    radix_topk => 0,
    trimmed_topk => 1,
    threshold_bsearch => 2,
    threshold_bsearch_reuse => 3,
    sampled_threshold => 4,
    block_topk => 5,
    bucket_topk => 6,
    policy => 7,
);
