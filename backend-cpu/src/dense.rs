//! [`DenseOps`]: updates of dense buffers.

use crate::{Cpu, check_indices};
use sparse_core::backend::check_len;
use sparse_core::{DenseOps, Element, Result};

impl<E: Element> DenseOps<E> for Cpu {
    fn scatter_add(&self, dense: &mut Vec<E>, indices: &Vec<u32>, values: &Vec<E>) -> Result<()> {
        check_len("scatter_add indices vs values", indices.len(), values.len())?;
        check_indices(indices, dense.len())?;
        for (&i, &v) in indices.iter().zip(values) {
            dense[i as usize] = dense[i as usize] + v;
        }
        Ok(())
    }
    fn mask(&self, dense: &mut Vec<E>, indices: &Vec<u32>) -> Result<()> {
        check_indices(indices, dense.len())?;
        for &i in indices {
            dense[i as usize] = E::zero();
        }
        Ok(())
    }
    fn axpy(&self, a: E, x: &Vec<E>, y: &mut Vec<E>) -> Result<()> {
        check_len("axpy x vs y", y.len(), x.len())?;
        for (yi, &xi) in y.iter_mut().zip(x) {
            *yi = a * xi + *yi;
        }
        Ok(())
    }
    fn scale(&self, a: E, x: &mut Vec<E>) -> Result<()> {
        for v in x.iter_mut() {
            *v = a * *v;
        }
        Ok(())
    }
}
