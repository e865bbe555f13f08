//! RedSync's per-layer selection policy (Alg. 5).

use crate::{RadixTopK, Selection, Selector, ThresholdReuse, TrimmedTopK};
use sparse_core::state::{Scope, State};
use sparse_core::{Backend, Element, Error, KeyOrder, Result};

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
///
/// Not quantized, every selection keeps RedSync's threshold contract (the
/// exact top-k on small and medium layers; `k` to `2k` of the largest
/// magnitudes, a threshold separating them, on large ones), which the
/// selector suite checks (`testing::Promise::Threshold`); quantized, it is
/// the exact signed top-k or low-k.
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
    /// The quantized alternation's next side ([`Scope::Shared`]: every
    /// rank alternates alike), the settings (checked on load) and the
    /// threshold reuse of large layers (a child).
    fn save_state(&self) -> Result<State> {
        let mut s = State::new("sparse_select::Policy", 1);
        s.put_bool("top_next", Scope::Shared, self.top_next)
            .put_bool("quantize", Scope::Shared, self.quantize)
            .put_u64("thsd1", Scope::Shared, self.thsd1 as u64)
            .put_u64("thsd2", Scope::Shared, self.thsd2 as u64)
            .put_child("reuse", self.reuse.state());
        Ok(s)
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect("sparse_select::Policy", 1)?;
        let saved = (s.bool("quantize")?, s.u64("thsd1")?, s.u64("thsd2")?);
        if saved != (self.quantize, self.thsd1 as u64, self.thsd2 as u64) {
            return Err(Error::corrupt(
                "training state",
                format!(
                    "sparse_select::Policy: saved with (quantize, thsd1, thsd2) = {saved:?}, this policy has {:?}",
                    (self.quantize, self.thsd1, self.thsd2)
                ),
            ));
        }
        let top_next = s.bool("top_next")?;
        // Check the child on a copy, so that an error leaves self unchanged.
        let mut reuse = self.reuse.clone();
        reuse.load(s.child("reuse")?)?;
        self.top_next = top_next;
        self.reuse = reuse;
        Ok(())
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
