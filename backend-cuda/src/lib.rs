#![doc = include_str!("../README.md")]
//!
//! ## What runs where
//! - Selection works on the elements' `u32` bit patterns: order-preserving
//!   keys, radix digit histograms, two-pass stream compaction (per-tile
//!   counts, host offsets, a cube-wide scan and an in-order write). Integer
//!   outputs (indices, counts, histograms, bitmaps, hash placements' sets)
//!   equal the CPU reference exactly, ties included.
//! - Exact top-k of a whole buffer (`topk_abs`, `topk_signed`,
//!   `topk_finite`) takes three passes over it and one host round trip,
//!   after AIR top-k: two 11-bit digit histograms in shared memory merged
//!   with global atomics, the digit chosen on the device by a one-cube
//!   kernel, the last 10 bits from a table the second pass fills, then one
//!   collection pass whose offsets are scanned on the device
//!   (`docs/kernels.md`). The same kernels take every element at least the
//!   k-th largest (`topk_ties`, the threshold selectors' exact fallback)
//!   and every element above the k-th largest key of a sample
//!   (`compact_above_kth_of`, DGC's sampled threshold, the key found from
//!   the sample on the device: one pass over the input). SparDL's block
//!   and SparCML's bucket top-k (`topk_abs_segmented`) select on the
//!   device too, each segment's output at the sum of the ks before it,
//!   one round trip per call: where every segment holds at most 2,048
//!   elements (SparCML's buckets of 512) one cube per segment runs all
//!   four 8-bit digits in shared memory, one launch and one pass in all;
//!   a single segment is the whole-buffer top-k (three passes); otherwise
//!   the same select with a segment dimension (`kernels/segmented.rs`):
//!   three digit histograms, each into its segment's row, each followed
//!   by a choice kernel with one cube per segment, then the collection,
//!   per-segment offsets and merge: four passes.
//! - QSGD's codes equal the CPU's bit for bit on every device: the one
//!   product whose rounding decides a level is kept out of reach of the
//!   device compiler's multiply-add contraction (NVRTC contracts by
//!   default).
//! - `mean_abs` sums in `f32` within each cube of 4096 elements and in `f64`
//!   across cubes: within `1e-6` relative of the CPU's `f64` sum on the
//!   suite's inputs. `sum_squares` does the same with `x^2`: within `1e-6`
//!   relative where every `|x_i|` lies in about `[1e-19, 1e18]` (outside
//!   it an `f32` square underflows to 0 or a cube's sum can overflow to
//!   infinity). `axpy` may be contracted to a fused multiply-add by the
//!   device compiler: one rounding instead of two.
//!
//! ## What crosses to the host
//! [`CubeBackend::transfers`] counts every byte the backend moves between
//! host and device ([`Transfers`]): the data a caller moves through
//! [`BufferOps`](sparse_core::BufferOps) (`upload`, `download`; `zeros`
//! allocates and clears on the device and moves nothing) apart from the
//! primitives' own transfers (the readbacks of per-tile counts, histograms,
//! partial reductions and fault words, the writes of tile lists and
//! offsets). A kernel over device memory moves nothing, so a training
//! step's data downloads are what it asks for: the selected pairs and the
//! dense layers' gradients (`residual-sgd/tests/kernels.rs` checks it in
//! bytes). A backend and its clones share the counters.
//!
//! Each control readback is a host round trip. Per call, on an input of
//! `n` elements in `T = ceil(n / 4096)` tiles without NaN (a NaN found
//! costs one more readback, of the input, to name it), the primitives read
//! back (`tests/transfers.rs` checks each as an exact formula):
//!
//! | primitive | bytes | readbacks |
//! |---|---|---|
//! | `download` (besides the data itself) | 16 (the fault words) | 1 |
//! | `max_abs`, `mean_abs`, `sum_squares`, `count_above` | `20 T` | 1 |
//! | `digit_histogram` | `4 (2^bits + 1)` | 1 |
//! | `compact_above`, `compact_key` | `12 T` | 1 |
//! | `topk_abs`, `topk_signed`, `topk_finite`, `topk_ties`, `compact_above_kth_of`, `accumulate_topk` (any `n` and `k`) | 32 (the state words) | 1 |
//! | `topk_abs_segmented`, every segment at most 2,048 | 4 (the NaN count) | 1 |
//! | `topk_abs_segmented`, one segment, longer | 32 (the state words) | 1 |
//! | `topk_abs_segmented`, several segments, one longer (any ks) | 8 (the NaN and fault counts) | 1 |
//! | `bitmap_encode` | 4 | 1 |
//! | `bitmap_decode` | `4 ceil(ceil(n / 32) / 4096)` | 1 |
//! | `qsgd_quantize` | 4 | 1 |
//! | `hash_partition` | `8 P (r1 + r2) + 4 (P + 1)`, plus `8` per element in the serial fallback | 2 to 3 |
//! | `upload`, `zeros`, `gather`, `gather_indices`, `scatter_add`, `mask`, `axpy`, `scale`, `qsgd_dequantize` | 0 | 0 |
//!
//! Before the three-pass top-k, a small layer's exact top-k read back about
//! 4 KB of histograms whatever its size: in a small training step the
//! primitives' readbacks could outweigh the selected pairs (42 KB against
//! 5.6 KB of data was seen on the digits MLP), which is why they are
//! counted apart. Launches, round trips and passes over the input are
//! counted too ([`CubeBackend::work`], [`Work`]).
//!
//! ## Element types
//! The kernels are written for `f32`, the type gradients travel in on every
//! runtime here (WGSL has no `f64`, and `bf16` exists on none of the
//! runtimes' WGSL paths), so `CubeBackend<R>` is a
//! [`Backend<f32>`](sparse_core::Backend) and no other: buffers of any
//! [`Scalar`](sparse_core::Scalar) upload and download, and an element
//! primitive on `f64`, `f16` or `bf16` does not compile. The shared suites
//! run for `f32`.
//!
//! ## Why `CubeBackend<R>` holds a type-erased client
//! cubecl 0.11 launches kernels through a runtime-erased `Client`; the
//! runtime `R` only decides which device is opened and probed. The type
//! parameter stays so that a backend's runtime is part of its type
//! (`WgpuBackend`, `CudaBackend`) and code can be generic over it.

// Kernel arguments are built from raw device handles (`BufferArg::
// from_raw_parts`) and launched unchecked: both are `unsafe` in cubecl.
// Both happen only in `CubeBuffer::arg`, whose length in words is the
// length its handle was allocated with, and in the launcher beside each
// kernel (`kernels/*.rs`), whose kernel bounds-checks its own accesses.
#![allow(unsafe_code)]

mod kernels;
mod ops;

use cubecl::client::Client;
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl_runtime::runtime::Runtime;
use sparse_core::{Error, Result};
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The kernel backend on runtime `R`.
///
/// Index checks of `scatter_add`, `mask` and `gather` happen in the
/// kernels, without waiting for them: an index past the buffer changes
/// nothing (a gathered value is 0) and is recorded on the device, and the
/// next [`sparse_core::BufferOps::download`] on this backend returns
/// [`Error::IndexOutOfRange`] for it (the largest bad index, the first bad
/// position of the last faulting call, the length checked against) and
/// clears the record. So a training step on the kernels moves only the
/// selected pairs and the reduced result, with no round trip per update.
/// Each clone has its own record: a fault is reported by the next download
/// of the clone whose kernel recorded it.
///
/// Every byte the backend moves between host and device is counted
/// ([`CubeBackend::transfers`]). The counters are shared by a backend and
/// all its clones, so the value a caller keeps reads what a trainer or a
/// collective did with the clone it was given; a backend made anew by
/// [`CubeBackend::new`] counts apart.
pub struct CubeBackend<R: Runtime> {
    client: Client,
    name: &'static str,
    fault: std::sync::Mutex<CubeBuffer<u32>>,
    counters: Arc<Counters>,
    _runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> Clone for CubeBackend<R> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            name: self.name,
            fault: std::sync::Mutex::new(fault_words(&self.client)),
            counters: Arc::clone(&self.counters),
            _runtime: PhantomData,
        }
    }
}

/// Four zeroed fault words ([`CubeBackend`]'s deferred index check),
/// cleared on the device: nothing crosses.
fn fault_words(client: &Client) -> CubeBuffer<u32> {
    cleared(client, 4)
}

/// A new buffer of `len` items, allocated and cleared on the device.
fn cleared<T>(client: &Client, len: usize) -> CubeBuffer<T> {
    let buf = CubeBuffer::new(client.empty(words_for::<T>(len) * 4), len);
    kernels::fill::launch_clear(client, &buf);
    buf
}

/// The bytes a [`CubeBackend`] moved between host and device since it was
/// made, and the number of transfers, by who asked for them.
///
/// *Data* transfers are the ones a caller asks for through
/// [`sparse_core::BufferOps`]: `upload` to the device, `download` to the
/// host (`zeros` allocates and clears on the device and moves nothing).
/// *Control* transfers are the ones the primitives make themselves:
/// readbacks of per-tile counts, radix histograms, partial reductions and
/// the fault words that [`sparse_core::BufferOps::download`] checks, and
/// writes of tile lists, offsets and keys. A kernel that only reads and
/// writes device memory moves nothing. Each control readback is a host
/// round trip; the crate documentation bounds them per primitive call
/// ("What crosses to the host").
///
/// Bytes are what crosses: whole 32-bit words, so a buffer of `n` `f32`
/// or `u32` moves `4 n` bytes (at least one word; empty downloads move
/// nothing). A backend and its clones share one set of counters; `since`
/// gives the difference between two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Bytes [`sparse_core::BufferOps::download`] read to the host.
    pub downloaded: u64,
    /// Calls of [`sparse_core::BufferOps::download`] that read anything.
    pub downloads: u64,
    /// Bytes [`sparse_core::BufferOps::upload`] wrote to the device.
    pub uploaded: u64,
    /// Their calls.
    pub uploads: u64,
    /// Bytes the primitives read back to the host themselves.
    pub control_read: u64,
    /// Their readbacks.
    pub control_reads: u64,
    /// Bytes the primitives wrote to the device themselves.
    pub control_written: u64,
    /// Their writes.
    pub control_writes: u64,
}

impl Transfers {
    /// What moved between `earlier` (a reading of the same backend or a
    /// clone of it; a reading of a backend made apart may be ahead, and
    /// then its fields give 0, not an overflow) and this reading.
    #[must_use]
    pub fn since(&self, earlier: &Transfers) -> Transfers {
        Transfers {
            downloaded: self.downloaded.saturating_sub(earlier.downloaded),
            downloads: self.downloads.saturating_sub(earlier.downloads),
            uploaded: self.uploaded.saturating_sub(earlier.uploaded),
            uploads: self.uploads.saturating_sub(earlier.uploads),
            control_read: self.control_read.saturating_sub(earlier.control_read),
            control_reads: self.control_reads.saturating_sub(earlier.control_reads),
            control_written: self.control_written.saturating_sub(earlier.control_written),
            control_writes: self.control_writes.saturating_sub(earlier.control_writes),
        }
    }
    /// Every byte read to the host, data and control.
    pub fn to_host(&self) -> u64 {
        self.downloaded + self.control_read
    }
    /// Every byte written to the device, data and control.
    pub fn to_device(&self) -> u64 {
        self.uploaded + self.control_written
    }
}

/// The device work a [`CubeBackend`] did since it was made: kernel
/// launches, host round trips and passes over the input. A backend and its
/// clones share one set of counters, as they share [`Transfers`]; per call,
/// take the difference of two readings ([`Work::since`],
/// [`CubeBackend::work_of`]).
///
/// - A *launch* is one kernel dispatched to the device (the backend's
///   own setup, the four fault words a backend and each clone clear when
///   made, is not counted).
/// - A *round trip* is one readback the host waits on: every control
///   readback ([`Transfers::control_reads`]) and every data download
///   ([`Transfers::downloads`]).
/// - A *pass* is a launch of a kernel that reads the whole input of the
///   primitive that launched it (the array a selection or reduction is
///   about, both operands of `axpy`). Each launch site declares what its
///   kernel reads (`Reads::Whole` or `Reads::Part`), and a pass is a
///   launch declared `Whole`; a kernel that may stop early on the device (the
///   selection's passes once the k-th key is known) is counted as
///   declared, so `passes` is an upper bound of what the device read.
///
/// `docs/kernels.md` lists every kernel's declaration and the counts per
/// call of the selection primitives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Kernels launched.
    pub launches: u64,
    /// Readbacks the host waited on (control readbacks and downloads).
    pub round_trips: u64,
    /// Launches of kernels that read their primitive's whole input.
    pub passes: u64,
}

impl Work {
    /// The work done between `earlier` (a reading of the same backend or a
    /// clone of it) and this reading; fields behind `earlier` give 0.
    #[must_use]
    pub fn since(&self, earlier: &Work) -> Work {
        Work {
            launches: self.launches.saturating_sub(earlier.launches),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            passes: self.passes.saturating_sub(earlier.passes),
        }
    }
}

/// What a kernel reads of the input of the primitive that launches it,
/// declared at each launch site ([`Work::passes`] counts the `Whole`
/// ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Every element of the input (a pass).
    Whole,
    /// Less: a buffer derived from the input (histograms, per-tile counts,
    /// the candidates of the k-th key's digit, the selected entries), the
    /// entries a sparse list names, or nothing (a clear).
    Part,
}

/// [`Transfers`] and [`Work`] as atomic counters: bytes and calls of each
/// kind of transfer, launches, round trips and passes.
#[derive(Default)]
struct Counters {
    downloaded: [AtomicU64; 2],
    uploaded: [AtomicU64; 2],
    control_read: [AtomicU64; 2],
    control_written: [AtomicU64; 2],
    launches: AtomicU64,
    round_trips: AtomicU64,
    passes: AtomicU64,
}

impl Counters {
    fn add(&self, c: &[AtomicU64; 2], bytes: usize) {
        c[0].fetch_add(bytes as u64, Ordering::Relaxed);
        c[1].fetch_add(1, Ordering::Relaxed);
    }
    fn launched(&self, reads: Reads) {
        self.launches.fetch_add(1, Ordering::Relaxed);
        if reads == Reads::Whole {
            self.passes.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn work(&self) -> Work {
        Work {
            launches: self.launches.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
            passes: self.passes.load(Ordering::Relaxed),
        }
    }
    fn read(&self) -> Transfers {
        let get = |c: &[AtomicU64; 2]| (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed));
        let (downloaded, downloads) = get(&self.downloaded);
        let (uploaded, uploads) = get(&self.uploaded);
        let (control_read, control_reads) = get(&self.control_read);
        let (control_written, control_writes) = get(&self.control_written);
        Transfers {
            downloaded,
            downloads,
            uploaded,
            uploads,
            control_read,
            control_reads,
            control_written,
            control_writes,
        }
    }
}

impl<R: Runtime> std::fmt::Debug for CubeBackend<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CubeBackend")
            .field("runtime", &self.name)
            .finish()
    }
}

/// The backend on the wgpu runtime (any Vulkan, Metal or DX12 device;
/// lavapipe without a GPU).
#[cfg(feature = "wgpu")]
pub type WgpuBackend = CubeBackend<cubecl::wgpu::WgpuRuntime>;

/// The backend on the CUDA runtime.
#[cfg(feature = "cuda")]
pub type CudaBackend = CubeBackend<cubecl::cuda::CudaRuntime>;

fn runtime_name<R: Runtime>() -> &'static str {
    let t = std::any::type_name::<R>().to_ascii_lowercase();
    if t.contains("cuda") {
        "cuda"
    } else if t.contains("wgpu") {
        "wgpu"
    } else if t.contains("hip") {
        "hip"
    } else {
        "cubecl"
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// The backend on `device`, after checking that the runtime has it
    /// (opening a client on a missing device would panic inside cubecl).
    ///
    /// # Errors
    /// [`Error::Device`] if the runtime finds no such device.
    pub fn new(device: &R::Device) -> Result<Self> {
        use cubecl_common::device::Device as _;
        let name = runtime_name::<R>();
        R::find_device(device.to_id()).map_err(|available| Error::Device {
            backend: name,
            detail: format!("no such device ({available} of this kind on this machine)"),
        })?;
        let client = R::client(device);
        Ok(Self {
            fault: std::sync::Mutex::new(fault_words(&client)),
            counters: Arc::default(),
            client,
            name,
            _runtime: PhantomData,
        })
    }

    /// Every byte this backend and its clones moved between host and
    /// device so far ([`Transfers`]: data and control, each way).
    pub fn transfers(&self) -> Transfers {
        self.counters.read()
    }

    /// The kernel launches, host round trips and passes over the input this
    /// backend and its clones made so far ([`Work`]).
    pub fn work(&self) -> Work {
        self.counters.work()
    }

    /// `f`'s result and the [`Work`] done while it ran: one call's
    /// launches, round trips and passes, where no clone on another thread
    /// works meanwhile (the counters are shared).
    pub fn work_of<T>(&self, f: impl FnOnce() -> T) -> (T, Work) {
        let before = self.work();
        let out = f();
        (out, self.work().since(&before))
    }

    /// The backend on the runtime's default device.
    ///
    /// # Errors
    /// As [`CubeBackend::new`].
    pub fn new_default() -> Result<Self> {
        Self::new(&R::Device::default())
    }

    /// The cubecl client, to launch kernels of one's own on the same device.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// A device buffer of `T`: a cubecl handle of whole 32-bit words (at least
/// one) holding `len` items.
pub struct CubeBuffer<T> {
    handle: Handle,
    len: usize,
    words: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> CubeBuffer<T> {
    fn new(handle: Handle, len: usize) -> Self {
        Self {
            handle,
            len,
            words: words_for::<T>(len),
            _t: PhantomData,
        }
    }
    /// Another handle to the same device memory.
    fn share(&self) -> CubeBuffer<T> {
        CubeBuffer::new(self.handle.clone(), self.len)
    }
    /// Kernel argument over the buffer's words.
    pub(crate) fn arg(&self) -> BufferArg {
        // SAFETY: the handle was allocated with `words` 32-bit words.
        unsafe { BufferArg::from_raw_parts(self.handle.clone(), self.words) }
    }
}

impl<T> CubeBuffer<T> {
    /// The cubecl handle of the buffer's memory (to hand it to another
    /// cubecl user on the same client without a copy, as a burn tensor).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// A buffer of `len` items over `handle`'s memory, as it lies (no copy,
    /// nothing crosses): memory another cubecl user allocated on this
    /// backend's client, such as a burn tensor on burn's wgpu or cuda
    /// backend on the same device, handed to the primitives. The items are
    /// the first `len` of the handle's bytes (after its offset), read as
    /// `T`.
    ///
    /// # Errors
    /// [`Error::Device`] if the handle belongs to another device's client
    /// (memory coordinates of another device mean nothing here);
    /// [`Error::LengthMismatch`] if it holds fewer bytes than `len` items
    /// take (in whole 32-bit words, at least one).
    pub fn buffer_from_handle<T>(&self, handle: Handle, len: usize) -> Result<CubeBuffer<T>> {
        if handle.service != self.client.service_id() {
            return Err(self.device_error(
                "the handle belongs to another device's client: allocate it on this \
                 backend's device (CubeBackend::client)",
            ));
        }
        let need = words_for::<T>(len) * 4;
        let have = usize::try_from(handle.size_in_used()).unwrap_or(usize::MAX);
        if have < need {
            return Err(Error::LengthMismatch {
                what: "device handle bytes",
                expected: need,
                got: have,
            });
        }
        Ok(CubeBuffer::new(handle, len))
    }
}

impl CubeBuffer<f32> {
    /// The elements' bit patterns, for the kernels that only compare keys
    /// or move elements (the same memory).
    pub(crate) fn bits(&self) -> CubeBuffer<u32> {
        CubeBuffer::new(self.handle.clone(), self.len)
    }
}

impl CubeBuffer<u32> {
    /// The `f32` elements whose bit patterns these are (the same memory).
    pub(crate) fn floats(&self) -> CubeBuffer<f32> {
        CubeBuffer::new(self.handle.clone(), self.len)
    }
}

fn words_for<T>(len: usize) -> usize {
    (len * std::mem::size_of::<T>()).div_ceil(4).max(1)
}

impl<R: Runtime> CubeBackend<R> {
    fn device_error(&self, e: impl std::fmt::Display) -> Error {
        Error::Device {
            backend: self.name,
            detail: e.to_string(),
        }
    }

    /// A new buffer holding `data`, written by a primitive (a control
    /// write).
    fn put<T: bytemuck::Pod>(&self, data: &[T]) -> CubeBuffer<T> {
        self.write(data, &self.counters.control_written)
    }

    /// A new buffer holding `data`, counted in `counter`.
    fn write<T: bytemuck::Pod>(&self, data: &[T], counter: &[AtomicU64; 2]) -> CubeBuffer<T> {
        let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        bytes.resize(words_for::<T>(data.len()) * 4, 0);
        self.counters.add(counter, bytes.len());
        CubeBuffer::new(self.client.create_from_slice(&bytes), data.len())
    }

    /// A new buffer of `len` items, zeroed on the device (nothing
    /// crosses).
    fn zeroed<T>(&self, len: usize) -> CubeBuffer<T> {
        self.counters.launched(Reads::Part);
        cleared(&self.client, len)
    }

    /// Launches a kernel (`launch` is handed the client), counted as a
    /// launch and, where it reads the whole input, as a pass ([`Work`]).
    pub(crate) fn launch(&self, reads: Reads, launch: impl FnOnce(&Client)) {
        self.counters.launched(reads);
        launch(&self.client);
    }

    /// A new buffer of `len` items whose contents the next kernel writes.
    fn uninit<T>(&self, len: usize) -> CubeBuffer<T> {
        CubeBuffer::new(self.client.empty(words_for::<T>(len) * 4), len)
    }

    /// The current fault words (a handle to them).
    fn fault(&self) -> CubeBuffer<u32> {
        self.fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .share()
    }

    /// The deferred index check: [`Error::IndexOutOfRange`] if a kernel
    /// recorded a bad index since the last check, which it then clears.
    fn take_fault(&self) -> Result<()> {
        let f = self.get(&self.fault())?;
        if f[0] == 0 {
            return Ok(());
        }
        *self
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fault_words(&self.client);
        Err(Error::IndexOutOfRange {
            index: u64::from(f[2]),
            position: (u32::MAX - f[1]) as usize,
            dim: u64::from(f[3]),
        })
    }

    /// The items of a buffer, on the host, read by a primitive (a control
    /// readback).
    fn get<T: bytemuck::Pod>(&self, buf: &CubeBuffer<T>) -> Result<Vec<T>> {
        self.read(buf, &self.counters.control_read)
    }

    /// The items of several control buffers, on the host, in one round
    /// trip (one readback of all of them).
    fn get_many<T: bytemuck::Pod>(&self, bufs: &[&CubeBuffer<T>]) -> Result<Vec<Vec<T>>> {
        let live: Vec<_> = bufs.iter().filter(|b| b.len > 0).collect();
        if live.is_empty() {
            return Ok(bufs.iter().map(|_| Vec::new()).collect());
        }
        let mut bytes = self
            .client
            .read(live.iter().map(|b| b.handle.clone()).collect())
            .map_err(|e| self.device_error(format!("{e:?}")))?
            .into_iter();
        self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::with_capacity(bufs.len());
        let mut read = 0;
        for b in bufs {
            if b.len == 0 {
                out.push(Vec::new());
                continue;
            }
            let got = bytes
                .next()
                .ok_or_else(|| self.device_error("a readback returned fewer buffers than asked"))?;
            read += got.len();
            let n = b.len * std::mem::size_of::<T>();
            out.push(bytemuck::pod_collect_to_vec(&got[..n]));
        }
        // One readback, however many buffers it brought.
        self.counters.add(&self.counters.control_read, read);
        Ok(out)
    }

    /// The items of a buffer, on the host, counted in `counter`.
    fn read<T: bytemuck::Pod>(
        &self,
        buf: &CubeBuffer<T>,
        counter: &[AtomicU64; 2],
    ) -> Result<Vec<T>> {
        if buf.len == 0 {
            return Ok(Vec::new());
        }
        let bytes = self
            .client
            .read_one(buf.handle.clone())
            .map_err(|e| self.device_error(format!("{e:?}")))?;
        self.counters.add(counter, bytes.len());
        self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
        let n = buf.len * std::mem::size_of::<T>();
        Ok(bytemuck::pod_collect_to_vec(&bytes[..n]))
    }
}
