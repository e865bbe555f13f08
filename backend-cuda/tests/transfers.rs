//! The transfer counters (`CubeBackend::transfers`): every byte between
//! host and device, data (what `BufferOps` was asked to move) apart from
//! control (what the primitives move themselves), counted as it crosses.

#![cfg(feature = "wgpu")]

use backend_cuda::{Transfers, WgpuBackend};
use sparse_core::backend::check_finite_buffer;
use sparse_core::{BufferOps, DenseOps, ReduceOps, SelectOps};

fn wgpu() -> WgpuBackend {
    WgpuBackend::new_default().expect("no wgpu device: install mesa-vulkan-drivers")
}

#[test]
fn data_and_control_transfers_are_counted_apart() {
    let b = wgpu();
    // Made with its four zeroed fault words, written from the host.
    assert_eq!(
        b.transfers(),
        Transfers {
            control_written: 16,
            control_writes: 1,
            ..Transfers::default()
        }
    );
    let start = b.transfers();
    let x: Vec<f32> = (0..1000).map(|i| (i % 17) as f32 - 8.0).collect();
    let mut buf = b.upload(&x).unwrap();
    let copy = b.upload(&x).unwrap();
    let z = b.zeros::<u32>(3).unwrap();
    let moved = b.transfers().since(&start);
    assert_eq!((moved.uploaded, moved.uploads), (2 * 4000 + 12, 3));
    assert_eq!(moved.to_host(), 0);
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
    // Each clone counts its own.
    let c = b.clone();
    assert_eq!(c.transfers().to_host(), 0);
    assert!(b.transfers().to_host() > 0);
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
    // Keys (2 words), per-tile counts (3 words) and their NaN flag, per
    // segment; a histogram row alone would be 257.
    assert!(moved.control_read <= 8 * 4 * segments as u64, "{moved:?}");
}
