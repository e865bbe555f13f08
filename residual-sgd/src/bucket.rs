//! Fused compressed layers: buckets of layers that share one selection
//! budget rule and one collective call per step ([`Buckets`], set with
//! [`crate::Config::buckets`]), as PyTorch DDP, Horovod and BytePS fuse
//! tensors and as Ok-Topk and gTopk select over the whole model.

use crate::LayerSpec;
use sparse_core::sparse::MAX_DIM;
use sparse_core::{Error, Result};

/// PyTorch DDP's default bucket cap, 25 MiB.
pub const DDP_BUCKET_BYTES: usize = 25 << 20;

/// How the entries a bucket sends are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BucketBudget {
    /// Each layer keeps its own share, `round(density n_l)` (RedSync):
    /// what each layer sends is what it would send alone, and with a
    /// lossless collective a fused step equals the unfused one.
    #[default]
    PerLayer,
    /// One budget over the whole bucket, `round(density N)` of its `N`
    /// parameters, the largest magnitudes wherever they are (Ok-Topk's
    /// and gTopk's global top-k; ties: the lower position in the
    /// bucket). Each layer selects `min(K, n_l)` candidates (the bucket's
    /// `K` largest are among the union of each layer's `K` largest) and
    /// the bucket keeps the `K` largest of them; the rest stays in the
    /// layers' residuals.
    Global,
}

/// The order in which layers fill buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FillOrder {
    /// Backward order, the reverse of the layer list: the order a
    /// backward pass produces gradients in (DDP's).
    #[default]
    Backward,
    /// The layer list's order.
    List,
}

/// Fused compressed layers: layers taken in [`FillOrder`] fill a bucket
/// until it holds at least `cap` bytes (4 per parameter; a layer larger
/// than the cap is a bucket of its own), and each bucket makes one
/// collective call per step, its layers' index spaces laid end to end in
/// list order. Dense layers are not in these buckets
/// ([`crate::Config::fuse`] fuses them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    cap: usize,
    budget: BucketBudget,
    order: FillOrder,
}

impl Default for Buckets {
    /// DDP's: 25 MiB, backward order, per-layer budgets.
    fn default() -> Self {
        Self {
            cap: DDP_BUCKET_BYTES,
            budget: BucketBudget::PerLayer,
            order: FillOrder::Backward,
        }
    }
}

impl Buckets {
    /// Buckets of at least `cap_bytes`, backward order, per-layer budgets.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a cap of 0 (not fusing is the
    /// default: build no buckets).
    pub fn new(cap_bytes: usize) -> Result<Self> {
        if cap_bytes == 0 {
            return Err(Error::invalid(
                "bucket cap",
                "0 bytes fuses nothing: give a cap of at least one byte, or leave \
                 Config::buckets unset for one call per layer",
            ));
        }
        Ok(Self {
            cap: cap_bytes,
            ..Self::default()
        })
    }
    /// The same buckets with another budget rule.
    #[must_use]
    pub fn budget(self, budget: BucketBudget) -> Self {
        Self { budget, ..self }
    }
    /// The same buckets filled in another order.
    #[must_use]
    pub fn order(self, order: FillOrder) -> Self {
        Self { order, ..self }
    }
    /// The cap in bytes.
    pub fn cap(&self) -> usize {
        self.cap
    }
    /// The budget rule.
    pub fn budget_rule(&self) -> BucketBudget {
        self.budget
    }
    /// The fill order.
    pub fn fill_order(&self) -> FillOrder {
        self.order
    }

    /// The buckets of the compressed layers among `layers`, in the order
    /// they fill (and their calls run), each its layers' positions in
    /// list order.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a bucket past a sparse vector's
    /// largest dimension ([`MAX_DIM`]).
    pub fn layout(&self, layers: &[LayerSpec], compressed: &[bool]) -> Result<Vec<Vec<usize>>> {
        let mut order: Vec<usize> = (0..layers.len()).filter(|&l| compressed[l]).collect();
        if self.order == FillOrder::Backward {
            order.reverse();
        }
        let mut out: Vec<Vec<usize>> = Vec::new();
        let (mut open, mut bytes) = (Vec::new(), 0usize);
        for l in order {
            open.push(l);
            bytes = bytes.saturating_add(layers[l].len.saturating_mul(4));
            if bytes >= self.cap {
                out.push(std::mem::take(&mut open));
                bytes = 0;
            }
        }
        if !open.is_empty() {
            out.push(open);
        }
        for b in &mut out {
            b.sort_unstable();
            let len: usize = b.iter().map(|&l| layers[l].len).sum();
            if len > MAX_DIM {
                return Err(Error::invalid(
                    "bucket cap",
                    format!(
                        "a bucket of {len} parameters is past a sparse vector's largest \
                         dimension ({MAX_DIM}): give a smaller cap"
                    ),
                ));
            }
        }
        Ok(out)
    }
}

/// The bucket's `k` largest candidates by magnitude (ties: the lower
/// position in the bucket), each layer's kept positions: `candidates[j]`
/// holds layer `j`'s candidates (its positions and values), `offsets[j]`
/// its first position in the bucket.
pub(crate) fn global_cut(candidates: &[(&[u32], &[f32])], k: usize) -> Vec<Vec<u32>> {
    let mut all: Vec<(f32, usize, u32)> = candidates
        .iter()
        .enumerate()
        .flat_map(|(j, (idx, val))| idx.iter().zip(*val).map(move |(&i, &x)| (x.abs(), j, i)))
        .collect();
    // Layers are in list order, so (layer, index) is the bucket position's
    // order: the largest magnitude first, ties to the lower position.
    all.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    all.truncate(k);
    let mut kept = vec![Vec::new(); candidates.len()];
    for (_, j, i) in all {
        kept[j].push(i);
    }
    for k in &mut kept {
        k.sort_unstable();
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(lens: &[usize]) -> Vec<LayerSpec> {
        LayerSpec::matrices(lens)
    }

    #[test]
    fn layers_fill_buckets_in_backward_order_up_to_the_cap() {
        let layers = specs(&[100, 50, 300, 10, 40]);
        let all = [true; 5];
        // 4 bytes a parameter: a cap of 400 bytes is 100 parameters.
        let b = Buckets::new(400).unwrap();
        // Backward: 40+10+300 >= 100 closes [2, 3, 4]; 50+100 closes [0, 1].
        assert_eq!(
            b.layout(&layers, &all).unwrap(),
            vec![vec![2, 3, 4], vec![0, 1]]
        );
        let list = b.order(FillOrder::List);
        // List: 100 closes [0]; 50+300 closes [1, 2]; 10+40 is left.
        assert_eq!(
            list.layout(&layers, &all).unwrap(),
            vec![vec![0], vec![1, 2], vec![3, 4]]
        );
        // Dense layers are not in buckets.
        let some = [true, false, true, true, false];
        assert_eq!(b.layout(&layers, &some).unwrap(), vec![vec![2, 3], vec![0]]);
        // A cap of one byte: a bucket per layer.
        let one = Buckets::new(1).unwrap().order(FillOrder::List);
        assert_eq!(one.layout(&layers, &all).unwrap().len(), 5);
        assert!(Buckets::new(0).is_err());
    }

    #[test]
    fn the_global_cut_keeps_the_largest_of_the_union() {
        let a = ([0u32, 3, 5], [4.0f32, -9.0, 1.0]);
        let b = ([1u32, 2], [-4.0f32, 8.0]);
        let kept = global_cut(&[(&a.0, &a.1), (&b.0, &b.1)], 3);
        // |9|, |8|, then the tie |4| at (layer 0, 0) before (layer 1, 1).
        assert_eq!(kept, vec![vec![0, 3], vec![2]]);
        assert_eq!(global_cut(&[(&a.0, &a.1)], 10), vec![vec![0, 3, 5]]);
    }
}
