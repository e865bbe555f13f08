//! A step's selection budgets: the entries each layer selects, and a
//! bucket's one budget where its layers share it
//! ([`crate::BucketBudget::Global`]).

use super::calls::cut_bucket;
use super::work::{Outgoing, Ready};
use crate::trainer::{Part, Trainer};
use sparse_core::{Backend, Result};
use sparse_select::Selector;

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// With a global bucket budget ([`crate::BucketBudget::Global`]), each
    /// fused bucket keeps the `K` largest of its layers' candidates, `K`
    /// the density's share of the bucket; what a layer does not keep stays
    /// in its memory (its selection is cut to what it keeps).
    pub(super) fn cut_to_budgets(&self, ready: &mut [Option<Ready<B>>]) -> Result<()> {
        for (j, bucket) in self.buckets.iter().enumerate() {
            let Some(k) = self.shared_budget(j) else {
                continue;
            };
            let mut outs: Vec<&mut Outgoing<B>> = Vec::with_capacity(bucket.layers.len());
            for (l, r) in ready.iter_mut().enumerate() {
                if let (true, Some(Ready::Compressed(out))) = (bucket.layers.contains(&l), r) {
                    outs.push(out);
                }
            }
            cut_bucket(&self.b, &mut outs, k)?;
        }
        Ok(())
    }

    /// Bucket `j`'s one budget, where its layers share one
    /// ([`crate::BucketBudget::Global`], several layers): the density's
    /// share of the bucket.
    pub(super) fn shared_budget(&self, j: usize) -> Option<usize> {
        let global = self
            .cfg
            .buckets
            .is_some_and(|b| b.budget_rule() == crate::BucketBudget::Global);
        let bucket = &self.buckets[j];
        (global && bucket.layers.len() > 1).then(|| self.cfg.density.k_for(bucket.len))
    }

    /// The entries layer `l` selects: its density's share, or under a
    /// global bucket budget up to its bucket's (the candidates the bucket
    /// keeps its largest of).
    pub(super) fn select_k(&self, l: usize, n: usize) -> usize {
        let shared = match &self.layers[l].part {
            Part::Compressed(c) => self.shared_budget(c.bucket),
            Part::Dense { .. } => None,
        };
        shared.map_or_else(|| self.cfg.density.k_for(n), |k| k.min(n))
    }
}
