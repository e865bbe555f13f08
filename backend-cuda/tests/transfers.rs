//! The transfer counters (`CubeBackend::transfers`): every byte between
//! host and device, data (what `BufferOps` was asked to move) apart from
//! control (what the primitives move themselves), counted as it crosses.

#![cfg(feature = "wgpu")]

use backend_cuda::{Transfers, WgpuBackend};
use sparse_core::backend::check_finite_buffer;
use sparse_core::{BufferOps, DenseOps, KeyOrder, ReduceOps, SelectOps};

fn wgpu() -> WgpuBackend {
    WgpuBackend::new_default().expect("no wgpu device: install mesa-vulkan-drivers")
}

#[test]
fn data_and_control_transfers_are_counted_apart() {
    let b = wgpu();
    // Made with its four fault words, cleared on the device: nothing
    // crossed.
    assert_eq!(b.transfers(), Transfers::default());
    let start = b.transfers();
    let x: Vec<f32> = (0..1000).map(|i| (i % 17) as f32 - 8.0).collect();
    let mut buf = b.upload(&x).unwrap();
    let copy = b.upload(&x).unwrap();
    // Zeros are allocated and cleared on the device: no upload.
    let z = b.zeros::<u32>(3).unwrap();
    let moved = b.transfers().since(&start);
    assert_eq!(
        moved,
        Transfers {
            uploaded: 2 * 4000,
            uploads: 2,
            ..Transfers::default()
        }
    );
    // Kernels over device memory move nothing.
    let start = b.transfers();
    b.scale(2.0, &mut buf).unwrap();
    b.axpy(1.0, &copy, &mut buf).unwrap();
    assert_eq!(b.transfers().since(&start), Transfers::default());
    // A download reads the data and the 16 fault bytes it checks; an empty
    // one reads only the fault bytes.
    let start = b.transfers();
    assert_eq!(b.download(&z).unwrap(), vec![0; 3]);
    assert_eq!(
        b.download(&b.zeros::<f32>(0).unwrap()).unwrap(),
        Vec::<f32>::new()
    );
    let moved = b.transfers().since(&start);
    assert_eq!((moved.downloaded, moved.downloads), (12, 1));
    assert_eq!((moved.control_read, moved.control_reads), (32, 2));
    // A reduction reads back its per-cube partial results only: control,
    // far less than the data.
    let start = b.transfers();
    check_finite_buffer(&b, &buf).unwrap();
    assert_eq!(b.max_abs(&buf).unwrap(), 24.0);
    let moved = b.transfers().since(&start);
    assert_eq!((moved.downloaded, moved.downloads), (0, 0));
    assert_eq!(moved.control_reads, 2);
    assert!(
        moved.control_read > 0 && moved.control_read < 4000 / 4,
        "{moved:?}"
    );
    // A selection reads back histograms and counts, not the elements.
    let start = b.transfers();
    let top = b.topk_abs(&buf, 10).unwrap();
    let moved = b.transfers().since(&start);
    assert_eq!(moved.downloaded, 0);
    assert!(moved.control_reads > 0);
    let start = b.transfers();
    b.download(&top.indices).unwrap();
    b.download(&top.values).unwrap();
    let moved = b.transfers().since(&start);
    assert_eq!((moved.downloaded, moved.downloads), (80, 2));
    // A clone shares the counters: what it moves, the original reads (the
    // backend a caller hands to a trainer keeps counting), and the other
    // way round.
    let c = b.clone();
    assert_eq!(c.transfers(), b.transfers());
    let start = b.transfers();
    c.download(&top.indices).unwrap();
    let moved = b.transfers().since(&start);
    assert_eq!((moved.downloaded, moved.downloads), (40, 1));
    b.upload(&x).unwrap();
    assert_eq!(c.transfers(), b.transfers());
    // A backend made anew counts apart.
    assert_eq!(wgpu().transfers(), Transfers::default());
}

/// `zeros` clears on the device: memory that held other data (cubecl's
/// pool hands freed memory out again) reads back as zeros, for lengths
/// that are not whole words too.
#[test]
fn zeros_are_cleared_on_the_device() {
    let b = wgpu();
    for n in [1usize, 3, 4097, 1 << 20] {
        let junk: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
        drop(b.upload(&junk).unwrap());
        let before = b.transfers();
        let z = b.zeros::<f32>(n).unwrap();
        let h = b.zeros::<u8>(n).unwrap();
        assert_eq!(b.transfers().since(&before).to_device(), 0, "n = {n}");
        assert!(
            b.download(&z).unwrap().iter().all(|v| v.to_bits() == 0),
            "n = {n}"
        );
        assert!(b.download(&h).unwrap().iter().all(|&v| v == 0), "n = {n}");
    }
}

/// SparCML's bucket top-k (segments of 512) selects on chip: what a call
/// reads back grows with the segments by a few words each, not by a
/// histogram row (257 words) per segment and digit, which is what made it
/// 450 ms at 2^24 elements on an H100.
#[test]
fn short_segments_read_back_a_few_words_each() {
    let b = wgpu();
    let segments = 256;
    let n = segments * 512;
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 - 500.0).collect();
    let buf = b.upload(&x).unwrap();
    let offsets: Vec<usize> = (0..=segments).map(|s| s * 512).collect();
    let ks = vec![3; segments];
    let start = b.transfers();
    let top = b.topk_abs_segmented(&buf, &offsets, &ks).unwrap();
    let moved = b.transfers().since(&start);
    assert_eq!(b.len(&top.indices), 3 * segments);
    // One launch selects and emits every bucket (each bucket's output
    // offset is the sum of the ks before it): only the NaN count crosses,
    // one word whatever the number of buckets; a histogram row alone
    // would be 257 words a bucket.
    assert_eq!(
        (moved.control_read, moved.control_reads),
        (4, 1),
        "{moved:?}"
    );
}

/// What each primitive reads back per call, on inputs without NaN (a NaN
/// found costs one more readback of the input, to name it): the bounds the
/// crate documentation states ("What crosses to the host"), as exact
/// formulas in the tiles of [`TILE`] elements a call covers. A primitive
/// that read back more (a histogram row per segment, the whole input) fails
/// here, however small the input.
#[test]
fn control_readbacks_are_bounded_per_call() {
    use sparse_core::qsgd::QsgdParams;
    use sparse_core::{CodecOps, Digit, Extreme, IndexOps};
    const TILE: u64 = 4096;
    const ROW: u64 = 4 * 257; // a radix digit's histogram row, NaN count included
    let b = wgpu();
    let reads = |f: &dyn Fn()| {
        let before = b.transfers();
        f();
        let t = b.transfers().since(&before);
        assert_eq!((t.downloaded, t.downloads), (0, 0), "no data moved");
        (t.control_read, t.control_reads)
    };
    for n in [1000usize, 3 * 4096 + 5, 1 << 20] {
        let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 - 500.0).collect();
        let buf = b.upload(&x).unwrap();
        let tiles = (n as u64).div_ceil(TILE);
        let k = n / 100;
        let what = format!("n = {n}");
        // Reductions: five words per tile, one readback.
        assert_eq!(
            reads(&|| {
                b.max_abs(&buf).unwrap();
            }),
            (20 * tiles, 1),
            "{what}"
        );
        assert_eq!(
            reads(&|| {
                b.mean_abs(&buf).unwrap();
            }),
            (20 * tiles, 1),
            "{what}"
        );
        assert_eq!(
            reads(&|| {
                b.sum_squares(&buf).unwrap();
            }),
            (20 * tiles, 1),
            "{what}"
        );
        assert_eq!(
            reads(&|| {
                b.count_above(&buf, 3.0).unwrap();
            }),
            (20 * tiles, 1),
            "{what}"
        );
        // One digit's histogram row.
        let d = Digit {
            shift: 24,
            digit_bits: 8,
            prefix: 0,
        };
        assert_eq!(
            reads(&|| drop(b.digit_histogram(&buf, KeyOrder::Abs, d).unwrap())),
            (ROW, 1),
            "{what}"
        );
        // Compaction: three words per tile.
        assert_eq!(
            reads(&|| drop(b.compact_above(&buf, 400.0).unwrap())),
            (12 * tiles, 1),
            "{what}"
        );
        // Exact top-k: the k-th key is found and applied on the device;
        // the host reads back the eight state words (NaN and infinity
        // counts) once, whatever n and k.
        let sels: [&dyn Fn(); 5] = [
            &|| drop(b.topk_abs(&buf, k).unwrap()),
            &|| drop(b.topk_signed(&buf, k, Extreme::Largest).unwrap()),
            &|| drop(b.topk_signed(&buf, k, Extreme::Smallest).unwrap()),
            &|| drop(b.topk_abs(&buf, 0).unwrap()),
            &|| drop(b.topk_abs(&buf, n).unwrap()),
        ];
        for sel in sels {
            assert_eq!(reads(sel), (32, 1), "{what}, k = {k}");
        }
        // Every element at least the k-th largest, and DGC's sampled
        // threshold applied (its key found on the device from the
        // sample): the same state words, once.
        let sample = b
            .upload(&x.iter().step_by(97).copied().collect::<Vec<f32>>())
            .unwrap();
        let ties: [&dyn Fn(); 4] = [
            &|| drop(b.topk_ties(&buf, KeyOrder::Abs, k.max(1)).unwrap()),
            &|| drop(b.topk_ties(&buf, KeyOrder::Signed, n).unwrap()),
            &|| drop(b.compact_above_kth_of(&buf, &sample, 1, n).unwrap()),
            &|| {
                drop(
                    b.compact_above_kth_of(&buf, &sample, b.len(&sample), 0)
                        .unwrap(),
                )
            },
        ];
        for sel in ties {
            assert_eq!(reads(sel), (32, 1), "{what}, k = {k}");
        }
        // Error feedback fused into the top-k: the same, once.
        let g = b.upload(&x).unwrap();
        let fused = || {
            let mut v = b.zeros::<f32>(n).unwrap();
            let fb = sparse_core::Feedback::Plain { gain: 0.5 };
            drop(b.accumulate_topk(&mut v, &g, fb, k).unwrap());
        };
        assert_eq!(reads(&fused), (32, 1), "{what}, k = {k}");
        // Bucket top-k (segments of 512, and of at most 2,048): one NaN
        // word, whatever the number of buckets.
        let s = n / 512;
        if s > 0 {
            let offsets: Vec<usize> = (0..=s).map(|i| i * 512).collect();
            let ks = vec![5; s];
            let sub = b.upload(&x[..s * 512]).unwrap();
            assert_eq!(
                reads(&|| drop(b.topk_abs_segmented(&sub, &offsets, &ks).unwrap())),
                (4, 1),
                "{what}, {s} buckets"
            );
        }
        // Block top-k (SparDL's P blocks, longer than 2,048 past the first
        // n): the whole select on the device, the two global words (NaN
        // and fault counts) read back once, whatever P and the ks; one
        // block is the whole-buffer top-k (its eight state words).
        let long = |len: usize| len > 2048;
        for p in [1usize, 3, 7, 64] {
            let offsets: Vec<usize> = (0..=p).map(|j| j * n / p).collect();
            let lens: Vec<usize> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
            let want = if !lens.iter().copied().any(long) {
                (4, 1)
            } else if p == 1 {
                (32, 1)
            } else {
                (8, 1)
            };
            let patterns = [
                lens.iter().map(|&l| l.min(5)).collect::<Vec<_>>(),
                vec![0; p],
                lens.clone(),
                lens.iter().map(|&l| l / 3).collect(),
            ];
            for ks in patterns {
                assert_eq!(
                    reads(&|| drop(b.topk_abs_segmented(&buf, &offsets, &ks).unwrap())),
                    want,
                    "{what}, P = {p}, ks {:?}",
                    &ks[..ks.len().min(4)]
                );
            }
        }
        // Kernels over device memory only.
        let idx = b
            .upload(&(0..k as u32).map(|i| i * 7 % n as u32).collect::<Vec<_>>())
            .unwrap();
        let mut sorted: Vec<u32> = (0..k as u32)
            .map(|i| i * 97)
            .filter(|&i| (i as usize) < n)
            .collect();
        sorted.dedup();
        let sorted = b.upload(&sorted).unwrap();
        let vals = b.upload(&vec![1.0f32; k]).unwrap();
        let mut dense = b.upload(&x).unwrap();
        let none = |f: &dyn Fn()| assert_eq!(reads(f), (0, 0), "{what}");
        none(&|| drop(b.gather(&buf, &idx).unwrap()));
        // The sample's positions are drawn on the device: nothing written.
        let before = b.transfers();
        none(&|| drop(b.gather_sampled(&buf, 5, k.max(1)).unwrap()));
        let t = b.transfers().since(&before);
        assert_eq!(
            (t.uploads, t.control_writes),
            (0, 0),
            "{what}: gather_sampled wrote"
        );
        let pos = b.upload(&(0..k as u32).rev().collect::<Vec<_>>()).unwrap();
        none(&|| drop(b.gather_indices(&idx, &pos).unwrap()));
        none(&|| drop(b.axpy(0.5, &buf, &mut b.upload(&x).unwrap())));
        assert_eq!(
            reads(&|| {
                b.scatter_add(&mut b.zeros::<f32>(n).unwrap(), &idx, &vals)
                    .unwrap();
                b.mask(&mut b.zeros::<f32>(n).unwrap(), &idx).unwrap();
                b.scale(2.0, &mut b.zeros::<f32>(n).unwrap()).unwrap();
            }),
            (0, 0),
            "{what}"
        );
        // The bitmap codec: a range check word; per tile of words a count.
        let words = b.bitmap_encode(&sorted, 0, n).unwrap();
        assert_eq!(
            reads(&|| drop(b.bitmap_encode(&sorted, 0, n).unwrap())),
            (4, 1),
            "{what}"
        );
        let word_tiles = (n as u64).div_ceil(32).div_ceil(TILE);
        assert_eq!(
            reads(&|| drop(b.bitmap_decode(&words, 0, n).unwrap())),
            (4 * word_tiles, 1),
            "{what}"
        );
        // QSGD: one word for the finite check; decoding reads nothing.
        let p = QsgdParams::new(4, 512, 7).unwrap();
        let (scales, codes) = b.qsgd_quantize(&buf, &p, 0).unwrap();
        assert_eq!(
            reads(&|| drop(b.qsgd_quantize(&buf, &p, 0).unwrap())),
            (4, 1),
            "{what}"
        );
        none(&|| drop(b.qsgd_dequantize(&scales, &codes, n, &p).unwrap()));
        // A download: the data, and the four fault words it checks.
        let before = b.transfers();
        b.download(&dense).unwrap();
        let t = b.transfers().since(&before);
        assert_eq!(
            (t.downloaded, t.control_read, t.control_reads),
            (4 * n as u64, 16, 1)
        );
        b.scale(1.0, &mut dense).unwrap();
    }
}
