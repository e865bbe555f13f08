//! A trainer's state as data: [`Trainer::save_state`] and
//! [`Trainer::load_state`], and the words of a setting that differs.

use super::{Part, Trainer, parts};
use crate::memory::check_loaded_finite;
use sparse_coll::{Transport, agree, agree_or_fail};
use sparse_core::state::{Scope, State};
use sparse_core::{Backend, Error, Result};
use sparse_select::Selector;

/// FNV-1a of every layer's weights in a trainer state (what every rank
/// must load alike).
fn shared_digest(s: &State) -> u64 {
    let bits = s
        .children()
        .filter(|(n, _)| n.starts_with("layer."))
        .flat_map(|(_, l)| {
            l.entries()
                .filter(|(n, _, _)| *n == "w")
                .flat_map(|(_, _, t)| match t {
                    sparse_core::state::Tensor::F32(v) => {
                        v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                    }
                    _ => Vec::new(),
                })
                .collect::<Vec<u32>>()
        });
    sparse_core::hash::fnv1a(bits.flat_map(u32::to_le_bytes))
}

/// The collective state a bucket's layers but its first save.
const IN_BUCKET: &str = "residual_sgd::InBucket";

/// The state kind of [`Trainer::save_state`].
pub const TRAINER_STATE: &str = "residual_sgd::Trainer";

/// The value of the setting `name` ([`crate::Config`]'s fields) that
/// travels as `v`, in words: floats as numbers (`2`, not `0x40000000`).
pub(super) fn setting_text(name: &str, v: u64) -> String {
    let f32_of =
        |v: u64| u32::try_from(v).map_or_else(|_| v.to_string(), |b| f32::from_bits(b).to_string());
    match name {
        "density" => f64::from_bits(v).to_string(),
        "lr" | "momentum" | "weight decay" => f32_of(v),
        "clip" if v == u64::MAX => "none".into(),
        "clip" => f32_of(v),
        "rule" => match v {
            0 => "top-k SGD".into(),
            1 => "RGC".into(),
            _ => v.to_string(),
        },
        "qsgd" if v == 0 => "none".into(),
        "qsgd" => format!("{} bits, buckets of {}", v & 0xff, v >> 8),
        "collection" => match v {
            0 => "local".into(),
            1 => "paper".into(),
            _ => v.to_string(),
        },
        "bucket cap" if v == 0 => "none (a call per layer)".into(),
        "bucket cap" => format!("{v} bytes"),
        "bucket budget" => match v {
            0 => "per layer".into(),
            1 => "global".into(),
            _ => v.to_string(),
        },
        "bucket order" => match v {
            0 => "backward".into(),
            1 => "list".into(),
            _ => v.to_string(),
        },
        "nesterov" | "factor masking" | "qsgd feedback" | "quantized" | "dense" => match v {
            0 => "false".into(),
            1 => "true".into(),
            _ => v.to_string(),
        },
        _ => v.to_string(),
    }
}

/// A disagreement about a setting, with each rank's value in words
/// ([`setting_text`]: `rank 0: 0.1, rank 1: 0.2`, not two bit patterns).
pub(super) fn readable(e: Error) -> Error {
    let Error::Disagreement { what, detail } = e else {
        return e;
    };
    let detail = detail
        .split(", ")
        .map(|part| {
            let value = part
                .split_once(": ")
                .and_then(|(rank, v)| Some((rank, setting_text(what, v.parse().ok()?))));
            match value {
                Some((rank, v)) => format!("{rank}: {v}"),
                None => part.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    Error::Disagreement { what, detail }
}

/// `e`, a part's error while layer `l` (`name`) loaded, naming the layer.
fn in_layer(l: usize, name: &str, e: Error) -> Error {
    match e {
        Error::Corrupt { what, detail } => Error::Corrupt {
            what,
            detail: format!("layer {l} ({name}): {detail}"),
        },
        Error::Mismatch {
            what,
            saved,
            here,
            hint,
        } => Error::Mismatch {
            what: format!("layer {l} ({name}): {what}"),
            saved,
            here,
            hint,
        },
        other => other,
    }
}

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// Everything that makes this rank's next step what it will be, as
    /// data ([`sparse_core::state`]): the weights and the weight-history
    /// digest, each dense layer's momentum, and each compressed layer's
    /// quantized-mode side, step count (QSGD's seed), memory
    /// ([`crate::Memory::save_state`]), selector ([`Selector::save_state`])
    /// and collective ([`sparse_coll::SparseAllreduce::save_state`]; in a
    /// bucket, its first layer holds the bucket's collective and the others
    /// a marker that they are in it), with
    /// the settings
    /// ([`crate::Config`], density included: DGC's warm-up moves it) and
    /// each layer's shape, which [`Trainer::load_state`] checks. Restored
    /// into a trainer built alike, the next steps are bit for bit those
    /// this one would take.
    ///
    /// # Errors
    /// Backend errors; a part's own.
    pub fn save_state(&self) -> Result<State> {
        let mut s = State::new(TRAINER_STATE, 1);
        s.put_u64("history", Scope::Shared, self.history).put_u64(
            "layers",
            Scope::Shared,
            self.layers.len() as u64,
        );
        let mut cfg = State::new("residual_sgd::Config", 1);
        for (name, v) in self.cfg.fields() {
            cfg.put_u64(name, Scope::Shared, v);
        }
        s.put_child("config", cfg);
        for (l, layer) in self.layers.iter().enumerate() {
            let mut ls = State::new("residual_sgd::Layer", 2);
            ls.put_u64("len", Scope::Shared, layer.spec.len as u64)
                .put_u64("dims", Scope::Shared, layer.spec.dims as u64)
                .put_f32s("w", Scope::Shared, &self.b.download(&layer.w)?);
            match &layer.part {
                Part::Dense { u } => {
                    ls.put_bool("compressed", Scope::Shared, false).put_f32s(
                        "u",
                        Scope::Shared,
                        &self.b.download(u)?,
                    );
                }
                Part::Compressed(c) => {
                    let bucket = &self.buckets[c.bucket];
                    // A bucket's collective is saved with its first layer;
                    // the others hold an empty state in its place.
                    let comm = if bucket.layers[0] == l {
                        bucket.comm.save_state()?
                    } else {
                        State::new(IN_BUCKET, 1)
                    };
                    ls.put_bool("compressed", Scope::Shared, true)
                        .put_child("parts", State::new(parts(c, bucket), 1))
                        .put_bool("top", Scope::Shared, c.top)
                        .put_u64("steps", Scope::Shared, c.steps)
                        .put_child("memory", c.memory.save_state(&self.b)?)
                        .put_child("select", c.selector.save_state()?)
                        .put_child("comm", comm);
                }
            }
            s.put_child(format!("layer.{l}"), ls);
        }
        Ok(s)
    }

    /// Restores [`Trainer::save_state`]'s state on every rank of `t`
    /// (each its own), all or nothing: the settings other than the
    /// density, the number of layers, each layer's length, dimensions and
    /// whether it is compressed must be this trainer's
    /// ([`Error::Mismatch`], values as numbers); the weights, dense
    /// momenta and residuals must be finite; each part must accept its
    /// state; and every rank must have loaded the same settings (the
    /// density included) and weights. Any failure on any rank is an error
    /// on every rank ([`Error::PeerError`] on the others), and then no
    /// rank's trainer has changed.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the setting or shape that differs, with
    /// both values; [`Error::Corrupt`] naming a non-finite value or what
    /// else is wrong; [`Error::Disagreement`] naming the setting the ranks
    /// loaded differently, with each rank's value ("loaded weights" for
    /// weights); [`Error::PeerError`]; backend and transport errors.
    pub fn load_state(&mut self, t: &mut dyn Transport, s: &State) -> Result<()> {
        let undo = self.save_state();
        let mut local = undo
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|_| self.apply_state(s));
        if let (Err(_), Ok(undo)) = (&local, &undo) {
            // A rollback that fails too is this rank's error, still shared
            // below: no rank may return before the others hear of it.
            if let Err(e) = self.apply_state(undo) {
                local = Err(e);
            }
        }
        // The weights and the settings every rank loaded must be the
        // same: their digests are fields of the round.
        let (weights, settings) = match &local {
            Ok(()) => (
                self.history ^ shared_digest(s),
                sparse_core::hash::fnv1a(
                    self.cfg.fields().iter().flat_map(|(_, v)| v.to_le_bytes()),
                ),
            ),
            Err(_) => (0, 0),
        };
        let fields = [("loaded weights", weights), ("loaded settings", settings)];
        let mut shared = agree_or_fail(t, &fields, local.clone());
        if let Err(Error::Disagreement {
            what: "loaded settings",
            ..
        }) = &shared
        {
            // Every rank is here (none failed): name the setting, with
            // each rank's value.
            shared = agree(t, &self.cfg.fields()).map_err(readable).and(shared);
        }
        if shared.is_err()
            && local.is_ok()
            && let Ok(undo) = &undo
        {
            self.apply_state(undo)?;
        }
        shared
    }

    /// Checks the header of `s` against this trainer, then assigns it
    /// layer by layer (a part that refuses its state stops it part way:
    /// [`Trainer::load_state`] puts the previous state back).
    fn apply_state(&mut self, s: &State) -> Result<()> {
        s.expect(TRAINER_STATE, 1)?;
        let cfg = self.check_settings(s.child("config")?)?;
        let n = s.u64("layers")?;
        if n != self.layers.len() as u64 {
            return Err(Error::mismatch(
                "the number of layers",
                n,
                self.layers.len(),
                "build the trainer with the layers the state was saved with",
            ));
        }
        let history = s.u64("history")?;
        self.check_layers(s)?;
        for (l, layer) in self.layers.iter_mut().enumerate() {
            let ls = s.child(&format!("layer.{l}"))?;
            let len = layer.spec.len;
            match &mut layer.part {
                Part::Dense { u } => {
                    let new_u = self.b.upload(ls.f32s("u", len)?)?;
                    *u = new_u;
                }
                Part::Compressed(c) => {
                    let (top, steps) = (ls.bool("top")?, ls.u64("steps")?);
                    let named = |e| in_layer(l, &layer.spec.name, e);
                    c.memory
                        .load_state(&self.b, ls.child("memory")?)
                        .map_err(named)?;
                    c.selector.load_state(ls.child("select")?).map_err(named)?;
                    let bucket = &mut self.buckets[c.bucket];
                    if bucket.layers[0] == l {
                        bucket.comm.load_state(ls.child("comm")?).map_err(named)?;
                    }
                    c.top = top;
                    c.steps = steps;
                }
            }
            layer.w = self.b.upload(ls.f32s("w", len)?)?;
        }
        self.history = history;
        self.cfg = cfg;
        Ok(())
    }

    /// The settings of the saved `cfg`: this trainer's but the density,
    /// which is the saved one.
    fn check_settings(&self, cfg: &State) -> Result<crate::Config> {
        cfg.expect("residual_sgd::Config", 1)?;
        let mut density = None;
        for (name, mine) in self.cfg.fields() {
            // States saved before buckets existed have no bucket fields:
            // theirs were none.
            let saved = match cfg.u64(name) {
                Err(_) if name.starts_with("bucket ") => 0,
                other => other?,
            };
            if name == "density" {
                density = Some(f64::from_bits(saved));
            } else if saved != mine {
                return Err(Error::mismatch(
                    format!("setting {name:?}"),
                    setting_text(name, saved),
                    setting_text(name, mine),
                    "build the trainer with the settings the state was saved with (the \
                     density alone may differ: it is loaded)",
                ));
            }
        }
        match density {
            Some(d) => self.cfg.with_density(d),
            None => Ok(self.cfg),
        }
    }

    /// Checks every layer's header in `s` (shape, parts, finite weights
    /// and dense momentum) before anything changes.
    fn check_layers(&self, s: &State) -> Result<()> {
        for (l, layer) in self.layers.iter().enumerate() {
            let name = &layer.spec.name;
            let ls = s.child(&format!("layer.{l}"))?;
            ls.expect("residual_sgd::Layer", 2)?;
            let shape = (ls.u64("len")?, ls.u64("dims")?, ls.bool("compressed")?);
            let mine = (
                layer.spec.len as u64,
                layer.spec.dims as u64,
                matches!(layer.part, Part::Compressed(_)),
            );
            if shape != mine {
                return Err(Error::mismatch(
                    format!("layer {l} ({name}): (length, dimensions, compressed)"),
                    format!("{shape:?}"),
                    format!("{mine:?}"),
                    "build the trainer with the layers and settings the state was saved with",
                ));
            }
            check_loaded_finite(
                ls.f32s("w", layer.spec.len)?,
                &format!("layer {l} ({name}): w"),
            )?;
            match &layer.part {
                Part::Dense { .. } => check_loaded_finite(
                    ls.f32s("u", layer.spec.len)?,
                    &format!("layer {l} ({name}): momentum u"),
                )?,
                Part::Compressed(c) => {
                    // A stateless selector or collective saves an empty
                    // state, which any other stateless one would accept:
                    // their names and parameters tell them apart.
                    let (saved, mine) =
                        (ls.child("parts")?.kind(), parts(c, &self.buckets[c.bucket]));
                    if saved != mine {
                        return Err(Error::mismatch(
                            format!("layer {l} ({name}): the selector and collective"),
                            saved,
                            mine,
                            "build the trainer with the parts the state was saved with",
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
