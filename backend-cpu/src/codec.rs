//! [`CodecOps`]: QSGD on the host.

use crate::Cpu;
use sparse_core::qsgd::{self, QsgdParams, Quantized};
use sparse_core::{CodecOps, Element, Result};

impl<E: Element> CodecOps<E> for Cpu {
    fn qsgd_quantize(
        &self,
        x: &Vec<E>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(Vec<E>, Vec<u32>)> {
        let q = qsgd::quantize(x, p, counter_base)?;
        Ok((q.scales, q.words))
    }
    fn qsgd_dequantize(
        &self,
        scales: &Vec<E>,
        words: &Vec<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<Vec<E>> {
        qsgd::dequantize(
            &Quantized {
                scales: scales.clone(),
                words: words.clone(),
            },
            n,
            p,
        )
    }
}
