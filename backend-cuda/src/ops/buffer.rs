//! [`BufferOps`]: allocation and the counted host transfers.

use crate::{CubeBackend, CubeBuffer};
use cubecl_runtime::runtime::Runtime;
use sparse_core::{BufferOps, Result, Scalar};

impl<R: Runtime> BufferOps for CubeBackend<R> {
    type Buffer<T: Scalar> = CubeBuffer<T>;
    fn name(&self) -> &'static str {
        self.name
    }
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<CubeBuffer<T>> {
        Ok(self.write(data, &self.counters.uploaded))
    }
    fn download<T: Scalar>(&self, buf: &CubeBuffer<T>) -> Result<Vec<T>> {
        let out = self.read(buf, &self.counters.downloaded)?;
        self.take_fault()?;
        Ok(out)
    }
    fn zeros<T: Scalar>(&self, len: usize) -> Result<CubeBuffer<T>> {
        Ok(self.zeroed(len))
    }
    fn len<T: Scalar>(&self, buf: &CubeBuffer<T>) -> usize {
        buf.len
    }
}
