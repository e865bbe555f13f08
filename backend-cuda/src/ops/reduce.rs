//! [`ReduceOps`]: one-pass statistics of `|x|` over the tiles.

use crate::{CubeBackend, CubeBuffer};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{ReduceOps, Result, abs_key};

impl<R: Runtime> ReduceOps<f32> for CubeBackend<R> {
    fn max_abs(&self, x: &CubeBuffer<f32>) -> Result<f32> {
        let st = self.stats(&x.bits(), u32::MAX)?;
        Ok(f32::from_bits(st.max_key))
    }
    /// One reduction per buffer and one round trip for all of them.
    fn finite_each(&self, xs: &[&CubeBuffer<f32>]) -> Result<Vec<bool>> {
        let bits: Vec<CubeBuffer<u32>> = xs.iter().map(|x| x.bits()).collect();
        CubeBackend::finite_each(self, &bits.iter().collect::<Vec<_>>())
    }
    fn mean_abs(&self, x: &CubeBuffer<f32>) -> Result<f64> {
        let st = self.stats(&x.bits(), u32::MAX)?;
        Ok(if x.len == 0 {
            0.0
        } else {
            st.sum / x.len as f64
        })
    }
    fn sum_squares(&self, x: &CubeBuffer<f32>) -> Result<f64> {
        Ok(self.stats(&x.bits(), u32::MAX)?.squares)
    }
    fn count_above(&self, x: &CubeBuffer<f32>, t: f32) -> Result<usize> {
        if t.is_nan() {
            self.stats(&x.bits(), u32::MAX)?;
            return Ok(0);
        }
        if t < 0.0 {
            self.stats(&x.bits(), u32::MAX)?;
            return Ok(x.len);
        }
        Ok(self.stats(&x.bits(), abs_key(t) as u32)?.above)
    }
}
