//! COO: sorted `u32` indices followed by the values.

use super::{Encoding, Raw, Reader, ValueCodec, read_header, write_header};
use crate::{Element, Error, Result, SparseVec};

const TAG: u8 = 1;

/// Coordinate list: `nnz: u32`, `nnz` indices, then the values section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coo<V = Raw>(pub V);

impl<E: Element, V: ValueCodec<E>> Encoding<E> for Coo<V> {
    fn name(&self) -> String {
        suffixed("coo", &self.0.name())
    }
    fn lossless(&self) -> bool {
        self.0.lossless()
    }
    fn index_bytes(&self, v: &SparseVec<E>) -> Result<usize> {
        Ok(4 * v.nnz())
    }
    fn encoded_len(&self, v: &SparseVec<E>) -> Result<usize> {
        Ok(super::HEADER_BYTES + 4 + 4 * v.nnz() + self.0.encoded_len(v.nnz()))
    }
    fn encode_into(&self, v: &SparseVec<E>, out: &mut Vec<u8>) -> Result<()> {
        v.check()?;
        write_header::<E>(out, TAG, V::TAG, v.dim());
        out.extend_from_slice(&(v.nnz() as u32).to_le_bytes());
        super::write_words(out, v.indices());
        self.0.encode(v.values(), out)
    }
    fn decode(&self, bytes: &[u8]) -> Result<SparseVec<E>> {
        super::decode_fresh(self, bytes)
    }
    fn decode_into(
        &self,
        bytes: &[u8],
        indices: &mut Vec<u32>,
        values: &mut Vec<E>,
    ) -> Result<usize> {
        indices.clear();
        values.clear();
        let mut r = Reader::new(bytes, "coo");
        let dim = read_header::<E>(&mut r, "coo", TAG, V::TAG)?;
        let nnz = r.u32()? as usize;
        if nnz > dim {
            return Err(Error::corrupt(
                "coo",
                format!("nnz {nnz} exceeds dimension {dim}"),
            ));
        }
        r.expect_items(nnz, 4)?;
        let b = r.bytes(4 * nnz)?;
        indices.extend(
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))),
        );
        self.0.decode_into(&mut r, nnz, values)?;
        r.finish()?;
        // The checks of `SparseVec::new`, on the vectors in place.
        let valid = crate::sparse::check_dim(dim).and_then(|()| {
            if indices.len() == values.len() {
                crate::sparse::check_indices(dim, indices)
            } else {
                Err(Error::LengthMismatch {
                    what: "indices vs values",
                    expected: indices.len(),
                    got: values.len(),
                })
            }
        });
        valid.map_err(|e| Error::corrupt("coo", e))?;
        Ok(dim)
    }
}

/// `"coo"` for raw values, `"coo+f16"` otherwise.
pub(super) fn suffixed(base: &str, codec: &str) -> String {
    if codec == "raw" {
        base.to_string()
    } else {
        format!("{base}+{codec}")
    }
}
