//! One layer's part of a step: its local work (clipping and weight decay,
//! then a compressed layer's compensation, selection and quantization),
//! and, once every rank holds the same checked result, its update (the
//! residual collection and the step applied; a dense layer's momentum
//! SGD), or, where the step failed, its selection put back.

use super::work::{Ctx, Grad, Outgoing, Ready};
use crate::trainer::{Compressed, Layer, LayerReport, Part, StepReport};
use crate::{Collection, Config, Rule};
use sparse_coll::Reduced;
use sparse_coll::wire::WireValues;
use sparse_core::backend::resolve_non_finite_in;
use sparse_core::encoding::Qsgd;
use sparse_core::{Backend, Error, KeyOrder, Result, Selected, SparseVec};
use sparse_select::{RadixTopK, Selection, Selector};
use std::time::Instant;

/// A layer's local work of a step: clipping and weight decay (on a copy
/// of a caller's gradient buffer), then for a compressed layer
/// compensation, selection of `k` and quantization (nothing taken
/// from its memory yet); a dense layer's gradient downloaded.
pub(super) fn prepare<B: Backend<f32>, S: Selector<B, f32>>(
    ctx: &Ctx<'_, B>,
    k: usize,
    layer: &mut Layer<B, S>,
    g: Grad<'_, B>,
) -> Result<(Ready<B>, LayerReport)> {
    let Ctx { b, cfg, .. } = *ctx;
    let g = transformed(ctx, layer, g)?;
    let g = g.get();
    let compressed = matches!(layer.part, Part::Compressed(_));
    let report = LayerReport {
        compressed,
        len: layer.spec.len,
        sent: if compressed { 0 } else { layer.spec.len },
    };
    let ready = match &mut layer.part {
        Part::Compressed(c) => Ready::Compressed(compress(b, cfg, c, g, k)?),
        Part::Dense { .. } => Ready::Dense(b.download(g)?),
    };
    Ok((ready, report))
}

/// Where a step failed: layer's accepted gradient `g` absorbed into its
/// memory (clipped and decayed as the step's local work does it, then
/// compensated in, nothing taken out), as if the step had sent nothing; a
/// dense layer keeps no residual, so its gradient is dropped.
pub(super) fn absorb<B: Backend<f32>, S>(
    ctx: &Ctx<'_, B>,
    layer: &mut Layer<B, S>,
    g: Grad<'_, B>,
) -> Result<()> {
    if !matches!(layer.part, Part::Compressed(_)) {
        return Ok(());
    }
    let g = transformed(ctx, layer, g)?;
    match &mut layer.part {
        Part::Compressed(c) => c.memory.compensate(ctx.b, g.get()),
        Part::Dense { .. } => Ok(()),
    }
}

/// `g` as a layer's work takes it: DGC's local clipping to `c / sqrt(P)`
/// (the factor from the norm, [`sparse_core::ReduceOps::sum_squares`], on
/// the device) and RGC's weight decay into it (`G += wd w`), on a copy of
/// a caller's buffer.
fn transformed<'g, B: Backend<f32>, S>(
    ctx: &Ctx<'_, B>,
    layer: &Layer<B, S>,
    g: Grad<'g, B>,
) -> Result<Grad<'g, B>> {
    let Ctx { b, cfg, p } = *ctx;
    let factor = match cfg.clip {
        Some(c) => clip_factor(b, g.get(), c / p.sqrt())?,
        None => None,
    };
    let decay = match cfg.rule {
        Rule::Rgc { weight_decay, .. } if weight_decay != 0.0 => Some(weight_decay),
        _ => None,
    };
    if factor.is_none() && decay.is_none() {
        return Ok(g);
    }
    let mut x = g.into_owned(b)?;
    if let Some(f) = factor {
        b.scale(f, &mut x)?;
    }
    if let Some(wd) = decay {
        b.axpy(wd, &layer.w, &mut x)?;
    }
    Ok(Grad::Owned(x))
}

/// The factor that scales `g` down to an L2 norm of at most `max`, if it
/// is above (the norm from [`sparse_core::ReduceOps::sum_squares`], on the
/// device).
fn clip_factor<B: Backend<f32>>(b: &B, g: &B::Buffer<f32>, max: f32) -> Result<Option<f32>> {
    let norm = b.sum_squares(g)?.sqrt();
    Ok((norm > f64::from(max)).then(|| (f64::from(max) / norm) as f32))
}

/// A compressed layer's local work: compensate, select `k`, quantize. Its
/// memory holds the compensated accumulator afterwards, with nothing taken
/// out yet.
fn compress<B: Backend<f32>, S: Selector<B, f32>>(
    b: &B,
    cfg: &Config,
    c: &mut Compressed<B, S>,
    g: &B::Buffer<f32>,
    k: usize,
) -> Result<Outgoing<B>> {
    let n = b.len(g);
    let quantized = cfg.quantized && !c.output;
    if !quantized && k > 0 && c.selector.exact_topk_abs() {
        // A NaN is named as the separate calls name it: the first
        // non-finite entry (an infinity before it included).
        let out = c.memory.compensate_topk(b, g, k);
        if let Some(sel) = resolve_non_finite_in(b, c.memory.accumulator(), out)? {
            return fused(b, cfg, c, sel, n);
        }
    }
    c.memory.compensate(b, g)?;
    let sel = if quantized {
        // RedSync's alternation: the largest values, then the smallest.
        let order = if c.top {
            KeyOrder::Signed
        } else {
            KeyOrder::SignedReversed
        };
        RadixTopK { order }.select(b, c.memory.accumulator(), k)?
    } else {
        c.selector.select(b, c.memory.accumulator(), k)?
    };
    // What is sent is the accumulator at the selected indices, whatever
    // values the selector returned: a selector cannot create or lose
    // gradient mass. `to_sparse` checks the indices (sorted, unique, in
    // range).
    let values = b.gather(c.memory.accumulator(), &sel.indices)?;
    let sel = Selection { values, ..sel };
    let mut sent = sel.to_sparse(b, n)?;
    // Quantization: what is sent is what the codec carries; the exact
    // remainder goes back into the memory (for QSGD without feedback it is
    // lost, as in SparCML's listing).
    let remainder = if quantized {
        let (q, rest) = WireValues::same_sign_mean().split_exact(&sent)?;
        sent = q;
        Some(rest)
    } else {
        qsgd(cfg, c.steps, &mut sent)?
    };
    Ok(Outgoing {
        indices: Some(sel.indices),
        sent,
        remainder,
        quantized,
    })
}

/// A compressed layer's local work after its memory compensated and
/// selected in one ([`crate::Memory::compensate_topk`]): the selection
/// kept in the layer as taken (put back if the step fails), its pairs
/// downloaded, an infinity among them (the accumulator overflowed) an
/// error naming its index, then QSGD as in [`compress`].
fn fused<B: Backend<f32>, S>(
    b: &B,
    cfg: &Config,
    c: &mut Compressed<B, S>,
    sel: Selected<B, f32>,
    n: usize,
) -> Result<Outgoing<B>> {
    let taken = c.taken.insert(sel);
    let mut sent = SparseVec::new(n, b.download(&taken.indices)?, b.download(&taken.values)?)?;
    // The selection holds every infinity of the accumulator where it holds
    // fewer than `k` (the largest magnitudes), else the first `k` of them
    // (the tie rule): its first is the accumulator's first.
    if let Some(at) = sent.values().iter().position(|x| !x.is_finite()) {
        return Err(Error::NonFinite {
            index: sent.indices()[at] as usize,
        });
    }
    let remainder = qsgd(cfg, c.steps, &mut sent)?;
    Ok(Outgoing {
        indices: None,
        sent,
        remainder,
        quantized: false,
    })
}

/// QSGD's codes for `sent` where the settings ask for them: `sent`
/// becomes what the codec carries, and the exact remainder is returned
/// where it goes back into the memory (without feedback it is lost, as in
/// SparCML's listing).
fn qsgd(cfg: &Config, steps: u64, sent: &mut SparseVec<f32>) -> Result<Option<SparseVec<f32>>> {
    let n = sent.dim();
    Ok(if let Some((params, feedback)) = cfg.qsgd {
        let seed = params.seed() ^ steps.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut bytes = Vec::new();
        let rest = Qsgd(params.with_seed(seed)).encode_with_remainder(sent.values(), &mut bytes)?;
        let decoded: Vec<f32> = sent
            .values()
            .iter()
            .zip(&rest)
            .map(|(&x, &r)| x - r)
            .collect();
        let rest = SparseVec::new(n, sent.indices().to_vec(), rest)?;
        *sent = SparseVec::new(n, sent.indices().to_vec(), decoded)?;
        feedback.then_some(rest)
    } else {
        None
    })
}

/// A compressed layer's update once every rank holds the same checked
/// result: take the selection from the memory, collect, apply.
pub(super) fn compressed_apply<B: Backend<f32>, S: Selector<B, f32>>(
    ctx: &Ctx<'_, B>,
    c: &mut Compressed<B, S>,
    w: &mut B::Buffer<f32>,
    x: Outgoing<B>,
    red: Reduced<f32>,
    rep: &mut StepReport,
) -> Result<(SparseVec<f32>, SparseVec<f32>)> {
    let Ctx { b, cfg, p } = *ctx;
    let Outgoing {
        indices,
        sent,
        remainder,
        quantized,
    } = x;
    // The step applied is `scale * sum / P`.
    let scale = match cfg.rule {
        Rule::TopK => 1.0,
        Rule::Rgc { .. } => cfg.lr,
    };
    let clock = Instant::now();
    // Taken from the memory only once every layer's collective has
    // succeeded on every rank: a failed step leaves every selection in
    // its memory, not lost. A fused selection is out already: where a
    // global budget kept fewer of its entries, it goes back whole first
    // and the kept ones leave as in the separate calls; either way the
    // memory's `remove` runs (a momentum's masking).
    // The selection stays in `taken` until it is back or removed, so
    // that a failure here is put back with the step's others.
    match (&c.taken, indices) {
        (Some(taken), None) => {
            c.memory.remove(b, &taken.indices)?;
            c.taken = None;
        }
        (taken, Some(kept)) => {
            if let Some(t) = taken {
                b.scatter_add(c.memory.accumulator_mut(), &t.indices, &t.values)?;
                c.taken = None;
            }
            c.memory.remove(b, &kept)?;
        }
        (None, None) => {
            return Err(Error::invalid(
                "layer",
                "a fused selection whose layer holds none",
            ));
        }
    }
    if quantized {
        c.top = !c.top;
    }
    c.steps = c.steps.wrapping_add(1);
    collect(b, cfg.collection, c, &sent, &red)?;
    // What quantization removed goes back after the collection, which in
    // the paper's variant clears the result's positions.
    if let Some(rest) = remainder {
        c.memory.restore(b, &rest)?;
    }
    if red.result.nnz() > 0 {
        let step: Vec<f32> = red
            .result
            .values()
            .iter()
            .map(|&x| -scale * x / p)
            .collect();
        let idx = b.upload(red.result.indices())?;
        let val = b.upload(&step)?;
        b.scatter_add(w, &idx, &val)?;
    }
    rep.apply += clock.elapsed();
    Ok((sent, red.dropped))
}

/// The residual collection after a compressed layer's collective
/// returned `red` for what this rank `sent`.
fn collect<B: Backend<f32>, S: Selector<B, f32>>(
    b: &B,
    collection: Collection,
    c: &mut Compressed<B, S>,
    sent: &SparseVec<f32>,
    red: &Reduced<f32>,
) -> Result<()> {
    if collection != Collection::Paper {
        // Global residual collection: what the collective cut stays here.
        return c.memory.restore(b, &red.dropped);
    }
    // SparDL's paper variant: outside the result this rank keeps its
    // own accumulator (what it sent comes back), inside it keeps only
    // what the collective dropped here.
    let n = sent.dim();
    let in_result = |i: &u32| red.result.indices().binary_search(i).is_ok();
    let outside: Vec<(u32, f32)> = sent.iter().filter(|(i, _)| !in_result(i)).collect();
    if red.result.nnz() > 0 {
        b.mask(c.memory.accumulator_mut(), &b.upload(red.result.indices())?)?;
    }
    let inside: Vec<(u32, f32)> = red.dropped.iter().filter(|(i, _)| in_result(i)).collect();
    for part in [outside, inside] {
        let (idx, val): (Vec<u32>, Vec<f32>) = part.into_iter().unzip();
        c.memory.restore(b, &SparseVec::new(n, idx, val)?)?;
    }
    Ok(())
}

/// A dense layer's update from the reduced sum: momentum SGD on the mean
/// (`b = m b + G; w -= lr b`, or `w -= lr (G + m b)` with Nesterov; plain
/// SGD for top-k SGD).
pub(super) fn dense_apply<B: Backend<f32>, S>(
    b: &B,
    cfg: &Config,
    layer: &mut Layer<B, S>,
    sum: &[f32],
    p: f32,
    rep: &mut StepReport,
) -> Result<()> {
    let clock = Instant::now();
    let Part::Dense { u } = &mut layer.part else {
        return Err(Error::invalid(
            "layer",
            "a compressed layer in a dense bucket",
        ));
    };
    let mean: Vec<f32> = sum.iter().map(|&x| x / p).collect();
    let mut mean = b.upload(&mean)?;
    match cfg.rule {
        Rule::Rgc {
            momentum, nesterov, ..
        } if momentum != 0.0 => {
            b.scale(momentum, u)?;
            b.axpy(1.0, &mean, u)?;
            if nesterov {
                // w -= lr (G + m b), the sum formed first as PyTorch does.
                b.axpy(momentum, u, &mut mean)?;
                b.axpy(-cfg.lr, &mean, &mut layer.w)?;
            } else {
                b.axpy(-cfg.lr, u, &mut layer.w)?;
            }
        }
        _ => b.axpy(-cfg.lr, &mean, &mut layer.w)?,
    }
    rep.apply += clock.elapsed();
    Ok(())
}

/// Where a step failed: a fused selection ([`Compressed::taken`]) back
/// into its memory, scatter-added (`+0 + value`, exact), so that the
/// memory holds what the separate calls would have left: its compensated
/// accumulator, nothing taken out.
pub(super) fn put_back<B: Backend<f32>, S>(b: &B, c: &mut Compressed<B, S>) -> Result<()> {
    match c.taken.take() {
        Some(t) => b.scatter_add(c.memory.accumulator_mut(), &t.indices, &t.values),
        None => Ok(()),
    }
}
