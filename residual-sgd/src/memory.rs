//! The residual memory of a compressed layer (GRACE's "memory"): it
//! compensates each new gradient into an accumulator, the compressor
//! selects from that accumulator, and the update takes the sent entries out
//! and puts back whatever quantization or the collective cut.

use crate::Rule;
use sparse_core::backend::Feedback;
use sparse_core::state::{Scope, State};
use sparse_core::{Backend, Error, Result, Selected, SparseVec};

/// The memory of one compressed layer, replaceable
/// ([`crate::Trainer::with_memory`]). Everything lives in backend buffers.
///
/// A step calls [`Memory::compensate`] with the gradient (weight decay
/// already added), lets the compressor select from
/// [`Memory::accumulator`], calls [`Memory::remove`] with the selected
/// indices and [`Memory::restore`] with what comes back (quantization
/// remainders, the collective's `dropped`).
pub trait Memory<B: Backend<f32>>: Send {
    /// Compensate: fold this step's gradient `g` into the accumulator.
    ///
    /// # Errors
    /// Backend errors.
    fn compensate(&mut self, b: &B, g: &B::Buffer<f32>) -> Result<()>;
    /// Compensation fused with the exact top-k by magnitude: folds `g` in
    /// as [`Memory::compensate`] does, selects the exact top `k` of the
    /// accumulator ([`sparse_core::SelectOps::topk_abs`]'s order and tie
    /// rule) and takes them out of it: their entries become `+0.0` and
    /// the selection holds their values from before
    /// ([`sparse_core::SelectOps::accumulate_topk`]: on `backend-cuda`
    /// three passes over the accumulator and one round trip, where the
    /// separate calls take four to six passes).
    ///
    /// The trainer calls it for a layer whose selector is the exact top-k
    /// by magnitude ([`sparse_select::Selector::exact_topk_abs`]) and
    /// `k > 0`, in place of [`Memory::compensate`] and the selector, and
    /// then [`Memory::remove`] as usual once the step succeeded (a
    /// momentum's factor masking happens there; the accumulator's entries
    /// are zero already). Where the step fails, or a global bucket budget
    /// keeps fewer of the entries, the trainer scatter-adds the selection
    /// back into [`Memory::accumulator_mut`] (`+0 + value`: exact, but
    /// for a `-0.0` entry, which comes back as `+0.0`).
    ///
    /// `Ok(None)` where this memory or the backend cannot fuse (the
    /// default; a backend whose `accumulate_topk` is
    /// [`Error::Unsupported`]): then nothing has changed and the trainer
    /// compensates, selects and removes in separate calls. A memory that
    /// fuses must leave exactly the state those calls would.
    ///
    /// # Errors
    /// Backend errors; [`Error::NonFinite`] if the accumulator holds NaN
    /// (it holds the compensated gradient then, nothing taken out).
    fn compensate_topk(
        &mut self,
        b: &B,
        g: &B::Buffer<f32>,
        k: usize,
    ) -> Result<Option<Selected<B, f32>>> {
        let _ = (b, g, k);
        Ok(None)
    }
    /// The accumulator the compressor selects from (the residual `V`).
    fn accumulator(&self) -> &B::Buffer<f32>;
    /// The accumulator, to change in place (SparDL's paper collection
    /// clears it at the result's indices).
    fn accumulator_mut(&mut self) -> &mut B::Buffer<f32>;
    /// Update: the entries at `indices` were sent; they leave the memory.
    ///
    /// # Errors
    /// Backend errors.
    fn remove(&mut self, b: &B, indices: &B::Buffer<u32>) -> Result<()> {
        b.mask(self.accumulator_mut(), indices)
    }
    /// Update: `back` returns into the accumulator.
    ///
    /// # Errors
    /// Backend errors.
    fn restore(&mut self, b: &B, back: &SparseVec<f32>) -> Result<()> {
        if back.nnz() == 0 {
            return Ok(());
        }
        let idx = b.upload(back.indices())?;
        let val = b.upload(back.values())?;
        b.scatter_add(self.accumulator_mut(), &idx, &val)
    }
    /// What this memory keeps across steps, as data
    /// ([`sparse_core::state`]). The default saves the accumulator as `v`
    /// ([`Scope::Summed`]: a rank's share of the gradient mass not applied
    /// yet), which is the whole state of a memory whose only buffer it is;
    /// a memory with more state (a momentum) overrides both methods.
    ///
    /// # Errors
    /// Backend errors.
    fn save_state(&self, b: &B) -> Result<State> {
        let mut s = State::new(MEMORY, 1);
        s.put_f32s("v", Scope::Summed, &b.download(self.accumulator())?);
        Ok(s)
    }
    /// Restores what [`Memory::save_state`] saved: checked first (kind,
    /// version, length, every value finite), then the accumulator replaced
    /// whole, bit for bit.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for another kind or version; [`Error::Corrupt`]
    /// naming what disagrees (a NaN or an infinity: its index and value);
    /// backend errors.
    fn load_state(&mut self, b: &B, s: &State) -> Result<()> {
        s.expect(MEMORY, 1)?;
        let v = s.f32s("v", b.len(self.accumulator()))?;
        check_loaded_finite(v, &format!("{MEMORY}: residual v"))?;
        let v = b.upload(v)?;
        *self.accumulator_mut() = v;
        Ok(())
    }
}

/// A fused selection, or `None` where the backend does not fuse
/// ([`Error::Unsupported`], returned before anything changes).
fn fused<B: Backend<f32>>(out: Result<Selected<B, f32>>) -> Result<Option<Selected<B, f32>>> {
    match out {
        Ok(s) => Ok(Some(s)),
        Err(Error::Unsupported { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Checks that the saved values `v` (the entry `what`) are finite.
///
/// # Errors
/// [`Error::Corrupt`] naming the entry, the first index and its value.
pub(crate) fn check_loaded_finite(v: &[f32], what: &str) -> Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::corrupt(
            "training state",
            format!(
                "{what}[{i}] is {}: the state holds a diverged run (or one damaged before it \
                 was saved); load an earlier checkpoint",
                v[i]
            ),
        )),
    }
}

/// The state kind of [`Memory`]'s default state (an accumulator alone).
pub const MEMORY: &str = "residual_sgd::Memory";

/// The state kind of [`Momentum`]'s state.
pub const MOMENTUM: &str = "residual_sgd::Momentum";

/// Plain error feedback: `V += gain g`. SparCML's top-k SGD uses
/// `gain = lr` (`acc = eps + lr g`); RGC without momentum `gain = 1`.
pub struct Residual<B: Backend<f32>> {
    v: B::Buffer<f32>,
    gain: f32,
}

impl<B: Backend<f32>> Residual<B> {
    /// A zero residual of `len` entries.
    ///
    /// # Errors
    /// Backend errors.
    pub fn new(b: &B, len: usize, gain: f32) -> Result<Self> {
        Ok(Self {
            v: b.zeros(len)?,
            gain,
        })
    }
}

impl<B: Backend<f32>> Memory<B> for Residual<B> {
    fn compensate(&mut self, b: &B, g: &B::Buffer<f32>) -> Result<()> {
        b.axpy(self.gain, g, &mut self.v)
    }
    fn compensate_topk(
        &mut self,
        b: &B,
        g: &B::Buffer<f32>,
        k: usize,
    ) -> Result<Option<Selected<B, f32>>> {
        let feedback = Feedback::Plain { gain: self.gain };
        fused(b.accumulate_topk(&mut self.v, g, feedback, k))
    }
    fn accumulator(&self) -> &B::Buffer<f32> {
        &self.v
    }
    fn accumulator_mut(&mut self) -> &mut B::Buffer<f32> {
        &mut self.v
    }
}

/// RedSync's momentum correction (RGC): `U = m U + G; V = V + U`, or in
/// Nesterov's form `U = m (U + G); V = V + U + G`; with factor masking the
/// sent entries leave the momentum too (`U[idx] = 0`).
pub struct Momentum<B: Backend<f32>> {
    u: B::Buffer<f32>,
    v: B::Buffer<f32>,
    momentum: f32,
    nesterov: bool,
    masking: bool,
}

impl<B: Backend<f32>> Momentum<B> {
    /// Zero momentum and residual of `len` entries.
    ///
    /// # Errors
    /// Backend errors.
    pub fn new(b: &B, len: usize, momentum: f32, nesterov: bool, masking: bool) -> Result<Self> {
        Ok(Self {
            u: b.zeros(len)?,
            v: b.zeros(len)?,
            momentum,
            nesterov,
            masking,
        })
    }
    /// The momentum `U`.
    pub fn momentum(&self) -> &B::Buffer<f32> {
        &self.u
    }
}

impl<B: Backend<f32>> Memory<B> for Momentum<B> {
    fn compensate(&mut self, b: &B, g: &B::Buffer<f32>) -> Result<()> {
        if self.nesterov {
            b.axpy(1.0, g, &mut self.u)?;
            b.scale(self.momentum, &mut self.u)?;
            b.axpy(1.0, &self.u, &mut self.v)?;
            b.axpy(1.0, g, &mut self.v)
        } else {
            b.scale(self.momentum, &mut self.u)?;
            b.axpy(1.0, g, &mut self.u)?;
            b.axpy(1.0, &self.u, &mut self.v)
        }
    }
    /// The classical form only (`U = m U + G; V += U`, which
    /// [`Feedback::Momentum`] computes); Nesterov's form compensates and
    /// selects in separate calls.
    fn compensate_topk(
        &mut self,
        b: &B,
        g: &B::Buffer<f32>,
        k: usize,
    ) -> Result<Option<Selected<B, f32>>> {
        if self.nesterov {
            return Ok(None);
        }
        let feedback = Feedback::Momentum {
            u: &mut self.u,
            m: self.momentum,
        };
        fused(b.accumulate_topk(&mut self.v, g, feedback, k))
    }
    fn accumulator(&self) -> &B::Buffer<f32> {
        &self.v
    }
    fn accumulator_mut(&mut self) -> &mut B::Buffer<f32> {
        &mut self.v
    }
    fn remove(&mut self, b: &B, indices: &B::Buffer<u32>) -> Result<()> {
        b.mask(&mut self.v, indices)?;
        if self.masking {
            b.mask(&mut self.u, indices)?;
        }
        Ok(())
    }
    /// The residual `v` and the momentum `u`, both [`Scope::Summed`]: `u`
    /// is a rank's running sum of its gradients, which flows linearly into
    /// `v`, so summing it over ranks keeps what the ranks will still add.
    /// The settings (momentum, Nesterov, masking) are checked on load.
    fn save_state(&self, b: &B) -> Result<State> {
        let mut s = State::new(MOMENTUM, 1);
        s.put_f32s("v", Scope::Summed, &b.download(&self.v)?)
            .put_f32s("u", Scope::Summed, &b.download(&self.u)?)
            .put_u64(
                "momentum",
                Scope::Shared,
                u64::from(self.momentum.to_bits()),
            )
            .put_bool("nesterov", Scope::Shared, self.nesterov)
            .put_bool("masking", Scope::Shared, self.masking);
        Ok(s)
    }
    fn load_state(&mut self, b: &B, s: &State) -> Result<()> {
        s.expect(MOMENTUM, 1)?;
        let m = s.u64("momentum")?;
        let saved = (
            u32::try_from(m).map_or(f32::NAN, f32::from_bits),
            s.bool("nesterov")?,
            s.bool("masking")?,
        );
        let mine = (self.momentum, self.nesterov, self.masking);
        let hint = "build the memory with the settings the state was saved with";
        if u64::from(mine.0.to_bits()) != m {
            let saved =
                u32::try_from(m).map_or_else(|_| format!("{m:#x}"), |_| saved.0.to_string());
            return Err(Error::mismatch(
                format!("{MOMENTUM}'s momentum"),
                saved,
                mine.0,
                hint,
            ));
        }
        if saved.1 != mine.1 {
            return Err(Error::mismatch(
                format!("{MOMENTUM}'s Nesterov form"),
                saved.1,
                mine.1,
                hint,
            ));
        }
        if saved.2 != mine.2 {
            return Err(Error::mismatch(
                format!("{MOMENTUM}'s factor masking"),
                saved.2,
                mine.2,
                hint,
            ));
        }
        let n = b.len(&self.v);
        let (v, u) = (s.f32s("v", n)?, s.f32s("u", n)?);
        check_loaded_finite(v, &format!("{MOMENTUM}: residual v"))?;
        check_loaded_finite(u, &format!("{MOMENTUM}: momentum u"))?;
        let (v, u) = (b.upload(v)?, b.upload(u)?);
        self.v = v;
        self.u = u;
        Ok(())
    }
}

/// The memory a rule uses for a layer of `len` entries: [`Residual`] with
/// gain `lr` for top-k SGD, gain 1 for RGC without momentum, [`Momentum`]
/// otherwise.
///
/// # Errors
/// Backend errors.
pub fn for_rule<B: Backend<f32> + 'static>(
    b: &B,
    rule: Rule,
    lr: f32,
    len: usize,
) -> Result<Box<dyn Memory<B>>> {
    Ok(match rule {
        Rule::TopK => Box::new(Residual::new(b, len, lr)?),
        Rule::Rgc { momentum: 0.0, .. } => Box::new(Residual::new(b, len, 1.0)?),
        Rule::Rgc {
            momentum,
            nesterov,
            factor_masking,
            ..
        } => Box::new(Momentum::new(b, len, momentum, nesterov, factor_masking)?),
    })
}
