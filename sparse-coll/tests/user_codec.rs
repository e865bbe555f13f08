//! Issue 28.3: a user's own value codec travels through every collective
//! that carries values, by name (`topk_a:values=u8`), with the
//! quantization error kept exactly in `dropped`; a codec's split is
//! checked, and the bytes receivers decode are the ones the split made.

mod common;

use sparse_coll::wire::WireValues;
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::encoding::{Qsgd, Reader, Split, USER_TAGS, ValueCodec, split_by_round_trip};
use sparse_core::testing::generate::{GradientSpec, ValueDist};
use sparse_core::{Error, Result, SparseVec};

/// A user's 8-bit uniform quantizer: a section of `exp: i8` (the scale
/// `2^exp`, the least power of two at or above every magnitude), then one
/// `i8` code `q` per value, decoded as `q 2^(exp - 7)`. The power-of-two
/// scale puts every decoded value on a grid of 8 significant bits, so that
/// sums of them over ranks are exact, as the suite checks on integer
/// inputs.
#[derive(Debug, Clone, Copy)]
struct U8;

impl ValueCodec<f32> for U8 {
    const TAG: u8 = 200;
    fn name(&self) -> String {
        "u8".into()
    }
    fn lossless(&self) -> bool {
        false
    }
    fn encoded_len(&self, n: usize) -> usize {
        1 + n
    }
    fn encode(&self, values: &[f32], out: &mut Vec<u8>) -> Result<()> {
        let max = values.iter().fold(0f32, |m, x| m.max(x.abs()));
        let exp = if max > 0.0 {
            max.log2().ceil() as i32
        } else {
            0
        };
        let exp = exp.clamp(-100, 100);
        out.push(exp as i8 as u8);
        let step = 2f32.powi(exp - 7);
        out.extend(
            values
                .iter()
                .map(|x| (x / step).round().clamp(-127.0, 127.0) as i8 as u8),
        );
        Ok(())
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<f32>> {
        let exp = i32::from(r.u8()? as i8);
        if !(-100..=100).contains(&exp) {
            return Err(Error::corrupt("u8", format!("exponent {exp}")));
        }
        let step = 2f32.powi(exp - 7);
        Ok(r.bytes(n)?
            .iter()
            .map(|&q| f32::from(q as i8) * step)
            .collect())
    }
}

/// A user's codec that writes its values as `inner` does, under its own
/// tag `TAG` and `name` (always lossy); with `lie`, a split that breaks
/// the rules: it claims to send every value as encoded, whatever the
/// remainder.
#[derive(Debug, Clone, Copy)]
struct Forward<C, const TAG: u8> {
    name: &'static str,
    inner: C,
    lie: bool,
}

impl<C: ValueCodec<f32>, const TAG: u8> ValueCodec<f32> for Forward<C, TAG> {
    const TAG: u8 = TAG;
    fn name(&self) -> String {
        self.name.into()
    }
    fn lossless(&self) -> bool {
        false
    }
    fn encoded_len(&self, n: usize) -> usize {
        self.inner.encoded_len(n)
    }
    fn encode(&self, values: &[f32], out: &mut Vec<u8>) -> Result<()> {
        self.inner.encode(values, out)
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<f32>> {
        self.inner.decode(r, n)
    }
    fn split(&self, values: &[f32]) -> Result<Split> {
        if !self.lie {
            return split_by_round_trip(self, values, <[f32]>::to_vec);
        }
        let mut bytes = Vec::new();
        self.encode(values, &mut bytes)?;
        Ok(Split {
            kept: (0..values.len()).collect(),
            bytes,
        })
    }
}

/// `inner` under the tag `TAG` and `name`, splitting by the rules.
fn forward<C, const TAG: u8>(name: &'static str, inner: C) -> Forward<C, TAG> {
    Forward {
        name,
        inner,
        lie: false,
    }
}

/// QSGD with 4 bits under a user's tag: a random (stochastic) rounding, so
/// that encoding the decoded values again gives other values.
fn user_qsgd(seed: u64) -> Forward<Qsgd, 201> {
    forward("uqsgd", Qsgd::new(4, seed).unwrap())
}

/// U8's values under another tag, with a split that lies.
const LIAR: Forward<U8, 202> = Forward {
    name: "liar",
    inner: U8,
    lie: true,
};

fn registry() -> Registry<f32> {
    let mut r = Registry::builtin();
    r.add_values(U8).unwrap();
    r.add_values(user_qsgd(11)).unwrap();
    r.add_values(LIAR).unwrap();
    r.add_values(MeanScaled).unwrap();
    r
}

/// The user's 8-bit codec, by name, through the collective suite with every
/// collective that takes `values` (TopkA, SSAR_Recursive_double, SparDL):
/// exact conservation on integer inputs, identical results on every rank,
/// every check of the suite.
#[test]
fn a_user_codec_passes_the_suite_in_every_collective_that_carries_values() {
    let registry = registry();
    let mut failures = Vec::new();
    let mut specs_run = std::collections::BTreeSet::new();
    for p in [1usize, 2, 3, 4, 5, 8] {
        let specs: Vec<String> = registry
            .suite_specs(p)
            .into_iter()
            .filter(|s| s.ends_with("values=u8"))
            .collect();
        for spec in specs {
            specs_run.insert(spec.split(':').next().unwrap().to_string());
            common::suite_on_threads(&registry, p, &spec, &mut failures);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every algorithm of the registry that takes `values`, and no other.
    let takes: std::collections::BTreeSet<String> = registry
        .entries()
        .iter()
        .filter(|e| e.takes_values())
        .map(|e| e.name().to_string())
        .collect();
    assert_eq!(specs_run, takes);
    assert!(!takes.is_empty(), "some algorithm takes values");
}

fn gradient(p: usize, dim: usize, seed: u64) -> Vec<SparseVec<f32>> {
    GradientSpec {
        overlap: 0.5,
        values: ValueDist::Normal { std: 3.0 },
        ..GradientSpec::new(dim, 0.2, seed)
    }
    .generate::<f32>(p)
    .unwrap()
}

/// The user's codec sends most values (the split does not keep everything
/// back) on a grid of 8 significant bits, and its TopkA result is the sum,
/// in rank order, of what each rank's split sends: an oracle computed
/// apart from the collective, bit for bit; each rank's `dropped` is its
/// split's remainder.
#[test]
fn topk_a_with_a_user_codec_sends_what_the_split_sends() {
    let (p, dim) = (4, 500);
    let ins = gradient(p, dim, 3);
    let registry = registry();
    for codec in ["u8", "uqsgd", "mean_scaled"] {
        let values = registry.values(codec).unwrap();
        let parts: Vec<_> = ins.iter().map(|v| values.pack(v).unwrap()).collect();
        let mut want = SparseVec::zeros(dim).unwrap();
        for part in &parts {
            want = want.merge_sum(part.sent()).unwrap();
        }
        let sent: usize = parts.iter().map(|x| x.sent().nnz()).sum();
        let total: usize = ins.iter().map(SparseVec::nnz).sum();
        assert!(sent * 2 >= total, "{codec}: sends {sent} of {total} values");
        let spec = format!("topk_a:values={codec}");
        let out = ThreadCluster::new(p).run(|t| {
            let mut a = registry.build(&spec, Defaults::lossless())?;
            assert!(!a.lossless());
            let v = &ins[t.rank()];
            a.allreduce(t, v)
        });
        for (r, red) in out.into_iter().enumerate() {
            let red = red.unwrap();
            assert_eq!(red.result.indices(), want.indices(), "{codec} rank {r}");
            let bits =
                |v: &SparseVec<f32>| v.values().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&red.result), bits(&want), "{codec} rank {r}");
            assert_eq!(&red.dropped, parts[r].rest(), "{codec} rank {r}");
        }
    }
    // u8's values are multiples of 2^(exp - 7) with |q| <= 127.
    let values = registry.values("u8").unwrap();
    let packed = values.pack(&ins[0]).unwrap();
    for &x in packed.sent().values() {
        let m = x.abs() * 2f32.powi(-(x.abs().log2().ceil() as i32) + 7);
        assert!(m == m.round() && m <= 128.0, "{x} is not on the 8-bit grid");
    }
}

/// A codec whose grid depends on its input: the scale is the mean
/// magnitude, each value `round(x / scale)` clamped to `-3..=3`. Decoding
/// and encoding again gives other values (the decoded values have another
/// mean), so a sender that encoded what it sent a second time would send
/// other values than it subtracted.
#[derive(Debug, Clone, Copy)]
struct MeanScaled;

impl ValueCodec<f32> for MeanScaled {
    const TAG: u8 = 203;
    fn name(&self) -> String {
        "mean_scaled".into()
    }
    fn lossless(&self) -> bool {
        false
    }
    fn encoded_len(&self, n: usize) -> usize {
        4 + n
    }
    fn encode(&self, values: &[f32], out: &mut Vec<u8>) -> Result<()> {
        let n = values.len().max(1) as f32;
        let scale = values.iter().map(|x| x.abs()).sum::<f32>() / n;
        out.extend_from_slice(&scale.to_le_bytes());
        out.extend(values.iter().map(|&x| {
            let q = if scale > 0.0 {
                (x / scale).round()
            } else {
                0.0
            };
            q.clamp(-3.0, 3.0) as i8 as u8
        }));
        Ok(())
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<f32>> {
        let scale: f32 = r.elements(1)?[0];
        Ok(r.bytes(n)?
            .iter()
            .map(|&q| f32::from(q as i8) * scale)
            .collect())
    }
}

/// The message a collective sends is the split's own section, so what
/// receivers decode is what the sender subtracted, bit for bit, even for a
/// codec whose encoding of its own output differs (and for QSGD's random
/// rounding); `sent + rest` is the input.
#[test]
fn a_codec_sends_its_splits_own_bytes() {
    let v = &gradient(1, 4000, 9)[0];
    let mean = MeanScaled;
    let qsgd = user_qsgd(5);
    for (values, again) in [
        (
            WireValues::codec(mean),
            Box::new(move |x: &[f32]| {
                let mut b = Vec::new();
                mean.encode(x, &mut b).unwrap();
                mean.decode(&mut Reader::new(&b, "test"), x.len()).unwrap()
            }) as Box<dyn Fn(&[f32]) -> Vec<f32>>,
        ),
        (
            WireValues::codec(qsgd),
            Box::new(move |x: &[f32]| {
                let mut b = Vec::new();
                qsgd.encode(x, &mut b).unwrap();
                qsgd.decode(&mut Reader::new(&b, "test"), x.len()).unwrap()
            }),
        ),
    ] {
        let packed = values.pack(v).unwrap();
        let sent = packed.sent();
        assert!(
            sent.nnz() > v.nnz() / 2,
            "{values:?} sends {} of {}",
            sent.nnz(),
            v.nnz()
        );
        if values.name() == "mean_scaled" {
            // Encoding what was sent a second time changes it.
            assert_ne!(again(sent.values()), sent.values(), "not idempotent");
        }
        let mut b = packed.bytes();
        let back = values.take(&mut b, v.dim(), 0, v.dim(), "test").unwrap();
        assert!(b.is_empty());
        assert_eq!(&back, sent, "{values:?}");
        let mut total = sent.to_dense();
        packed.rest().add_to_dense(&mut total);
        for (i, x) in v.iter() {
            assert_eq!(
                total[i as usize].to_bits(),
                x.to_bits(),
                "{values:?} at {i}"
            );
        }
    }
}

/// Every collective that carries values, with QSGD's random rounding and
/// the mean-scaled codec: the result is identical on every rank and
/// conserves the sum within rounding (decoded values with arbitrary scales
/// do not sum exactly in f32; the split of each message is exact).
#[test]
fn codecs_with_arbitrary_scales_run_in_every_collective_that_carries_values() {
    let registry = registry();
    for p in [2usize, 3, 5, 8] {
        let dim = 700;
        let ins = gradient(p, dim, p as u64);
        let mut oracle = vec![0f64; dim];
        let mut mags = vec![0f64; dim];
        for v in &ins {
            for (i, x) in v.iter() {
                oracle[i as usize] += f64::from(x);
                mags[i as usize] += f64::from(x.abs());
            }
        }
        // Every algorithm of the registry that takes values, the lossy ones
        // keeping 30% of the dimension.
        let specs: Vec<&str> = registry
            .entries()
            .iter()
            .filter(|e| e.takes_values())
            .map(|e| e.name())
            .collect();
        assert!(!specs.is_empty());
        let defaults = Defaults::density(0.3).unwrap();
        for (spec, codec) in specs
            .iter()
            .flat_map(|s| ["uqsgd", "mean_scaled"].map(|c| (s, c)))
        {
            let spec = format!("{spec}:values={codec}");
            let out = ThreadCluster::new(p).run(|t| {
                let v = &ins[t.rank()];
                registry.build(&spec, defaults)?.allreduce(t, v)
            });
            let reds: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
            let mut total = vec![0f64; dim];
            for (i, x) in reds[0].result.iter() {
                total[i as usize] += f64::from(x);
            }
            for red in &reds {
                assert_eq!(red.result, reds[0].result, "{spec} P={p}");
                for (i, x) in red.dropped.iter() {
                    total[i as usize] += f64::from(x);
                }
            }
            assert!(reds[0].result.nnz() > 0, "{spec} P={p}: sent nothing");
            for i in 0..dim {
                let bound = 8.0 * p as f64 * f64::from(f32::EPSILON) * mags[i];
                assert!(
                    (total[i] - oracle[i]).abs() <= bound,
                    "{spec} P={p} at {i}: {} vs {}",
                    total[i],
                    oracle[i]
                );
            }
        }
    }
}

/// A split that breaks the rules (a remainder that is not exact) is an
/// error naming the codec on every rank, before anything is sent.
#[test]
fn a_lying_split_is_an_error_naming_the_codec() {
    let registry = registry();
    let ins = gradient(3, 300, 4);
    for spec in [
        "topk_a:values=liar",
        "ssar_recursive_double:values=liar",
        "spardl:k=50,values=liar",
    ] {
        let out = ThreadCluster::new(3).run(|t| {
            let v = &ins[t.rank()];
            registry.build(spec, Defaults::lossless())?.allreduce(t, v)
        });
        for res in out {
            match res {
                Err(Error::InvalidParameter { name, reason }) => {
                    assert_eq!(name, "values", "{spec}");
                    assert!(reason.contains("\"liar\""), "{spec}: {reason}");
                }
                other => panic!("{spec}: {other:?}"),
            }
        }
    }
}

/// Registration: a user's tag must lie in `USER_TAGS` (the built-in codecs'
/// are below), names and tags are unique, and an unknown name is an error
/// listing the known ones.
#[test]
fn registration_refuses_reserved_tags_and_taken_names() {
    let mut r = Registry::<f32>::builtin();
    let reserved = forward::<_, 5>("reserved", U8);
    let err = r.add_values(reserved).unwrap_err().to_string();
    assert!(err.contains("128..=255"), "{err}");
    assert_eq!(*USER_TAGS.start(), 128);
    // Built-in tags are all below the user range.
    for name in ["raw", "f16", "bf16", "ssmean"] {
        let tag = r.values(name).unwrap().tag();
        assert!(!USER_TAGS.contains(&tag), "{name}: {tag}");
    }
    let qsgd = WireValues::<f32>::codec(Qsgd::new(4, 1).unwrap());
    assert!(!USER_TAGS.contains(&qsgd.tag()));
    r.add_values(U8).unwrap();
    assert!(r.add_values(U8).is_err(), "a name twice");
    assert!(r.add_values(LIAR).is_ok());
    // Another codec under U8's tag is refused: tags are unique.
    let same_tag = forward::<_, 200>("same_tag", U8);
    assert!(r.add_values(same_tag).is_err(), "a tag twice");
    assert!(r.build("topk_a:values=u8", Defaults::lossless()).is_ok());
    let err = r
        .build("topk_a:values=u7", Defaults::lossless())
        .unwrap_err()
        .to_string();
    assert!(err.contains("u8") && err.contains("ssmean"), "{err}");
    // The spec of a built collective names the codec, and builds back.
    let a = r
        .build("spardl:k=5,values=u8", Defaults::lossless())
        .unwrap();
    assert_eq!(a.spec(), "spardl:k=5,values=u8");
    // The built-in registry does not know a user's codec.
    assert!(
        Registry::<f32>::builtin()
            .build("topk_a:values=u8", Defaults::lossless())
            .is_err()
    );
}

/// Ranks that send with different codecs disagree at the entry round (the
/// codec's name and tag are compared), on every rank.
#[test]
fn ranks_with_different_codecs_disagree() {
    let registry = registry();
    let ins = gradient(2, 100, 1);
    let out = ThreadCluster::new(2).run(|t| {
        let spec = if t.rank() == 0 {
            "topk_a:values=u8"
        } else {
            "topk_a:values=f16"
        };
        let v = &ins[t.rank()];
        registry.build(spec, Defaults::lossless())?.allreduce(t, v)
    });
    for res in out {
        assert!(matches!(res, Err(Error::Disagreement { .. })), "{res:?}");
    }
}
