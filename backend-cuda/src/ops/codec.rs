//! [`CodecOps`]: QSGD's quantization on the device.

use crate::kernels::qsgd;
use crate::{CubeBackend, CubeBuffer, Reads};
use cubecl_runtime::runtime::Runtime;
use sparse_core::backend::check_len;
use sparse_core::qsgd::QsgdParams;
use sparse_core::{CodecOps, Result};

impl<R: Runtime> CodecOps<f32> for CubeBackend<R> {
    fn qsgd_quantize(
        &self,
        x: &CubeBuffer<f32>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(CubeBuffer<f32>, CubeBuffer<u32>)> {
        let n = x.len;
        if n == 0 {
            return Ok((self.zeroed(0), self.zeroed(0)));
        }
        let (nb, nw) = (p.buckets(n), p.words(n));
        let scales = self.uninit::<u32>(nb);
        let bad = self.zeroed::<u32>(1);
        let words = self.uninit::<u32>(nw);
        let bits = x.bits();
        self.launch(Reads::Whole, |c| {
            qsgd::launch_qsgd_scales(c, &bits, p, &scales, &bad)
        });
        if self.get(&bad)?[0] > 0 {
            return Err(self.first_key_above(&bits, 0x7f7f_ffff));
        }
        self.launch(Reads::Whole, |c| {
            qsgd::launch_qsgd_codes(c, x, &scales.floats(), &words, p, counter_base)
        });
        Ok((scales.floats(), words))
    }
    fn qsgd_dequantize(
        &self,
        scales: &CubeBuffer<f32>,
        words: &CubeBuffer<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<CubeBuffer<f32>> {
        check_len("qsgd scales", p.buckets(n), scales.len)?;
        check_len("qsgd words", p.words(n), words.len)?;
        let out = self.uninit::<f32>(n);
        if n > 0 {
            self.launch(Reads::Whole, |c| {
                qsgd::launch_qsgd_decode(c, words, scales, &out, p)
            });
        }
        Ok(out)
    }
}
