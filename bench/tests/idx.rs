//! The IDX reader (`bench::train::idx`) against hostile files, as the
//! decoders are fuzzed (`sparse-core/tests/decode_alloc.rs`): valid image
//! and label files, raw and gzip, then truncated at every length, padded,
//! every header byte overwritten, lying dimensions, random mutations and
//! noise. Each is an error or a valid result, never a panic; the error
//! names the file and the field; and the peak of live heap bytes while one
//! file is parsed stays within what the file's own length can hold
//! (`GZIP_MAX_RATIO` per byte for gzip, one per byte raw, plus slack), with
//! a counting allocator as the oracle. `IDX_FUZZ_ROUNDS` sets the rounds
//! of random mutation (default 300). The real Fashion-MNIST files are read
//! when Debian's package is installed (`scripts/test.sh` installs it).

use bench::train::idx::{self, GZIP_MAX_RATIO};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng as Rng;
use sparse_core::Error;
use sparse_core::testing::peak::{PeakAlloc, peak_during};
use std::io::Write;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// Live heap bytes the parser may hold beyond its output's bound: the
/// inflater's window and tables, the error's text.
const SLACK: usize = 256 << 10;

/// An IDX file of unsigned bytes with these dimensions and elements.
fn idx_file(shape: &[u32], data: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 0x08, shape.len() as u8];
    for &d in shape {
        b.extend_from_slice(&d.to_be_bytes());
    }
    b.extend_from_slice(data);
    b
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Parses `bytes` as images (or labels) and checks the promises: no
/// panic, the allocation bound, and an error naming the file.
fn check(bytes: &[u8], images: bool) -> bool {
    let name = "fuzz.idx";
    let (out, peak) = peak_during(|| {
        if images {
            idx::parse_images(bytes, name).map(|im| im.pixels.len())
        } else {
            idx::parse_labels(bytes, name, 10).map(|l| l.len())
        }
    });
    let per_byte = if bytes.starts_with(&[0x1f, 0x8b]) {
        GZIP_MAX_RATIO as usize
    } else {
        1
    };
    assert!(
        peak <= per_byte * bytes.len() + SLACK,
        "{} input bytes: {peak} live bytes at the peak",
        bytes.len()
    );
    match out {
        Ok(_) => true,
        Err(Error::Corrupt { what, detail }) => {
            assert_eq!(what, "idx file");
            assert!(detail.starts_with("fuzz.idx: "), "{detail}");
            false
        }
        Err(Error::OutOfMemory { .. }) => false,
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn valid_files_read_back_and_hostile_ones_are_errors_within_their_length() {
    let mut rng = Rng::seed_from_u64(31);
    let pixels: Vec<u8> = (0..7 * 28 * 28).map(|_| rng.random()).collect();
    let labels: Vec<u8> = (0..7).map(|_| rng.random_range(0..10)).collect();
    let im = idx_file(&[7, 28, 28], &pixels);
    let lb = idx_file(&[7], &labels);
    // Valid files, raw and gzip, read back exactly.
    for bytes in [im.clone(), gzip(&im)] {
        let got = idx::parse_images(&bytes, "a").unwrap();
        assert_eq!((got.count, got.rows, got.cols), (7, 28, 28));
        assert_eq!(got.pixels, pixels);
    }
    for bytes in [lb.clone(), gzip(&lb)] {
        assert_eq!(idx::parse_labels(&bytes, "a", 10).unwrap(), labels);
    }
    // Two gzip members read as one stream: the second is padding.
    let mut twice = gzip(&lb);
    twice.extend_from_slice(&gzip(&[0]));
    assert!(!check(&twice, false));
    // Truncated at every length, padded by a byte, raw and gzip.
    for (file, images) in [(&im, true), (&lb, false)] {
        for cut in 0..file.len() {
            assert!(!check(&file[..cut], images), "cut at {cut}");
        }
        let gz = gzip(file);
        for cut in (0..gz.len()).step_by(7) {
            assert!(!check(&gz[..cut], images), "gzip cut at {cut}");
        }
        let mut padded = file.clone();
        padded.push(0);
        assert!(!check(&padded, images));
        assert!(!check(&gzip(&padded), images));
        // Every header byte overwritten with each of a few values.
        for at in 0..4 + 4 * if images { 3 } else { 1 } {
            for v in [0u8, 1, 0x09, 0x0d, 0x7f, 0xff] {
                let mut m = file.clone();
                if m[at] == v {
                    continue;
                }
                m[at] = v;
                check(&m, images);
                check(&gzip(&m), images);
            }
        }
    }
    // Lying dimensions: four billion images in a few bytes, raw and gzip.
    let liar = idx_file(&[u32::MAX, 28, 28], &pixels[..100]);
    for bytes in [liar.clone(), gzip(&liar)] {
        let e = idx::parse_images(&bytes, "liar.idx")
            .unwrap_err()
            .to_string();
        assert!(e.contains("liar.idx: dimensions"), "{e}");
    }
    // A zero dimension, the wrong element type, a wrong rank.
    for (bytes, field) in [
        (idx_file(&[0, 28, 28], &[]), "dimensions"),
        (idx_file(&[7], &labels), "dimensions"),
        (
            {
                let mut b = lb.clone();
                b[2] = 0x0d;
                b
            },
            "element type",
        ),
    ] {
        let e = idx::parse_images(&bytes, "f").unwrap_err().to_string();
        assert!(e.contains(&format!("f: {field}")), "{e}");
    }
    // A label out of range names the item.
    let e = idx::parse_labels(&idx_file(&[3], &[1, 10, 2]), "l", 10)
        .unwrap_err()
        .to_string();
    assert!(e.contains("l: labels: label 10 of item 1"), "{e}");
    // Random mutations and noise.
    let rounds: usize = std::env::var("IDX_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let gz_im = gzip(&im);
    for round in 0..rounds {
        let base = match round % 3 {
            0 => im.clone(),
            1 => lb.clone(),
            _ => gz_im.clone(),
        };
        let mut m = base;
        for _ in 0..rng.random_range(1..8) {
            let at = rng.random_range(0..m.len());
            m[at] = rng.random();
        }
        check(&m, round % 3 != 1);
        let noise: Vec<u8> = (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
        check(&noise, round % 2 == 0);
    }
}

/// Image and label files whose counts differ are an error naming both.
#[test]
fn counts_that_disagree_are_an_error() {
    let dir = std::env::temp_dir().join(format!("idx-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (im, lb) = (dir.join("im"), dir.join("lb"));
    std::fs::write(&im, gzip(&idx_file(&[3, 2, 2], &[0; 12]))).unwrap();
    std::fs::write(&lb, idx_file(&[4], &[0, 1, 2, 3])).unwrap();
    let e = idx::load_pair(&im, &lb, 10).unwrap_err().to_string();
    assert!(
        e.contains("count: 3 images but") && e.contains("4 labels"),
        "{e}"
    );
    std::fs::write(&lb, idx_file(&[3], &[0, 1, 2])).unwrap();
    assert_eq!(idx::load_pair(&im, &lb, 10).unwrap().1, vec![0, 1, 2]);
    // A missing directory says how to install the package.
    let e = idx::fashion_mnist(&dir.join("absent"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("apt-get install dataset-fashion-mnist"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Debian's Fashion-MNIST, where installed: 60,000 and 10,000 images of
/// 28 x 28, 6,000 and 1,000 per class.
#[test]
fn debian_fashion_mnist_reads_whole() {
    let dir = std::path::Path::new(idx::FASHION_MNIST_DIR);
    if !dir.is_dir() {
        eprintln!(
            "{} absent: apt-get install dataset-fashion-mnist",
            dir.display()
        );
        return;
    }
    let f = idx::fashion_mnist(dir).unwrap();
    assert_eq!((f.train.count, f.test.count), (60_000, 10_000));
    for (labels, per) in [(&f.train_labels, 6_000), (&f.test_labels, 1_000)] {
        let mut count = [0usize; 10];
        labels.iter().for_each(|&y| count[usize::from(y)] += 1);
        assert_eq!(count, [per; 10]);
    }
    assert_eq!(f.train.pixels.len(), 60_000 * 784);
}
