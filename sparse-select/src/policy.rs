//! RedSync's per-layer selection policy (Alg. 5).

use crate::{RadixTopK, Selection, Selector, ThresholdReuse, TrimmedTopK};
use sparse_core::{Backend, Element, KeyOrder, Result};

/// Which method the policy used for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyChoice {
    /// Exact radix top-k (small layers).
    Exact,
    /// Trimmed top-k (medium layers).
    Trimmed,
    /// Threshold binary search with reuse (large layers).
    BinarySearch,
    /// Quantized mode: exact top-k by signed value (largest).
    SignedTop,
    /// Quantized mode: exact low-k by signed value (smallest).
    SignedLow,
}

/// RedSync Alg. 5: by layer size in bytes, below `thsd1` exact top-k, below
/// `thsd2` trimmed top-k, else threshold binary search with reuse every
/// `interval` calls. Defaults from RedSync sec. 5.3: 128 KiB and 4 MiB.
///
/// With `quantize`, the set must be one-signed for the same-sign mean codec:
/// calls alternate between the k largest and the k smallest values. This
/// implementation uses exact signed radix selection for both at every size
/// (RedSync's trimmed and binary-search signed variants are not built);
/// the alternation and one-signed output are as the paper requires.
#[derive(Debug, Clone)]
pub struct Policy<E> {
    /// Below this many bytes: exact top-k.
    pub thsd1: usize,
    /// Below this many bytes: trimmed top-k.
    pub thsd2: usize,
    /// Quantized top-k/low-k alternation.
    pub quantize: bool,
    top_next: bool,
    trimmed: TrimmedTopK,
    reuse: ThresholdReuse<E>,
    /// The method of the last call.
    pub last: Option<PolicyChoice>,
}

impl<E> Policy<E> {
    /// RedSync's thresholds, reuse interval 5.
    pub fn new(quantize: bool) -> Self {
        Self {
            thsd1: 128 << 10,
            thsd2: 4 << 20,
            quantize,
            top_next: true,
            trimmed: TrimmedTopK::default(),
            reuse: ThresholdReuse::new(5),
            last: None,
        }
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for Policy<E> {
    fn name(&self) -> String {
        if self.quantize {
            "policy_quantized".into()
        } else {
            "policy".into()
        }
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        let bytes = b.len(x) * E::BYTES;
        if self.quantize {
            let (order, choice) = if self.top_next {
                (KeyOrder::Signed, PolicyChoice::SignedTop)
            } else {
                (KeyOrder::SignedReversed, PolicyChoice::SignedLow)
            };
            let s = RadixTopK { order }.select(b, x, k)?;
            self.top_next = !self.top_next;
            self.last = Some(choice);
            return Ok(s);
        }
        let (s, choice) = if bytes < self.thsd1 {
            (RadixTopK::magnitude().select(b, x, k)?, PolicyChoice::Exact)
        } else if bytes < self.thsd2 {
            (self.trimmed.select(b, x, k)?, PolicyChoice::Trimmed)
        } else {
            (self.reuse.select(b, x, k)?, PolicyChoice::BinarySearch)
        };
        self.last = Some(choice);
        Ok(s)
    }
}
