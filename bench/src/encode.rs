//! `sparse-bench encode`: bytes and throughput of every encoding on one
//! synthetic gradient.
//!
//! Throughput is measured against the sparse input, `nnz * (4 + 4)` bytes
//! (one `u32` index and one `f32` value per entry), for encode and decode
//! alike, so rows compare directly. The hash bitmap encodes the gradient as
//! Zen's servers do: split by `h0` into one part per rank, each encoded over
//! its partition's index set; its row sums bytes and times over the parts.

use crate::{Progress, gbps, time_median};
use sparse_core::encoding::{
    Bf16, Bitmap, Block, Coo, Encoding, F16, HashBitmap, PartitionIndex, Qsgd, Raw, SameSignMean,
};
use sparse_core::generate::GradientSpec;
use sparse_core::{H0, Result, SparseVec};
use std::sync::Arc;
use std::time::Duration;

/// Parameters of the encode benchmark (`sparse-bench encode`'s flags).
#[derive(Debug, Clone, clap::Args)]
pub struct EncodeArgs {
    /// Dimension of the gradient.
    #[arg(long, default_value_t = 1 << 20)]
    pub n: usize,
    /// Fraction of non-zero coordinates, in (0, 1].
    #[arg(long, default_value_t = 0.001)]
    pub density: f64,
    /// Ranks: the hash bitmap splits the gradient into this many partitions.
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Seed of the synthetic gradient and the codecs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Minimum measuring time per operation, in milliseconds.
    #[arg(long = "min-ms", value_name = "MS", default_value = "100", value_parser = crate::parse_millis)]
    pub min_time: Duration,
}

/// One row of the encode table.
#[derive(Debug, Clone)]
pub struct EncodeRow {
    /// Encoding name.
    pub encoding: String,
    /// Encoded bytes (summed over parts).
    pub bytes: usize,
    /// Bytes spent on locating entries.
    pub index_bytes: usize,
    /// Parts the gradient was split into for this row.
    pub parts: usize,
    /// Encode throughput, GB/s of sparse input.
    pub encode_gbps: f64,
    /// Decode throughput, GB/s of sparse input.
    pub decode_gbps: f64,
    /// Whether the encoding is lossless.
    pub lossless: bool,
    /// Largest absolute error of a decoded value against the input.
    pub max_abs_err: f64,
}

struct Case {
    name: String,
    lossless: bool,
    parts: Vec<Part>,
}

type Part = (Box<dyn Encoding<f32>>, SparseVec<f32>);

fn single(enc: impl Encoding<f32> + 'static, v: &SparseVec<f32>) -> Case {
    Case {
        name: enc.name(),
        lossless: enc.lossless(),
        parts: vec![(Box::new(enc), v.clone())],
    }
}

fn cases(v: &SparseVec<f32>, ranks: usize, seed: u64) -> Result<Vec<Case>> {
    let q = |bits| Qsgd::new(bits, seed).expect("valid bits");
    let mut out = vec![
        single(Coo(Raw), v),
        single(Coo(F16), v),
        single(Coo(Bf16), v),
        single(Coo(q(8)), v),
        single(Coo(q(4)), v),
        single(Coo(q(2)), v),
        single(Block::default(), v),
        single(Block::new(256, q(4))?, v),
        single(Bitmap::new(Raw), v),
        single(Bitmap::new(q(4)), v),
    ];
    // RedSync's same-sign mean: the positive and the negative entries are
    // sent as two sets, one mean each.
    type Entries = Vec<(u32, f32)>;
    let (pos, neg): (Entries, Entries) = v.iter().partition(|&(_, x)| x > 0.0);
    let half = |e: Entries| -> Result<SparseVec<f32>> {
        SparseVec::new(
            v.dim(),
            e.iter().map(|p| p.0).collect(),
            e.iter().map(|p| p.1).collect(),
        )
    };
    out.push(Case {
        name: "coo+ssmean".into(),
        lossless: false,
        parts: vec![
            (Box::new(Coo(SameSignMean)), half(pos)?),
            (Box::new(Coo(SameSignMean)), half(neg)?),
        ],
    });
    let index = Arc::new(PartitionIndex::new(H0::new(seed, ranks as u32)?, v.dim())?);
    let split = index.split(v)?;
    for codec in [None, Some(q(4))] {
        let mut parts: Vec<Part> = Vec::new();
        for (p, part) in split.iter().enumerate() {
            let enc: Box<dyn Encoding<f32>> = match codec {
                None => Box::new(HashBitmap::new(index.clone(), p as u32, Raw)?),
                Some(c) => Box::new(HashBitmap::new(index.clone(), p as u32, c)?),
            };
            parts.push((enc, part.clone()));
        }
        let name = parts[0].0.name();
        out.push(Case {
            name,
            lossless: codec.is_none(),
            parts,
        });
    }
    Ok(out)
}

/// Runs the benchmark: one row per encoding.
///
/// # Errors
/// Invalid parameters, or an encoding that fails (a bug).
pub fn run(a: &EncodeArgs) -> Result<(SparseVec<f32>, Vec<EncodeRow>)> {
    let v = GradientSpec::new(a.n, a.density, a.seed)
        .generate::<f32>(1)?
        .remove(0);
    let cases = cases(&v, a.ranks, a.seed)?;
    let input_bytes = v.nnz() * 8;
    let mut bar = Progress::new(cases.len() as u64, "encodings");
    let mut rows = Vec::new();
    for case in cases {
        let mut bytes = 0;
        let mut index_bytes = 0;
        let mut encoded = Vec::new();
        for (enc, part) in &case.parts {
            let b = enc.encode(part)?;
            assert_eq!(
                b.len(),
                enc.encoded_len(part)?,
                "{}: encoded_len",
                case.name
            );
            bytes += b.len();
            index_bytes += enc.index_bytes(part)?;
            encoded.push(b);
        }
        let mut max_abs_err = 0.0f64;
        for ((enc, part), b) in case.parts.iter().zip(&encoded) {
            let back: SparseVec<f32> = enc.decode(b)?;
            let dense = back.to_dense();
            for (i, x) in part.iter() {
                max_abs_err = max_abs_err.max((dense[i as usize] - x).abs() as f64);
            }
            if case.lossless {
                assert_eq!(&back, part, "{}: lossless round trip", case.name);
            }
        }
        let mut buf = Vec::new();
        let t_enc = time_median(3, a.min_time, || {
            for (enc, part) in &case.parts {
                buf.clear();
                enc.encode_into(part, &mut buf)
                    .expect("encoded once already");
            }
            buf.len()
        });
        let t_dec = time_median(3, a.min_time, || {
            case.parts
                .iter()
                .zip(&encoded)
                .map(|((enc, _), b)| enc.decode(b).expect("decoded once already").nnz())
                .sum::<usize>()
        });
        rows.push(EncodeRow {
            encoding: case.name,
            bytes,
            index_bytes,
            parts: case.parts.len(),
            encode_gbps: gbps(input_bytes, t_enc),
            decode_gbps: gbps(input_bytes, t_dec),
            lossless: case.lossless,
            max_abs_err,
        });
        bar.inc();
    }
    bar.finish();
    Ok((v, rows))
}
