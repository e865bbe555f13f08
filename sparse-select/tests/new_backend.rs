//! A new backend added by following `docs/adding-a-backend.md`, to check
//! that its steps are complete: `Delegating` implements the two
//! element-free traits once and the five element traits for `f32` only,
//! each method handing the work to the CPU reference, and runs the three
//! shared suites with one line each. (It lives in a test file rather than
//! in a crate of its own, the doc's `my-backend`; the impls and the
//! instantiations are the same.)

use backend_cpu::Cpu;
use sparse_core::qsgd::QsgdParams;
use sparse_core::{
    BufferOps, CodecOps, DenseOps, Digit, Extreme, HashOps, HashPartitions, HierarchicalHash,
    IndexOps, KeyOrder, ReduceOps, Result, Scalar, SelectOps, Selected,
};

/// The backend: its buffers are `Vec`s, its work the CPU reference's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delegating;

/// A selection of the reference as one of this backend (same buffers).
fn own(s: Selected<Cpu, f32>) -> Selected<Delegating, f32> {
    Selected {
        indices: s.indices,
        values: s.values,
    }
}

impl BufferOps for Delegating {
    type Buffer<T: Scalar> = Vec<T>;
    fn name(&self) -> &'static str {
        "delegating"
    }
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<Vec<T>> {
        Cpu.upload(data)
    }
    fn download<T: Scalar>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
        Cpu.download(buf)
    }
    fn zeros<T: Scalar>(&self, len: usize) -> Result<Vec<T>> {
        Cpu.zeros(len)
    }
    fn len<T: Scalar>(&self, buf: &Vec<T>) -> usize {
        Cpu.len(buf)
    }
}

impl IndexOps for Delegating {
    fn gather_indices(&self, src: &Vec<u32>, positions: &Vec<u32>) -> Result<Vec<u32>> {
        Cpu.gather_indices(src, positions)
    }
    fn bitmap_encode(&self, indices: &Vec<u32>, lo: u32, len: usize) -> Result<Vec<u32>> {
        Cpu.bitmap_encode(indices, lo, len)
    }
    fn bitmap_decode(&self, words: &Vec<u32>, lo: u32, len: usize) -> Result<Vec<u32>> {
        Cpu.bitmap_decode(words, lo, len)
    }
}

impl ReduceOps<f32> for Delegating {
    fn max_abs(&self, x: &Vec<f32>) -> Result<f32> {
        Cpu.max_abs(x)
    }
    fn mean_abs(&self, x: &Vec<f32>) -> Result<f64> {
        Cpu.mean_abs(x)
    }
    fn count_above(&self, x: &Vec<f32>, t: f32) -> Result<usize> {
        Cpu.count_above(x, t)
    }
    fn sum_squares(&self, x: &Vec<f32>) -> Result<f64> {
        Cpu.sum_squares(x)
    }
}

impl SelectOps<f32> for Delegating {
    fn digit_histogram(&self, x: &Vec<f32>, order: KeyOrder, digit: Digit) -> Result<Vec<u32>> {
        Cpu.digit_histogram(x, order, digit)
    }
    fn compact_key(
        &self,
        x: &Vec<f32>,
        order: KeyOrder,
        key: u64,
        take_equal: usize,
    ) -> Result<Selected<Self, f32>> {
        Cpu.compact_key(x, order, key, take_equal).map(own)
    }
    fn topk_abs_segmented(
        &self,
        x: &Vec<f32>,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, f32>> {
        Cpu.topk_abs_segmented(x, offsets, ks).map(own)
    }
    fn gather(&self, x: &Vec<f32>, indices: &Vec<u32>) -> Result<Vec<f32>> {
        Cpu.gather(x, indices)
    }
    fn compact_above(&self, x: &Vec<f32>, t: f32) -> Result<Selected<Self, f32>> {
        Cpu.compact_above(x, t).map(own)
    }
    fn topk_abs(&self, x: &Vec<f32>, k: usize) -> Result<Selected<Self, f32>> {
        Cpu.topk_abs(x, k).map(own)
    }
    fn topk_signed(&self, x: &Vec<f32>, k: usize, end: Extreme) -> Result<Selected<Self, f32>> {
        Cpu.topk_signed(x, k, end).map(own)
    }
}

impl DenseOps<f32> for Delegating {
    fn scatter_add(
        &self,
        dense: &mut Vec<f32>,
        indices: &Vec<u32>,
        values: &Vec<f32>,
    ) -> Result<()> {
        Cpu.scatter_add(dense, indices, values)
    }
    fn mask(&self, dense: &mut Vec<f32>, indices: &Vec<u32>) -> Result<()> {
        Cpu.mask(dense, indices)
    }
    fn axpy(&self, a: f32, x: &Vec<f32>, y: &mut Vec<f32>) -> Result<()> {
        Cpu.axpy(a, x, y)
    }
    fn scale(&self, a: f32, x: &mut Vec<f32>) -> Result<()> {
        Cpu.scale(a, x)
    }
}

impl HashOps<f32> for Delegating {
    fn hash_partition(
        &self,
        indices: &Vec<u32>,
        values: &Vec<f32>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<f32>> {
        Cpu.hash_partition(indices, values, h)
    }
}

impl CodecOps<f32> for Delegating {
    fn qsgd_quantize(
        &self,
        x: &Vec<f32>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(Vec<f32>, Vec<u32>)> {
        Cpu.qsgd_quantize(x, p, counter_base)
    }
    fn qsgd_dequantize(
        &self,
        scales: &Vec<f32>,
        words: &Vec<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<Vec<f32>> {
        Cpu.qsgd_dequantize(scales, words, n, p)
    }
}

// The doc's `tests/suite.rs`: one line per suite, for the element types
// the backend implements.

mod backend_suite {
    sparse_core::backend_test_suite!(crate::Delegating; f32);
}

mod selector_suite {
    sparse_select::selector_test_suite!(crate::Delegating; f32);
}

mod differential {
    sparse_core::differential_test_suite!(backend_cpu::Cpu, crate::Delegating; f32);
}

/// `Delegating` is a `Backend<f32>` through the blanket impl alone, and
/// the generic code above the traits runs on it.
#[test]
fn generic_code_runs_on_the_new_backend() {
    use sparse_select::{RadixTopK, Selector};
    let x = Delegating.upload(&[0.1f32, -4.0, 2.0, 4.0, 0.0]).unwrap();
    let top = RadixTopK::magnitude().select(&Delegating, &x, 2).unwrap();
    assert_eq!(Delegating.download(&top.indices).unwrap(), vec![1, 3]);
}
