//! The papers' models as lists of parameter tensors: ResNet-50, VGG-16 and
//! AlexNet (torchvision's definitions), the 2-layer PTB LSTM of RedSync
//! Table 1, and BERT-base (HuggingFace's `BertModel`, uncased).
//!
//! Each preset is built from its architecture's definition (loops over
//! blocks and layers), one [`Layer`] per parameter tensor with its real
//! shape and torchvision's or PyTorch's name, so that the keep-dense rules
//! of `residual-sgd` (RedSync's 128 KiB compress threshold, DGC's
//! one-dimension rule) decide something; the unit tests check that each
//! total equals the published count exactly.
//!
//! Each preset also carries the forward computation per sample and the
//! batch per rank that give `sparse-bench step` its default compute time
//! ([`ModelPreset::default_compute_ms`]).

use residual_sgd::LayerSpec;
use sparse_core::{Error, Result};

/// One parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Its name in the framework's definition (`layer1.0.conv1.weight`).
    pub name: String,
    /// Its shape (a conv weight `[out, in, kh, kw]`, a bias `[out]`).
    pub shape: Vec<usize>,
}

impl Layer {
    fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        Self {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }
    /// Parameters: the product of the shape.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether the tensor holds no parameter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The optimizer's view of it: name, parameters, dimensions.
    pub fn spec(&self) -> LayerSpec {
        LayerSpec {
            name: self.name.clone(),
            len: self.len(),
            dims: self.shape.len(),
        }
    }
}

/// A model: its parameter tensors, the count its source publishes, and
/// what its default compute time comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPreset {
    /// The preset's name (`vgg16`).
    pub name: &'static str,
    /// Its parameter tensors, in the definition's order.
    pub layers: Vec<Layer>,
    /// The published parameter count the layers must add up to.
    pub published_total: usize,
    /// Where the definition and the published count come from.
    pub source: &'static str,
    /// Forward computation per sample, GFlop (RedSync Table 1's
    /// "Compt. Amount"; for BERT-base computed from the architecture).
    pub forward_gflop: f64,
    /// Samples per rank per step (RedSync Table 1's caption: 32 per node
    /// on ImageNet, 5 for the LSTM; 32 sequences of 128 tokens for BERT).
    pub batch: usize,
}

/// The sustained throughput the default compute time assumes: half the
/// 9.3 TFLOP/s single-precision peak of the P100 GPUs of Piz Daint, where
/// RedSync's Fig. 7 was measured (an assumption; set `--compute-ms` for
/// another device).
pub const DEVICE_GFLOPS: f64 = 4650.0;

impl ModelPreset {
    /// Parameters of all layers.
    pub fn total(&self) -> usize {
        self.layers.iter().map(Layer::len).sum()
    }
    /// The layers as the optimizer sees them.
    pub fn specs(&self) -> Vec<LayerSpec> {
        self.layers.iter().map(Layer::spec).collect()
    }
    /// The default forward-plus-backward time of one step on one rank, in
    /// milliseconds: `3 * forward_gflop * batch / DEVICE_GFLOPS` (the
    /// backward pass costs about twice the forward one). RedSync's Table 1
    /// gives the forward GFlop per sample and the batch per node, not a
    /// time: the throughput is [`DEVICE_GFLOPS`]'s assumption.
    pub fn default_compute_ms(&self) -> f64 {
        3.0 * self.forward_gflop * self.batch as f64 / DEVICE_GFLOPS * 1e3
    }
}

/// The preset names, in [`presets`]'s order.
pub const NAMES: [&str; 5] = ["resnet50", "vgg16", "alexnet", "lstm_ptb", "bert_base"];

/// Every preset.
pub fn presets() -> Vec<ModelPreset> {
    vec![resnet50(), vgg16(), alexnet(), lstm_ptb(), bert_base()]
}

/// The networks `sparse-bench train` trains on Fashion-MNIST, by name
/// (`fashion_mlp`, `fashion_cnn`), so that `sparse-bench step` can predict
/// the steps that `train` measures. A `:hidden=N` suffix sets the hidden
/// layer's units (train's `--hidden`; default 256 and 64, train's own).
pub const TRAIN_NAMES: [&str; 2] = ["fashion_mlp", "fashion_cnn"];

/// The preset `name` ([`NAMES`], or one of [`TRAIN_NAMES`] with an
/// optional `:hidden=N`).
///
/// # Errors
/// [`Error::InvalidParameter`] for an unknown name, listing the known ones,
/// or a hidden size that is not a whole number from 1 to [`MAX_HIDDEN`].
pub fn preset(name: &str) -> Result<ModelPreset> {
    let (base, hidden) = match name.split_once(":hidden=") {
        Some((base, h)) => match h.parse::<usize>() {
            Ok(h) if (1..=MAX_HIDDEN).contains(&h) => (base, Some(h)),
            _ => {
                return Err(Error::invalid(
                    "model",
                    format!("{name:?}: hidden= takes a whole number of units, 1 to {MAX_HIDDEN}"),
                ));
            }
        },
        None => (name, None),
    };
    match base {
        "fashion_mlp" => return Ok(fashion_mlp(hidden.unwrap_or(256))),
        "fashion_cnn" => return Ok(fashion_cnn(hidden.unwrap_or(64))),
        _ => {}
    }
    presets()
        .into_iter()
        .find(|m| m.name == name)
        .ok_or_else(|| {
            Error::invalid(
                "model",
                format!(
                    "{name:?} is not one of {}, {} (with an optional :hidden=N)",
                    NAMES.join(", "),
                    TRAIN_NAMES.join(", ")
                ),
            )
        })
}

/// The most hidden units `:hidden=N` takes (2^24: an MLP of 13 billion
/// parameters; the counts stay far from overflowing).
pub const MAX_HIDDEN: usize = 1 << 24;

/// Fashion-MNIST's image side and classes.
const FASHION_SIDE: usize = 28;
const FASHION_CLASSES: usize = 10;

/// A burn `Linear`: `weight [in, out]` (burn's layout, the transpose of
/// PyTorch's) and `bias [out]`.
fn burn_linear(name: &str, inp: usize, out: usize) -> [Layer; 2] {
    weight_bias(name, &[inp, out], out)
}

/// `sparse-bench train --model mlp` on Fashion-MNIST: 784 -> `hidden` ->
/// 10, burn's parameter names and shapes. Forward: 2 flops per
/// multiply-add; batch: train's default.
pub fn fashion_mlp(hidden: usize) -> ModelPreset {
    let features = FASHION_SIDE * FASHION_SIDE;
    let mut layers = burn_linear("fc1", features, hidden).to_vec();
    layers.extend(burn_linear("fc2", hidden, FASHION_CLASSES));
    ModelPreset {
        name: "fashion_mlp",
        published_total: features * hidden + hidden + hidden * FASHION_CLASSES + FASHION_CLASSES,
        layers,
        source: "sparse-bench train --model mlp (bench/src/train/model.rs); the count is                  the architecture's, and a test checks the layers against burn's module",
        forward_gflop: 2.0 * (features * hidden + hidden * FASHION_CLASSES) as f64 / 1e9,
        batch: crate::train::TrainArgs::default().batch,
    }
}

/// `sparse-bench train --model cnn` on Fashion-MNIST: two 5x5
/// convolutions (16 and 32 channels, padded, each followed by a 2x2
/// pooling), then 32 x 7 x 7 -> `hidden` -> 10; burn's names and shapes.
pub fn fashion_cnn(hidden: usize) -> ModelPreset {
    let [c1, c2] = crate::train::model::CNN_CHANNELS;
    let k = crate::train::model::CNN_KERNEL;
    let side = FASHION_SIDE;
    let flat = c2 * (side / 4) * (side / 4);
    let mut layers = vec![
        Layer::new("conv1.weight", &[c1, 1, k, k]),
        Layer::new("conv1.bias", &[c1]),
        Layer::new("conv2.weight", &[c2, c1, k, k]),
        Layer::new("conv2.bias", &[c2]),
    ];
    layers.extend(burn_linear("fc1", flat, hidden));
    layers.extend(burn_linear("fc2", hidden, FASHION_CLASSES));
    let macs = side * side * c1 * k * k
        + (side / 2) * (side / 2) * c2 * c1 * k * k
        + flat * hidden
        + hidden * FASHION_CLASSES;
    ModelPreset {
        name: "fashion_cnn",
        published_total: c1 * k * k
            + c1
            + c2 * c1 * k * k
            + c2
            + flat * hidden
            + hidden
            + hidden * FASHION_CLASSES
            + FASHION_CLASSES,
        layers,
        source: "sparse-bench train --model cnn (bench/src/train/model.rs); the count is                  the architecture's, and a test checks the layers against burn's module",
        forward_gflop: 2.0 * macs as f64 / 1e9,
        batch: crate::train::TrainArgs::default().batch,
    }
}

/// A conv weight `[out, in, k, k]` without bias.
fn conv(name: &str, out: usize, inp: usize, k: usize) -> Layer {
    Layer::new(format!("{name}.weight"), &[out, inp, k, k])
}

/// A weight and a bias of `[out]`, `prefix.weight` and `prefix.bias`:
/// batch norm and layer norm (affine), or a layer's bias after its weight.
fn weight_bias(prefix: &str, weight: &[usize], out: usize) -> [Layer; 2] {
    [
        Layer::new(format!("{prefix}.weight"), weight),
        Layer::new(format!("{prefix}.bias"), &[out]),
    ]
}

/// torchvision's `classifier` of fully connected layers from `fan_in`
/// features: each `(index in the Sequential, outputs)`, weight and bias.
fn classifier(mut fan_in: usize, fcs: [(usize, usize); 3]) -> Vec<Layer> {
    let mut layers = Vec::new();
    for (index, out) in fcs {
        layers.extend(weight_bias(
            &format!("classifier.{index}"),
            &[out, fan_in],
            out,
        ));
        fan_in = out;
    }
    layers
}

/// torchvision's `resnet50`: a 7x7 stem, four stages of 3, 4, 6, 3
/// bottleneck blocks (1x1, 3x3, 1x1 convs, expansion 4, a 1x1 projection
/// in each stage's first block), batch norm after every conv (weight and
/// bias; the running statistics are buffers, not parameters), and the
/// 2048 -> 1000 classifier.
pub fn resnet50() -> ModelPreset {
    let mut layers = vec![conv("conv1", 64, 3, 7)];
    layers.extend(weight_bias("bn1", &[64], 64));
    let mut inp = 64;
    for (stage, (blocks, planes)) in [(3, 64), (4, 128), (6, 256), (3, 512)]
        .into_iter()
        .enumerate()
    {
        for b in 0..blocks {
            let p = format!("layer{}.{b}", stage + 1);
            let out = planes * 4;
            for (i, (o, c_in, k)) in [(planes, inp, 1), (planes, planes, 3), (out, planes, 1)]
                .into_iter()
                .enumerate()
            {
                layers.push(conv(&format!("{p}.conv{}", i + 1), o, c_in, k));
                layers.extend(weight_bias(&format!("{p}.bn{}", i + 1), &[o], o));
            }
            if b == 0 {
                layers.push(conv(&format!("{p}.downsample.0"), out, inp, 1));
                layers.extend(weight_bias(&format!("{p}.downsample.1"), &[out], out));
            }
            inp = out;
        }
    }
    layers.extend(weight_bias("fc", &[1000, 2048], 1000));
    ModelPreset {
        name: "resnet50",
        layers,
        published_total: 25_557_032,
        source: "torchvision.models.resnet50 (25,557,032 parameters); RedSync Table 1: \
                 103 MB, 8.22 GFlop per sample, batch 32 per node",
        forward_gflop: 8.22,
        batch: 32,
    }
}

/// torchvision's `vgg16` (configuration D, no batch norm): 13 3x3 convs
/// with biases in five blocks separated by max pools (the index in
/// `features` counts the ReLUs and pools), then 25088 -> 4096 -> 4096 ->
/// 1000 fully connected (`classifier.0`, `.3`, `.6`).
pub fn vgg16() -> ModelPreset {
    let blocks: [(usize, usize); 5] = [(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)];
    let mut layers = Vec::new();
    let (mut inp, mut index) = (3, 0);
    for (convs, width) in blocks {
        for _ in 0..convs {
            layers.extend(weight_bias(
                &format!("features.{index}"),
                &[width, inp, 3, 3],
                width,
            ));
            inp = width;
            index += 2; // conv, ReLU
        }
        index += 1; // max pool
    }
    layers.extend(classifier(512 * 7 * 7, [(0, 4096), (3, 4096), (6, 1000)]));
    ModelPreset {
        name: "vgg16",
        layers,
        published_total: 138_357_544,
        source: "torchvision.models.vgg16 (138,357,544 parameters); RedSync Table 1: \
                 528 MB, 15.5 GFlop per sample, batch 32 per node",
        forward_gflop: 15.5,
        batch: 32,
    }
}

/// torchvision's `alexnet` (the one-tower variant of Krizhevsky's
/// "One weird trick", 64-192-384-256-256 filters, 61,100,840 parameters),
/// not the original two-tower network of 2012 (60,965,224). RedSync's
/// Table 1 gives AlexNet 233 MB: 61,100,840 x 4 bytes is 233.1 MiB, so
/// RedSync's is this one.
pub fn alexnet() -> ModelPreset {
    let convs: [(usize, usize, usize, usize); 5] = [
        (0, 64, 3, 11),
        (3, 192, 64, 5),
        (6, 384, 192, 3),
        (8, 256, 384, 3),
        (10, 256, 256, 3),
    ];
    let mut layers = Vec::new();
    for (index, out, inp, k) in convs {
        layers.extend(weight_bias(
            &format!("features.{index}"),
            &[out, inp, k, k],
            out,
        ));
    }
    layers.extend(classifier(256 * 6 * 6, [(1, 4096), (4, 4096), (6, 1000)]));
    ModelPreset {
        name: "alexnet",
        layers,
        published_total: 61_100_840,
        source: "torchvision.models.alexnet (61,100,840 parameters; RedSync Table 1: \
                 233 MB = 233.1 MiB of these), 0.72 GFlop per sample, batch 32 per node",
        forward_gflop: 0.72,
        batch: 32,
    }
}

/// RedSync's language model (Sec. 6: "a 2-layer LSTM language model
/// architecture with 1500 hidden units per layer (Press & Wolf (2016))",
/// encoder and decoder not tied) on PTB's 10,000-word vocabulary, as
/// PyTorch's `word_language_model` defines it: a 10000 x 1500 embedding,
/// two `nn.LSTM` layers (weight_ih and weight_hh of 4 x 1500 rows, two
/// biases each) and a 1500 -> 10000 decoder with bias. Its 66,034,000
/// f32 parameters are RedSync Table 1's 264 MB (decimal megabytes; the
/// Wiki2 model's 33,278 words give its 543 MB the same way).
pub fn lstm_ptb() -> ModelPreset {
    let (vocab, hidden, gates) = (10_000, 1500, 4);
    let mut layers = vec![Layer::new("encoder.weight", &[vocab, hidden])];
    for l in 0..2 {
        for kind in ["ih", "hh"] {
            // Both inputs are 1500 wide: the embedding, then the layer below.
            layers.push(Layer::new(
                format!("rnn.weight_{kind}_l{l}"),
                &[gates * hidden, hidden],
            ));
        }
        for kind in ["ih", "hh"] {
            layers.push(Layer::new(
                format!("rnn.bias_{kind}_l{l}"),
                &[gates * hidden],
            ));
        }
    }
    layers.extend(weight_bias("decoder", &[vocab, hidden], vocab));
    ModelPreset {
        name: "lstm_ptb",
        layers,
        published_total: 66_034_000,
        source: "RedSync Sec. 6 and Table 1 (2-layer LSTM, 1500 hidden, untied, PTB: \
                 264 MB = 66,034,000 x 4 bytes; 2.52 GFlop per sample, batch 5 per node), \
                 as PyTorch's word_language_model defines it",
        forward_gflop: 2.52,
        batch: 5,
    }
}

/// BERT-base, uncased, as HuggingFace's `BertModel` (with the pooler):
/// word (30522), position (512) and token-type (2) embeddings of 768 with
/// a LayerNorm, 12 layers of self-attention (query, key, value, output
/// dense with biases, LayerNorm) and feed-forward (768 -> 3072 -> 768 with
/// biases, LayerNorm), and the 768 -> 768 pooler: 109,482,240 parameters.
/// Not a model of RedSync's: its forward computation is computed here for
/// sequences of 128 tokens (2 flops per multiply-add of every encoder
/// matrix per token, plus the attention's `QK^T` and its product with `V`,
/// `4 s^2 h` per layer), its batch of 32 sequences an assumption.
pub fn bert_base() -> ModelPreset {
    let (vocab, positions, types, h, ff, depth) = (30_522, 512, 2, 768, 3072, 12);
    let mut layers = vec![
        Layer::new("embeddings.word_embeddings.weight", &[vocab, h]),
        Layer::new("embeddings.position_embeddings.weight", &[positions, h]),
        Layer::new("embeddings.token_type_embeddings.weight", &[types, h]),
    ];
    layers.extend(weight_bias("embeddings.LayerNorm", &[h], h));
    for l in 0..depth {
        let p = format!("encoder.layer.{l}");
        for m in ["query", "key", "value"] {
            layers.extend(weight_bias(&format!("{p}.attention.self.{m}"), &[h, h], h));
        }
        layers.extend(weight_bias(
            &format!("{p}.attention.output.dense"),
            &[h, h],
            h,
        ));
        layers.extend(weight_bias(
            &format!("{p}.attention.output.LayerNorm"),
            &[h],
            h,
        ));
        layers.extend(weight_bias(
            &format!("{p}.intermediate.dense"),
            &[ff, h],
            ff,
        ));
        layers.extend(weight_bias(&format!("{p}.output.dense"), &[h, ff], h));
        layers.extend(weight_bias(&format!("{p}.output.LayerNorm"), &[h], h));
    }
    layers.extend(weight_bias("pooler.dense", &[h, h], h));
    let seq = 128.0;
    let encoder_matrix = (depth * (4 * h * h + 2 * h * ff)) as f64;
    let attention = (depth * 4 * h) as f64 * seq * seq;
    ModelPreset {
        name: "bert_base",
        layers,
        published_total: 109_482_240,
        source: "HuggingFace transformers BertModel, bert-base-uncased (109,482,240 \
                 parameters with the pooler); forward GFlop computed for 128 tokens, \
                 batch 32 assumed (not in RedSync)",
        forward_gflop: (2.0 * seq * encoder_matrix + attention) / 1e9,
        batch: 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_total_is_the_published_count() {
        for m in presets() {
            assert_eq!(m.total(), m.published_total, "{}", m.name);
            assert!(
                m.layers
                    .iter()
                    .all(|l| !l.shape.is_empty() && l.shape.iter().all(|&d| d > 0))
            );
            let names: std::collections::HashSet<_> = m.layers.iter().map(|l| &l.name).collect();
            assert_eq!(names.len(), m.layers.len(), "{}: names repeat", m.name);
        }
        assert_eq!(
            presets().iter().map(|m| m.name).collect::<Vec<_>>(),
            NAMES.to_vec()
        );
    }

    /// RedSync Table 1's model sizes: the LSTM's in decimal megabytes,
    /// AlexNet's and VGG-16's in MiB.
    #[test]
    fn sizes_match_redsync_table_1() {
        let mb = |m: &ModelPreset| (4 * m.total()) as f64 / 1e6;
        let mib = |m: &ModelPreset| (4 * m.total()) as f64 / (1 << 20) as f64;
        assert_eq!(mb(&lstm_ptb()).round(), 264.0);
        assert_eq!(mib(&alexnet()).round(), 233.0);
        assert_eq!(mib(&vgg16()).round(), 528.0);
    }

    #[test]
    fn shapes_are_the_definitions() {
        let r = resnet50();
        let convs = r.layers.iter().filter(|l| l.shape.len() == 4).count();
        assert_eq!(convs, 53); // 1 + 16 blocks x 3 + 4 projections
        let v = vgg16();
        assert_eq!(v.layers[0].shape, vec![64, 3, 3, 3]);
        assert_eq!(v.layers[26].name, "classifier.0.weight");
        assert_eq!(v.layers[26].shape, vec![4096, 25088]);
        assert_eq!(bert_base().layers.len(), 5 + 12 * 16 + 2);
        assert!((bert_base().forward_gflop - 22.35).abs() < 0.01);
    }

    /// The train presets are the layers burn's modules give the trainer
    /// (names, sizes and dimensions), and their counts the ones train's
    /// documentation states (203,530 and 114,314 at the defaults).
    #[test]
    fn train_presets_are_burns_modules() {
        use crate::train::model::{Kind, Model};
        for (kind, name, hidden) in [
            (Kind::Mlp, "fashion_mlp", 256),
            (Kind::Mlp, "fashion_mlp:hidden=1024", 1024),
            (Kind::Cnn, "fashion_cnn", 64),
            (Kind::Cnn, "fashion_cnn:hidden=7", 7),
        ] {
            let p = preset(name).unwrap();
            let burn = Model::new(kind, [28, 28], hidden).unwrap().layers();
            assert_eq!(p.specs(), burn, "{name}");
            assert_eq!(p.total(), p.published_total, "{name}");
        }
        assert_eq!(preset("fashion_mlp").unwrap().total(), 203_530);
        assert_eq!(preset("fashion_cnn").unwrap().total(), 114_314);
        for bad in [
            "fashion_mlp:hidden=0",
            "fashion_cnn:hidden=x",
            "fashion_rnn",
        ] {
            let e = preset(bad).unwrap_err().to_string();
            assert!(
                e.contains("hidden") || e.contains("fashion_mlp"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = preset("gpt5").unwrap_err().to_string();
        assert!(e.contains("vgg16") && e.contains("lstm_ptb"), "{e}");
        assert_eq!(preset("alexnet").unwrap().name, "alexnet");
    }
}
