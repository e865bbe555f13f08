//! What a step reports: [`StepReport`], and [`LayerReport`] per layer.

use sparse_coll::Traffic;
use sparse_core::SparseVec;
use std::time::Duration;

/// What one step did, on this rank.
#[derive(Debug, Clone, Default)]
pub struct StepReport {
    /// Per layer, what this rank sent (empty for dense layers).
    pub sent: Vec<SparseVec<f32>>,
    /// Per layer, what the collective dropped and the residual took back.
    pub dropped: Vec<SparseVec<f32>>,
    /// Per layer, whether it was compressed and how much of it was sent.
    pub layers: Vec<LayerReport>,
    /// This rank's traffic over the step from its entry round on (that
    /// round not counted): every compressed layer's or bucket's collective, the dense
    /// allreduces and the commit round.
    pub traffic: Traffic,
    /// Time spent selecting (and updating residuals before it).
    pub select: Duration,
    /// Time spent in the collectives.
    pub communicate: Duration,
    /// Time spent applying the updates.
    pub apply: Duration,
    /// Time spent in the step's two agreement rounds: the entry round and
    /// the commit round, each a small allgather among all ranks that also
    /// waits for the slowest rank to arrive: what the all-or-nothing step
    /// costs over the collectives.
    pub agree: Duration,
}

/// One layer's part of a step ([`StepReport::layers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerReport {
    /// Whether the layer was compressed (else it went through the dense
    /// allreduce, whole).
    pub compressed: bool,
    /// The layer's parameters.
    pub len: usize,
    /// The entries this rank sent: the selection's size for a compressed
    /// layer, `len` for a dense one.
    pub sent: usize,
}

impl LayerReport {
    /// The density this rank sent, `sent / len` (1 for a dense layer, 0
    /// for an empty one).
    pub fn density(&self) -> f64 {
        if self.len == 0 {
            0.0
        } else {
            self.sent as f64 / self.len as f64
        }
    }
}

/// What a failed step did with this rank's gradients
/// ([`crate::Trainer::last_failure`]), by the one rule every form of the
/// step keeps ([`crate::Trainer::step_buffers`], "A failed step"): weights
/// and dense momenta stay as they were, and every gradient the trainer
/// accepted for a compressed layer is absorbed into that layer's memory
/// (compensated in, nothing taken out), as if the step had sent nothing.
/// So after a failed step the batch is dropped, not retried: its
/// gradients are in the residuals already, and a retry would count them
/// twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepFailure {
    /// Compressed layers whose gradient is in the layer's memory.
    pub absorbed: Vec<usize>,
    /// Dense layers whose gradient was accepted and dropped: a dense layer
    /// keeps no residual (its weights and momentum are as before).
    pub dropped_dense: Vec<usize>,
    /// Layers whose gradient the trainer refused (another length, NaN or
    /// infinity): it is in no memory.
    pub refused: Vec<usize>,
    /// Layers whose gradient never reached the trainer: not pushed by a
    /// pipelined step's producer, or the step failed in its entry round
    /// before the producer ran.
    pub not_received: Vec<usize>,
    /// Layers whose own local work failed on this rank (a residual that
    /// overflowed, a backend error): the memory holds what that work left
    /// (its compensation, where that ran).
    pub failed: Vec<usize>,
}

/// What became of one layer's gradient in a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// In the layer's memory (dense: dropped).
    Absorbed,
    Refused,
    NotReceived,
    Failed,
}

impl StepFailure {
    /// The record of each layer's `fate`; `compressed[l]` says which layers
    /// have a memory.
    pub(crate) fn of(fates: &[Fate], compressed: &[bool]) -> Self {
        let mut f = Self::default();
        for (l, (&fate, &c)) in fates.iter().zip(compressed).enumerate() {
            match fate {
                Fate::Absorbed if c => f.absorbed.push(l),
                Fate::Absorbed => f.dropped_dense.push(l),
                Fate::Refused => f.refused.push(l),
                Fate::NotReceived => f.not_received.push(l),
                Fate::Failed => f.failed.push(l),
            }
        }
        f
    }
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the step failed on this rank: weights and momenta as before; "
        )?;
        let parts = [
            (
                &self.absorbed,
                "absorbed into their residuals (drop the batch: a retry would count it twice)",
            ),
            (&self.dropped_dense, "of dense layers dropped"),
            (&self.refused, "refused"),
            (&self.not_received, "never received"),
            (
                &self.failed,
                "failed in their own local work (their memories hold what it left)",
            ),
        ];
        let mut first = true;
        for (layers, what) in parts {
            if layers.is_empty() {
                continue;
            }
            if !first {
                write!(f, "; ")?;
            }
            first = false;
            write!(f, "the gradients of layers {layers:?} {what}")?;
        }
        if first {
            write!(f, "no layers")?;
        }
        Ok(())
    }
}
