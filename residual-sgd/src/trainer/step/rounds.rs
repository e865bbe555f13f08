//! A step's rounds, in both of its forms: the entry round (settings,
//! layers and the weights' history compared, this rank's failure shared),
//! the commit round (every result checked and compared before anything is
//! applied) and the step's end (its digest kept, or on failure every
//! collective reset and every selection put back).

use super::work::{Ctx, Grad, Received};
use crate::trainer::report::{Fate, StepFailure};
use crate::trainer::state::readable;
use crate::trainer::{Part, StepReport, Trainer};
use sparse_coll::{Transport, agree, agree_or_fail};
use sparse_core::{Backend, Error, Result};
use sparse_select::Selector;
use std::time::Instant;

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// The entry round: the settings, the layers and the weights' history
    /// compared across ranks, with this rank's `local` failure shared.
    pub(super) fn enter(&self, t: &mut dyn Transport, local: Result<()>) -> Result<()> {
        let mut fields = self.cfg.fields();
        fields.push(("layers", self.layers.len() as u64));
        for l in &self.layers {
            fields.push(("layer size", l.spec.len as u64));
            fields.push((
                "layer compressed",
                u64::from(matches!(l.part, Part::Compressed(_))),
            ));
            // The dimensions pick the output layer quantized mode exempts.
            fields.push(("layer dims", l.spec.dims as u64));
        }
        fields.push(("weights", self.history));
        // One word stands for all of them (FNV-1a over the values), so the
        // round stays small at every step; only when it differs do the
        // ranks (all of them, as all see it) exchange the fields to name
        // the one that differs.
        let digest = sparse_core::hash::fnv1a(fields.iter().flat_map(|(_, v)| v.to_le_bytes()));
        match agree_or_fail(t, &[("settings", digest)], local) {
            Err(Error::Disagreement {
                what: "settings", ..
            }) => {
                // Names the field that differs ("weights" for ranks whose
                // weights went apart).
                agree(t, &fields).map_err(readable)?;
                Err(Error::Disagreement {
                    what: "settings",
                    detail: "the ranks' settings hash differently".into(),
                })
            }
            other => other,
        }
    }

    /// A step's end: its results' digest folded into the weights' history,
    /// or, where it failed, every collective back to its first-call state.
    pub(super) fn settle(&mut self, outcome: Result<u64>) -> Result<()> {
        match outcome {
            Ok(digest) => {
                self.history = sparse_core::hash::fnv1a(
                    [self.history, digest].iter().flat_map(|d| d.to_le_bytes()),
                );
                Ok(())
            }
            Err(e) => {
                // A collective that failed part way may have advanced its
                // state (a call count, thresholds, a planner's choice) on
                // some ranks only: every rank whose step fails returns its
                // collectives to their first-call state, so the next step
                // starts in step everywhere.
                for bucket in &mut self.buckets {
                    bucket.comm.reset();
                }
                Err(self.put_back(e))
            }
        }
    }

    /// A step that failed with `e`: its fused selections
    /// ([`Compressed::taken`]) back into their memories, scatter-added
    /// (`+0 + value`, exact), so that every memory holds what the
    /// separate calls would have left: its compensated accumulator,
    /// nothing taken out. Every layer is put back even where one fails;
    /// the error is `e`, or where a layer could not be put back an
    /// [`Error::Corrupt`] naming both.
    fn put_back(&mut self, e: Error) -> Error {
        let mut failed = None;
        for (l, layer) in self.layers.iter_mut().enumerate() {
            if let Part::Compressed(c) = &mut layer.part
                && let Err(why) = super::layer::put_back(&self.b, c)
            {
                failed.get_or_insert((l, why));
            }
        }
        match failed {
            None => e,
            Some((l, why)) => Error::corrupt(
                "training state",
                format!(
                    "the step failed ({e}), and putting layer {l}'s selection back into its \
                     memory failed too ({why}): this rank's residuals are not those before the \
                     step; load a checkpoint"
                ),
            ),
        }
    }

    /// A failed step's end on this rank, by the one rule of every form
    /// of the step: each accepted gradient not yet compensated (`left`)
    /// absorbed into its layer's memory (`layer::absorb`), and what
    /// became of every layer's gradient (`fates`, `Absorbed` for those
    /// the step's local work compensated already) recorded
    /// ([`Trainer::last_failure`]). Returns `e`, or where a layer could
    /// not absorb its gradient an [`Error::Corrupt`] naming both.
    pub(super) fn failed(
        &mut self,
        e: Error,
        left: Vec<Option<Grad<'_, B>>>,
        fates: &[Fate],
        p: f32,
    ) -> Error {
        let mut fates = fates.to_vec();
        let mut broken = None;
        let ctx = Ctx {
            b: &self.b,
            cfg: &self.cfg,
            p,
        };
        for (l, g) in left.into_iter().enumerate() {
            let Some(g) = g else { continue };
            if let Err(why) = super::layer::absorb(&ctx, &mut self.layers[l], g) {
                fates[l] = Fate::Failed;
                broken.get_or_insert((l, why));
            }
        }
        let compressed: Vec<bool> = self
            .layers
            .iter()
            .map(|l| matches!(l.part, Part::Compressed(_)))
            .collect();
        self.failure = Some(StepFailure::of(&fates, &compressed));
        match broken {
            None => e,
            Some((l, why)) => Error::corrupt(
                "training state",
                format!(
                    "the step failed ({e}), and absorbing layer {l}'s gradient into its memory \
                     failed too ({why}): this rank's residuals miss that gradient"
                ),
            ),
        }
    }

    /// The commit round and the update, once the step's collectives ran:
    /// every rank checks every layer's reduced result (or holds its own
    /// failure, `received`'s error), and the ranks compare one digest of
    /// them all; only when every rank holds the same valid results does
    /// any rank apply anything. A step is all or nothing on every rank.
    /// Returns the results' digest.
    pub(super) fn commit(
        &mut self,
        t: &mut dyn Transport,
        received: Result<Vec<Received<B>>>,
        p: f32,
        rep: &mut StepReport,
    ) -> Result<u64> {
        let checked = received
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|r| self.check_received(r));
        let digest = *checked.as_ref().unwrap_or(&0);
        let clock = Instant::now();
        let agreed = agree_or_fail(t, &[("results", digest)], checked.map(drop));
        rep.agree += clock.elapsed();
        agreed?;
        let received = received?;
        sparse_coll::guard(t, |_| self.apply(received, p, rep))?;
        Ok(digest)
    }
}
