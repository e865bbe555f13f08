//! The data sets of `sparse-bench train` ([`Data`]): the UCI handwritten
//! digits (`bench/data/digits.csv.gz`, attribution in
//! `bench/data/README.md`), embedded in the program: 1,797 images of 8x8
//! pixels in `0..=16` and their labels, split by a fixed seed into 1,437
//! training and 360 test images; and Fashion-MNIST (60,000 training and
//! 10,000 test images of 28x28 pixels) read from Debian's
//! `dataset-fashion-mnist` by [`super::idx`].

use sparse_core::{Error, Result};
use std::io::Read;

/// Pixels per image of the digits.
pub const FEATURES: usize = 64;
/// The digits' image shape (rows, columns).
pub const DIGITS_SHAPE: [usize; 2] = [8, 8];
/// Classes.
pub const CLASSES: usize = 10;
/// Images in the test split (the rest train).
pub const TEST: usize = 360;
/// The seed of the split.
pub const SPLIT_SEED: u64 = 20_261_123;

const GZ: &[u8] = include_bytes!("../../data/digits.csv.gz");

/// Images (pixels scaled to `[0, 1]`, row-major) and their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Set {
    /// `len * features()` pixels.
    pub x: Vec<f32>,
    /// `len` labels in `0..CLASSES`.
    pub y: Vec<u8>,
    /// Rows and columns of one image.
    pub shape: [usize; 2],
}

impl Set {
    /// Pixels per image.
    pub fn features(&self) -> usize {
        self.shape[0] * self.shape[1]
    }
    /// Images in the set.
    pub fn len(&self) -> usize {
        self.y.len()
    }
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
    /// The images at `rows`, in that order.
    pub fn rows(&self, rows: &[usize]) -> Set {
        let f = self.features();
        let mut x = Vec::with_capacity(rows.len() * f);
        for &r in rows {
            x.extend_from_slice(&self.x[r * f..(r + 1) * f]);
        }
        Set {
            x,
            y: rows.iter().map(|&r| self.y[r]).collect(),
            shape: self.shape,
        }
    }
    /// The images `range`, in order.
    pub fn range(&self, range: std::ops::Range<usize>) -> Set {
        let f = self.features();
        Set {
            x: self.x[range.start * f..range.end * f].to_vec(),
            y: self.y[range].to_vec(),
            shape: self.shape,
        }
    }
}

/// Parses the CSV text: 64 integer pixels in `0..=16` and a label in `0..=9`
/// per line.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the line for anything else.
pub fn parse(text: &str) -> Result<Set> {
    let mut set = Set {
        x: Vec::new(),
        y: Vec::new(),
        shape: DIGITS_SHAPE,
    };
    for (no, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: String| Error::invalid("digits.csv", format!("line {}: {why}", no + 1));
        let cells: Vec<&str> = line.trim().split(',').collect();
        if cells.len() != FEATURES + 1 {
            return Err(bad(format!(
                "{} fields, expected {}",
                cells.len(),
                FEATURES + 1
            )));
        }
        for c in &cells[..FEATURES] {
            let v: u8 = c.parse().map_err(|_| bad(format!("pixel {c:?}")))?;
            if v > 16 {
                return Err(bad(format!("pixel {v} above 16")));
            }
            set.x.push(f32::from(v) / 16.0);
        }
        let label: u8 = cells[FEATURES]
            .parse()
            .map_err(|_| bad(format!("label {:?}", cells[FEATURES])))?;
        if usize::from(label) >= CLASSES {
            return Err(bad(format!("label {label}")));
        }
        set.y.push(label);
    }
    Ok(set)
}

/// The whole data set, decompressed from the embedded file.
///
/// # Errors
/// [`Error::InvalidParameter`] if the embedded file is damaged.
pub fn load() -> Result<Set> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(GZ)
        .read_to_string(&mut text)
        .map_err(|e| Error::invalid("digits.csv.gz", e.to_string()))?;
    parse(&text)
}

/// The fixed split: a permutation of all images by [`SPLIT_SEED`], the
/// first [`TEST`] for testing and the rest for training.
///
/// # Errors
/// As [`load`].
pub fn split() -> Result<(Set, Set)> {
    let all = load()?;
    let order = permutation(all.len(), SPLIT_SEED);
    Ok((all.rows(&order[TEST..]), all.rows(&order[..TEST])))
}

/// Where `sparse-bench train` takes its images from (`--data`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Data {
    /// The UCI digits, embedded (`digits`, the default).
    #[default]
    Digits,
    /// Fashion-MNIST from a directory (`fashion-mnist`, Debian's
    /// [`super::idx::FASHION_MNIST_DIR`], or `fashion-mnist=DIR`).
    FashionMnist(std::path::PathBuf),
}

impl std::str::FromStr for Data {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.split_once('=') {
            None if s == "digits" => Ok(Data::Digits),
            None if s == "fashion-mnist" => {
                Ok(Data::FashionMnist(super::idx::FASHION_MNIST_DIR.into()))
            }
            Some(("fashion-mnist", dir)) if !dir.is_empty() => Ok(Data::FashionMnist(dir.into())),
            _ => Err(format!(
                "{s:?}: expected digits, fashion-mnist or fashion-mnist=DIR"
            )),
        }
    }
}

impl std::fmt::Display for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Data::Digits => write!(f, "digits"),
            Data::FashionMnist(dir) => write!(f, "fashion-mnist={}", dir.display()),
        }
    }
}

impl Data {
    /// The training and test sets: the digits' fixed [`split`], or
    /// Fashion-MNIST's own split (pixels scaled by 1/255).
    ///
    /// # Errors
    /// As [`split`] and [`super::idx::fashion_mnist`] (which says how to
    /// install the package where the files are missing).
    pub fn load(&self) -> Result<(Set, Set)> {
        match self {
            Data::Digits => split(),
            Data::FashionMnist(dir) => {
                let f = super::idx::fashion_mnist(dir)?;
                let set = |im: &super::idx::Images, y: Vec<u8>| Set {
                    x: im.pixels.iter().map(|&p| f32::from(p) / 255.0).collect(),
                    y,
                    shape: [im.rows, im.cols],
                };
                Ok((set(&f.train, f.train_labels), set(&f.test, f.test_labels)))
            }
        }
    }
    /// The name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Data::Digits => "UCI digits",
            Data::FashionMnist(_) => "Fashion-MNIST",
        }
    }
}

/// A seeded permutation of `0..n` (Fisher-Yates).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut crate::train::Rng::seed_from_u64(seed));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_file_is_the_digits_set() {
        let all = load().unwrap();
        assert_eq!(all.len(), 1797);
        assert_eq!(all.x.len(), 1797 * FEATURES);
        let mut count = [0usize; CLASSES];
        all.y.iter().for_each(|&y| count[usize::from(y)] += 1);
        // The UCI test set: between 174 and 183 images per class.
        assert!(count.iter().all(|&c| (174..=183).contains(&c)), "{count:?}");
        let (train, test) = split().unwrap();
        assert_eq!((train.len(), test.len()), (1437, 360));
        assert_eq!(split().unwrap(), (train, test), "the split is fixed");
    }

    #[test]
    fn bad_lines_are_errors() {
        assert!(parse("1,2,3\n").is_err());
        let row = |p: &str, l: &str| format!("{}{l}\n", format!("{p},").repeat(FEATURES));
        assert!(parse(&row("0", "3")).is_ok());
        assert!(parse(&row("17", "3")).is_err());
        assert!(parse(&row("0", "10")).is_err());
        assert!(parse(&row("x", "1")).is_err());
    }
}
