//! A step's checks: the gradients handed over (their number, lengths and
//! values) and every reduced result before anything is applied.

use super::work::Received;
use crate::trainer::Trainer;
use sparse_core::backend::{check_finite, check_finite_buffers};
use sparse_core::{Backend, Error, Result};
use sparse_select::Selector;

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// Checks every layer's reduced result before anything is applied: a
    /// collective's result and dropped entries valid sparse vectors of the
    /// layer's dimension, every value finite (a sum that overflowed is
    /// [`Error::NonFinite`]), a dense sum of the layer's length and finite.
    /// Returns the digest of the results, which the ranks compare.
    pub(super) fn check_received(&self, received: &[Received<B>]) -> Result<u64> {
        let mut words = Vec::with_capacity(received.len());
        for (layer, r) in self.layers.iter().zip(received) {
            let n = layer.spec.len;
            match r {
                Received::Compressed(sent) => {
                    let red = &sent.1;
                    for (what, v) in [("reduced result", &red.result), ("dropped", &red.dropped)] {
                        v.check()?;
                        if v.dim() != n {
                            return Err(Error::LengthMismatch {
                                what,
                                expected: n,
                                got: v.dim(),
                            });
                        }
                        check_finite(v.values())?;
                    }
                    // An entry a word: its index and its value's bits.
                    words.push(sparse_core::hash::digest_words(
                        red.result
                            .indices()
                            .iter()
                            .zip(red.result.values())
                            .map(|(&i, x)| u64::from(i) << 32 | u64::from(x.to_bits())),
                    ));
                }
                Received::Dense(sum) => {
                    if sum.len() != n {
                        return Err(Error::LengthMismatch {
                            what: "dense sum",
                            expected: n,
                            got: sum.len(),
                        });
                    }
                    check_finite(sum)?;
                    words.push(sparse_core::hash::digest_f32(sum));
                }
            }
        }
        Ok(sparse_core::hash::fnv1a(
            words.iter().flat_map(|w| w.to_le_bytes()),
        ))
    }

    /// The gradient buffers' number and lengths, and NaN or infinity with
    /// one reduction per layer on the backend, answered together
    /// ([`check_finite_buffers`]: one round trip on `backend-cuda`).
    pub(super) fn check_buffers(&self, grads: &[B::Buffer<f32>]) -> Result<()> {
        self.check_lengths(grads.iter().map(|g| self.b.len(g)))?;
        check_finite_buffers(&self.b, &grads.iter().collect::<Vec<_>>())
    }

    /// The host gradients' number and lengths, and NaN or infinity.
    pub(super) fn check(&self, grads: &[Vec<f32>]) -> Result<()> {
        self.check_lengths(grads.iter().map(Vec::len))?;
        grads.iter().try_for_each(|g| check_finite(g))
    }

    /// One gradient per layer, each of its layer's length.
    pub(super) fn check_lengths(&self, lens: impl ExactSizeIterator<Item = usize>) -> Result<()> {
        if lens.len() != self.layers.len() {
            return Err(Error::LengthMismatch {
                what: "gradients",
                expected: self.layers.len(),
                got: lens.len(),
            });
        }
        for (l, got) in self.layers.iter().zip(lens) {
            if got != l.spec.len {
                return Err(Error::LengthMismatch {
                    what: "layer gradient",
                    expected: l.spec.len,
                    got,
                });
            }
        }
        Ok(())
    }
}
