//! A bounds-checked cursor over untrusted bytes.

use crate::{Element, Error, Result};

/// Reads little-endian fields from untrusted bytes; every read is checked,
/// and [`Reader::finish`] rejects trailing bytes.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, naming `what` in its errors.
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self {
            bytes,
            pos: 0,
            what,
        }
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    /// The next `n` bytes.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if fewer remain.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::corrupt(
                self.what,
                format!(
                    "truncated: need {n} bytes at offset {}, {} left",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// One byte.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if none remains.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    /// One `u32`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if fewer than 4 bytes remain.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().expect("4 bytes"),
        ))
    }
    /// Checks that `count` items of `size` bytes are present, so that a
    /// length header never drives an allocation larger than the input.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if they are not.
    pub fn expect_items(&self, count: usize, size: usize) -> Result<()> {
        match count.checked_mul(size) {
            Some(n) if n <= self.remaining() => Ok(()),
            _ => Err(Error::corrupt(
                self.what,
                format!(
                    "length header {count} x {size} bytes exceeds the {} bytes left",
                    self.remaining()
                ),
            )),
        }
    }
    /// `n` little-endian `u32`s.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if truncated.
    pub fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        self.expect_items(n, 4)?;
        let b = self.bytes(n * 4)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }
    /// The `ceil(bits / 32)` words of a packed bit field of `bits` bits;
    /// bits past `bits` in the last word must be zero.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if truncated or padding bits are set.
    pub fn packed_words(&mut self, bits: usize) -> Result<Vec<u32>> {
        let words = self.u32s(bits.div_ceil(32))?;
        if !bits.is_multiple_of(32) && words.last().is_some_and(|w| w >> (bits % 32) != 0) {
            return Err(Error::corrupt(self.what, "non-zero padding bits"));
        }
        Ok(words)
    }
    /// `n` elements.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if truncated.
    pub fn elements<E: Element>(&mut self, n: usize) -> Result<Vec<E>> {
        self.expect_items(n, E::BYTES)?;
        let b = self.bytes(n * E::BYTES)?;
        Ok(b.chunks_exact(E::BYTES).map(E::read_le).collect())
    }
    /// Succeeds only if every byte was read.
    ///
    /// # Errors
    /// [`Error::Corrupt`] on trailing bytes.
    pub fn finish(self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(Error::corrupt(
                self.what,
                format!("{} trailing bytes", self.remaining()),
            ));
        }
        Ok(())
    }
    /// The name used in errors.
    pub fn what(&self) -> &'static str {
        self.what
    }
}
