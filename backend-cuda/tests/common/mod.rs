//! The kernel backends the integration tests run on.

/// The wgpu backend (lavapipe where there is no GPU).
#[cfg(feature = "wgpu")]
pub fn wgpu() -> backend_cuda::WgpuBackend {
    backend_cuda::WgpuBackend::new_default().expect("no wgpu device: install mesa-vulkan-drivers")
}

/// The CUDA backend, or `None` (with the reason printed) without a device:
/// `new_default` probes first, as opening a client on a missing device
/// would panic.
#[cfg(feature = "cuda")]
#[allow(dead_code)]
pub fn cuda() -> Option<backend_cuda::CudaBackend> {
    match backend_cuda::CudaBackend::new_default() {
        Ok(b) => Some(b),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}

/// Values as their bits, to compare them exactly (NaN and -0 included).
#[allow(dead_code)]
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

/// Selector `s` on the kernels and on backend-cpu (a fresh clone of it on
/// each): the same selection bit for bit (indices, values, count,
/// threshold) or the same error. Returns the count, or the error.
#[cfg(feature = "wgpu")]
#[allow(dead_code)]
pub fn same_selection<S>(
    b: &backend_cuda::WgpuBackend,
    s: &S,
    x: &[f32],
    k: usize,
    what: &str,
) -> Result<usize, sparse_core::Error>
where
    S: sparse_select::Selector<backend_cuda::WgpuBackend, f32>
        + sparse_select::Selector<backend_cpu::Cpu, f32>
        + Clone,
{
    use sparse_core::BufferOps as _;
    let (mut sg, mut sc) = (s.clone(), s.clone());
    let buf = b.upload(x).unwrap();
    let got = sg.select(b, &buf, k);
    let want = sc.select(&backend_cpu::Cpu, &x.to_vec(), k);
    match (got, want) {
        (Ok(g), Ok(w)) => {
            assert_eq!(b.download(&g.indices).unwrap(), w.indices, "{what}");
            assert_eq!(
                bits(&b.download(&g.values).unwrap()),
                bits(&w.values),
                "{what}"
            );
            assert_eq!(g.count, w.count, "{what}: count");
            assert_eq!(g.threshold, w.threshold, "{what}: threshold");
            Ok(w.count)
        }
        (Err(g), Err(w)) => {
            assert_eq!(g, w, "{what}");
            Err(w)
        }
        (g, w) => panic!(
            "{what}: {:?} vs {:?}",
            g.map(|s| s.count),
            w.map(|s| s.count)
        ),
    }
}

/// A small deterministic generator for the probes (SplitMix64's stream):
/// the crate has no rand.
#[allow(dead_code)]
pub struct Rng(sparse_core::SplitMix64);

#[allow(dead_code)]
impl Rng {
    pub fn seed_from_u64(s: u64) -> Self {
        Self(sparse_core::SplitMix64(s))
    }
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..hi`.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }
}
