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
