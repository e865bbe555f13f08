//! Each layer's share of the backward pass in the bucketed step
//! ([`super::bucket`]): by its forward FLOPs where the architecture gives
//! them, else by its parameters.
//!
//! The presets ([`crate::models`]) hold each tensor's shape and the
//! model's forward GFlop per sample, not a layer's; a layer's FLOPs need
//! the size of its output, which the architecture fixes. For the five
//! presets it is derived here from the layer's name:
//! - ResNet-50 (torchvision, 224 x 224): the stem at 112 x 112, stage `S`
//!   at `56 / 2^(S - 1)`, except the first 1x1 conv of a stage's first
//!   block, which runs before the stride (torchvision's v1.5 strides the
//!   3x3 conv) at twice that; the classifier once;
//! - VGG-16: the convs of block `b` at `224 / 2^b`; AlexNet: 55, 27 and 13;
//!   the classifiers once;
//! - the PTB LSTM and BERT-base: every matrix and bias once per token; the
//!   embeddings are lookups (no FLOPs); BERT's attention products (`4 s^2
//!   h` a layer for `s` = 128 tokens) go to the layer's value weight,
//!   whose gradient comes after them in the backward pass.
//!
//! A conv weight of `n` parameters at `H x W` costs `2 n H W` (a multiply
//! and an add per weight and output pixel), a matrix `2 n` per token, a
//! bias or a normalisation's weight `n H W` (one operation per output).
//! A model without such a derivation (or a layer this does not know) is
//! shared by parameters. `tests/step_buckets.rs` checks the totals
//! against torchvision's published GFLOPS and BERT's formula in
//! [`crate::models`].

use crate::models::ModelPreset;

/// BERT's tokens per sequence (as [`crate::models::bert_base`]).
const BERT_SEQ: f64 = 128.0;

/// How the backward pass is shared among the layers.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardShares {
    /// Each layer's weight, in the model's order (any positive scale).
    pub weights: Vec<f64>,
    /// `"FLOPs"` or `"parameters"`.
    pub by: &'static str,
}

/// The output pixels of ResNet-50's layer `name`.
fn resnet_pixels(name: &str) -> Option<f64> {
    if name.starts_with("conv1.") || name.starts_with("bn1.") {
        return Some(112.0 * 112.0);
    }
    if name.starts_with("fc.") {
        return Some(1.0);
    }
    let mut parts = name.strip_prefix("layer")?.splitn(3, '.');
    let stage: u32 = parts.next()?.parse().ok()?;
    let block: u32 = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let side = 56.0 / f64::from(1u32 << stage.checked_sub(1)?);
    let before_stride =
        stage >= 2 && block == 0 && (rest.starts_with("conv1.") || rest.starts_with("bn1."));
    let side = if before_stride { 2.0 * side } else { side };
    Some(side * side)
}

/// The output pixels of VGG-16's or AlexNet's layer `name`; `sides`: the
/// first index in `features` of each run of convs at one output side, and
/// that side.
fn features_pixels(name: &str, sides: &[(usize, f64)]) -> Option<f64> {
    if name.starts_with("classifier.") {
        return Some(1.0);
    }
    let index: usize = name
        .strip_prefix("features.")?
        .split('.')
        .next()?
        .parse()
        .ok()?;
    // The side of the last range starting at or before `index`.
    sides
        .iter()
        .rev()
        .find(|(from, _)| *from <= index)
        .map(|(_, side)| side * side)
}

/// The forward FLOPs per sample of layer `i` of `model`, where the
/// [module](self) doc derives them.
fn layer_flops(model: &ModelPreset, i: usize) -> Option<f64> {
    let l = model.layers.get(i)?;
    let n = l.len() as f64;
    let per_pixel = |pixels: f64| match l.shape.len() {
        4 | 2 => 2.0 * n * pixels,
        _ => n * pixels,
    };
    match model.name {
        "resnet50" => resnet_pixels(&l.name).map(per_pixel),
        "vgg16" => features_pixels(
            &l.name,
            &[(0, 224.0), (5, 112.0), (10, 56.0), (17, 28.0), (24, 14.0)],
        )
        .map(per_pixel),
        "alexnet" => features_pixels(&l.name, &[(0, 55.0), (3, 27.0), (6, 13.0)]).map(per_pixel),
        "lstm_ptb" if l.name.starts_with("encoder.") => Some(0.0),
        "lstm_ptb" => Some(per_pixel(1.0)),
        "bert_base" if l.name.contains("_embeddings.") => Some(0.0),
        "bert_base" => {
            let attention = if l.name.ends_with("attention.self.value.weight") {
                4.0 * BERT_SEQ * BERT_SEQ * 768.0
            } else {
                0.0
            };
            Some(per_pixel(BERT_SEQ) + attention)
        }
        _ => None,
    }
}

/// The forward FLOPs per sample of every layer of `model`, or `None` when
/// one of them is not derived.
pub fn layer_flops_all(model: &ModelPreset) -> Option<Vec<f64>> {
    (0..model.layers.len())
        .map(|i| layer_flops(model, i))
        .collect()
}

/// Each layer's share of `model`'s backward pass: by FLOPs where every
/// layer's are derived and some are positive, else by parameters.
pub fn backward_shares(model: &ModelPreset) -> BackwardShares {
    match layer_flops_all(model) {
        Some(weights) if weights.iter().sum::<f64>() > 0.0 => BackwardShares {
            weights,
            by: "FLOPs",
        },
        _ => BackwardShares {
            weights: model.layers.iter().map(|l| l.len() as f64).collect(),
            by: "parameters",
        },
    }
}
