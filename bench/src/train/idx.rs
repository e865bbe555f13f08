//! IDX files (the format of MNIST and Fashion-MNIST: a magic number with
//! the element type and the number of dimensions, the dimensions as
//! big-endian `u32`, then the elements), gzip-compressed or raw, read as
//! hostile input.
//!
//! Every field is checked: the two zero bytes of the magic number, the
//! element type (unsigned bytes), the number of dimensions (3 for images,
//! 1 for labels), dimensions that are not zero and whose product fits,
//! the exact length (a truncated or padded file is an error), labels below
//! the number of classes, and the counts of an image file and its label
//! file agreeing. An error names the file and the field. Nothing is
//! allocated beyond what the file's own length can hold: a raw file's
//! elements are its bytes; a gzip stream expands at most
//! [`GZIP_MAX_RATIO`] times (deflate's limit), so a header that declares
//! more than that is refused before anything is read, and the stream is
//! read no further than the header declares (plus one byte, to find
//! padding; concatenated gzip members read as one stream, so a second
//! member is padding too, and anything else after the first is an error
//! of the stream).

use sparse_core::{Error, Result};
use std::io::Read;
use std::path::Path;

/// The most a deflate stream expands: 258 bytes per 2 bits of a
/// compressed length-distance pair, about 1032 times its length.
pub const GZIP_MAX_RATIO: u64 = 1032;

/// Largest file read, compressed or not (the Fashion-MNIST training images
/// are 26 MB compressed, 47 MB raw).
pub const MAX_FILE: u64 = 1 << 30;

/// The IDX element type of unsigned bytes.
const UBYTE: u8 = 0x08;

/// A stack of images: `count` images of `rows x cols` bytes, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// Images in the file.
    pub count: usize,
    /// Rows per image.
    pub rows: usize,
    /// Columns per image.
    pub cols: usize,
    /// `count * rows * cols` pixels.
    pub pixels: Vec<u8>,
}

/// The error of field `field` of file `name`.
fn bad(name: &str, field: &str, detail: impl std::fmt::Display) -> Error {
    Error::corrupt("idx file", format!("{name}: {field}: {detail}"))
}

/// Whether `bytes` start with gzip's magic number.
fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// The IDX content of `bytes` (the file `name`, gzip or raw) whose header
/// has `dims` dimensions of unsigned bytes: the dimensions and the
/// elements, checked as the module says.
///
/// # Errors
/// [`Error::Corrupt`] naming `name` and the field; [`Error::OutOfMemory`]
/// when the elements cannot be allocated.
pub fn parse(bytes: &[u8], name: &str, dims: usize) -> Result<(Vec<usize>, Vec<u8>)> {
    if is_gzip(bytes) {
        let most = (bytes.len() as u64).saturating_mul(GZIP_MAX_RATIO);
        read_idx(flate2::read::MultiGzDecoder::new(bytes), name, dims, most)
    } else {
        read_idx(bytes, name, dims, bytes.len() as u64)
    }
}

/// Reads an IDX stream that can hold at most `most` bytes.
fn read_idx(mut r: impl Read, name: &str, dims: usize, most: u64) -> Result<(Vec<usize>, Vec<u8>)> {
    let mut read_exact = |buf: &mut [u8], field: &str| {
        r.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => bad(name, field, "the file ends before it"),
            _ => bad(name, field, e),
        })
    };
    let mut magic = [0u8; 4];
    read_exact(&mut magic, "magic number")?;
    if magic[..2] != [0, 0] {
        return Err(bad(
            name,
            "magic number",
            format!("{magic:02x?} does not start with two zero bytes"),
        ));
    }
    if magic[2] != UBYTE {
        return Err(bad(
            name,
            "element type",
            format!("0x{:02x}, not 0x08 (unsigned bytes)", magic[2]),
        ));
    }
    if usize::from(magic[3]) != dims {
        return Err(bad(
            name,
            "dimensions",
            format!("{} where {dims} are expected", magic[3]),
        ));
    }
    let mut shape = Vec::with_capacity(dims);
    let mut total: u64 = 1;
    for d in 0..dims {
        let mut w = [0u8; 4];
        read_exact(&mut w, "dimensions")?;
        let n = u32::from_be_bytes(w);
        if n == 0 {
            return Err(bad(name, "dimensions", format!("dimension {d} is 0")));
        }
        total = total.saturating_mul(u64::from(n));
        shape.push(n as usize);
    }
    let header = 4 + 4 * dims as u64;
    if total.saturating_add(header) > most.min(MAX_FILE) {
        return Err(bad(
            name,
            "dimensions",
            format!(
                "{shape:?} declare {total} bytes of elements, more than this file can hold ({} at most)",
                most.min(MAX_FILE).saturating_sub(header)
            ),
        ));
    }
    let total = total as usize;
    let mut data = Vec::new();
    data.try_reserve_exact(total)
        .map_err(|_| Error::OutOfMemory {
            what: "idx elements",
            bytes: total as u64,
        })?;
    data.resize(total, 0);
    read_exact(&mut data, "elements")?;
    let mut extra = [0u8; 1];
    match r.read(&mut extra) {
        Ok(0) => Ok((shape, data)),
        Ok(_) => Err(bad(name, "length", "bytes after the declared elements")),
        Err(e) => Err(bad(name, "length", e)),
    }
}

/// An image file (`dims = 3`: count, rows, columns).
///
/// # Errors
/// As [`parse`].
pub fn parse_images(bytes: &[u8], name: &str) -> Result<Images> {
    let (shape, pixels) = parse(bytes, name, 3)?;
    Ok(Images {
        count: shape[0],
        rows: shape[1],
        cols: shape[2],
        pixels,
    })
}

/// A label file (`dims = 1`) whose labels lie below `classes`.
///
/// # Errors
/// As [`parse`]; [`Error::Corrupt`] naming the first label out of range.
pub fn parse_labels(bytes: &[u8], name: &str, classes: u8) -> Result<Vec<u8>> {
    let (_, labels) = parse(bytes, name, 1)?;
    if let Some(i) = labels.iter().position(|&y| y >= classes) {
        return Err(bad(
            name,
            "labels",
            format!("label {} of item {i} is not below {classes}", labels[i]),
        ));
    }
    Ok(labels)
}

/// The bytes of the file at `path`, at most [`MAX_FILE`] of them.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the file when it cannot be read or
/// is larger.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    let name = path.display().to_string();
    let file =
        std::fs::File::open(path).map_err(|e| Error::invalid("data", format!("{name}: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::invalid("data", format!("{name}: {e}")))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Error::invalid(
            "data",
            format!("{name}: larger than {MAX_FILE} bytes"),
        ));
    }
    Ok(bytes)
}

/// An image file and its label file, whose counts must agree.
///
/// # Errors
/// As [`read_file`], [`parse_images`] and [`parse_labels`];
/// [`Error::Corrupt`] naming both files when the counts differ.
pub fn load_pair(images: &Path, labels: &Path, classes: u8) -> Result<(Images, Vec<u8>)> {
    let (ni, nl) = (images.display().to_string(), labels.display().to_string());
    let im = parse_images(&read_file(images)?, &ni)?;
    let lb = parse_labels(&read_file(labels)?, &nl, classes)?;
    if im.count != lb.len() {
        return Err(bad(
            &ni,
            "count",
            format!("{} images but {nl} holds {} labels", im.count, lb.len()),
        ));
    }
    Ok((im, lb))
}

/// Where Debian's `dataset-fashion-mnist` package puts the files.
pub const FASHION_MNIST_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Fashion-MNIST's classes.
pub const FASHION_CLASSES: u8 = 10;

/// Fashion-MNIST (Zalando, MIT licence): the training and test images
/// (28 x 28 bytes) with their labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FashionMnist {
    /// 60,000 training images.
    pub train: Images,
    /// Their labels, in `0..10`.
    pub train_labels: Vec<u8>,
    /// 10,000 test images.
    pub test: Images,
    /// Their labels.
    pub test_labels: Vec<u8>,
}

/// Fashion-MNIST from `dir` (the four files `train-images-idx3-ubyte`,
/// `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte` and
/// `t10k-labels-idx1-ubyte`, each gzip-compressed with `.gz` or raw).
///
/// # Errors
/// [`Error::InvalidParameter`] naming the missing file and saying how to
/// install the package; as [`load_pair`]; [`Error::Corrupt`] for images
/// other than 28 x 28.
pub fn fashion_mnist(dir: &Path) -> Result<FashionMnist> {
    let find = |stem: &str| {
        let gz = dir.join(format!("{stem}.gz"));
        let raw = dir.join(stem);
        if gz.is_file() {
            Ok(gz)
        } else if raw.is_file() {
            Ok(raw)
        } else {
            Err(Error::invalid(
                "data",
                format!(
                    "Fashion-MNIST: neither {} nor {} exists; install Debian's package \
                     (`sudo apt-get install dataset-fashion-mnist`, which puts the files in \
                     {FASHION_MNIST_DIR}) or pass the directory that holds them",
                    gz.display(),
                    raw.display()
                ),
            ))
        }
    };
    let pair = |images: &str, labels: &str| -> Result<(Images, Vec<u8>)> {
        let (im, lb) = load_pair(&find(images)?, &find(labels)?, FASHION_CLASSES)?;
        if (im.rows, im.cols) != (28, 28) {
            return Err(bad(
                images,
                "dimensions",
                format!("images of {} x {}, not 28 x 28", im.rows, im.cols),
            ));
        }
        Ok((im, lb))
    };
    let (train, train_labels) = pair("train-images-idx3-ubyte", "train-labels-idx1-ubyte")?;
    let (test, test_labels) = pair("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")?;
    Ok(FashionMnist {
        train,
        train_labels,
        test,
        test_labels,
    })
}
