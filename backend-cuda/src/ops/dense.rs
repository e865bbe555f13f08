//! [`DenseOps`]: updates of dense buffers, index checks deferred to the
//! fault words.

use crate::kernels::{axpy, cubes_for, grid, mask, scale, scatter};
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::backend::check_len;
use sparse_core::{DenseOps, Result};

impl<R: Runtime> DenseOps<f32> for CubeBackend<R> {
    fn scatter_add(
        &self,
        dense: &mut CubeBuffer<f32>,
        indices: &CubeBuffer<u32>,
        values: &CubeBuffer<f32>,
    ) -> Result<()> {
        check_len("scatter_add indices vs values", indices.len, values.len)?;
        if indices.len > 0 {
            self.launch(Reads::Part, |c| {
                scatter::launch_scatter_add(
                    c,
                    grid(cubes_for(indices.len)),
                    dense,
                    indices,
                    values,
                    &self.fault(),
                )
            });
        }
        Ok(())
    }
    fn mask(&self, dense: &mut CubeBuffer<f32>, indices: &CubeBuffer<u32>) -> Result<()> {
        if indices.len > 0 {
            self.launch(Reads::Part, |c| {
                mask::launch_mask(
                    c,
                    grid(cubes_for(indices.len)),
                    dense,
                    indices,
                    &self.fault(),
                )
            });
        }
        Ok(())
    }
    fn axpy(&self, a: f32, x: &CubeBuffer<f32>, y: &mut CubeBuffer<f32>) -> Result<()> {
        check_len("axpy x vs y", y.len, x.len)?;
        if y.len > 0 {
            self.launch(Reads::Whole, |c| {
                axpy::launch_axpy(c, grid(cubes_for(y.len)), a, x, y)
            });
        }
        Ok(())
    }
    fn scale(&self, a: f32, x: &mut CubeBuffer<f32>) -> Result<()> {
        if x.len > 0 {
            self.launch(Reads::Whole, |c| {
                scale::launch_scale(c, grid(cubes_for(x.len)), a, x)
            });
        }
        Ok(())
    }
}
