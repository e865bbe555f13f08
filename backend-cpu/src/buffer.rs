//! [`BufferOps`]: buffers are `Vec`s.

use crate::Cpu;
use sparse_core::{BufferOps, Result, Scalar};

impl BufferOps for Cpu {
    type Buffer<T: Scalar> = Vec<T>;
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<Vec<T>> {
        Ok(data.to_vec())
    }
    fn download<T: Scalar>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
        Ok(buf.clone())
    }
    fn zeros<T: Scalar>(&self, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::zeroed(); len])
    }
    fn len<T: Scalar>(&self, buf: &Vec<T>) -> usize {
        buf.len()
    }
}
