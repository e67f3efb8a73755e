//! Evaluating a trained decoder on protocol prompts, and knockouts by mean replacement
//! (`theory/phase-lab.md` §1 and §4).
//!
//! **Scoring.** The scored query is each prompt's [`Prompt::target`] (the last query, or the
//! first under `task.scored_query = "first"`); with teacher forcing, greedy
//! exact match of all answer tokens is every answer token being the argmax (one forward pass),
//! and the answer probability is the product of the answer tokens' probabilities.
//!
//! **Knockouts.** For layer `l` and KV head `h`, the entries that head attends to over the
//! *haystack* (every position before the query block: compressed entries whose window ends
//! there, or for `full` the token keys and values there) are replaced by their mean over a
//! reference set of `reference` prompts with exactly the same layout and fresh tokens, so the
//! head carries no prompt-specific information about the records. The local window and the
//! query block are left alone. The drop in accuracy per residue group gives one row of the map.

use super::phase::Outcome;
use super::protocol::{self, Prompt};
use super::stats::{self, GroupAccuracy};
use crate::model::decoder::{Probe, Replacement};
use crate::model::Decoder;
use crate::task::{Sample, TaskConfig};
use crate::{Error, Result};
use candle_core::{Device, Tensor, D};
use serde::{Deserialize, Serialize};

/// Prompts per forward pass.
pub const CHUNK: usize = 32;

fn tokens(samples: &[&Sample], device: &Device) -> Result<Tensor> {
    let t = samples.first().map(|s| s.tokens.len()).unwrap_or(0);
    let flat: Vec<u32> = samples.iter().flat_map(|s| s.tokens.iter().copied()).collect();
    Ok(Tensor::from_vec(flat, (samples.len(), t), device)?)
}

/// Scores the scored query of each prompt given a probe (intervention) for the batch.
fn score(model: &Decoder, prompts: &[&Prompt], probe: &Probe, device: &Device) -> Result<Vec<Outcome>> {
    let samples: Vec<&Sample> = prompts.iter().map(|p| &p.sample).collect();
    let toks = tokens(&samples, device)?;
    let t = toks.dim(1)?;
    let fwd = model.forward_probe(&toks, probe)?;
    let mut idx = Vec::new();
    let mut targets = Vec::new();
    for (b, p) in prompts.iter().enumerate() {
        let q = p.target();
        for i in 0..q.answer.len() {
            idx.push((b * t + q.answer_pos + i - 1) as u32);
            targets.push(q.answer[i]);
        }
    }
    let per = prompts.first().map(|p| p.target().answer.len()).unwrap_or(1).max(1);
    let n = idx.len();
    let logits = model.logits_at(&fwd, &Tensor::from_vec(idx, n, device)?)?;
    let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
    let pred = logits.argmax(1)?.to_vec1::<u32>()?;
    let logp = logp.to_vec2::<f32>()?;
    Ok(prompts
        .iter()
        .enumerate()
        .map(|(b, p)| {
            let rows = b * per..(b + 1) * per;
            let correct = rows.clone().all(|r| pred[r] == targets[r]);
            let lp: f64 = rows.map(|r| logp[r][targets[r] as usize] as f64).sum();
            Outcome {
                id: p.id,
                group: p.group,
                correct,
                prob: Some(lp.exp()),
                position: Some(p.target_pos),
                depth: Some(p.depth()),
                ..Outcome::default()
            }
        })
        .collect())
}

/// Outcomes of `model` on `prompts`; `progress(done, total)` after every chunk.
pub fn evaluate(model: &Decoder, prompts: &[Prompt], progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<Outcome>> {
    let device = Device::Cpu;
    let mut out = Vec::with_capacity(prompts.len());
    for chunk in prompts.chunks(CHUNK) {
        let refs: Vec<&Prompt> = chunk.iter().collect();
        out.extend(score(model, &refs, &Probe::default(), &device)?);
        progress(out.len(), prompts.len());
    }
    Ok(out)
}

/// Number of attended entries (or tokens, for `full`) of KV head `head` of layer `layer` that
/// lie wholly in the haystack (on that head's grid: staggered presets differ per head or layer).
pub fn haystack_entries(model: &Decoder, task: &TaskConfig, layer: usize, head: usize) -> usize {
    let h = task.haystack_len();
    if model.config().is_full() {
        return h;
    }
    let g = &model.head_spec(layer, head).geometry;
    (0..g.num_windows(task.seq_len())).filter(|&j| g.end(j) < h).count()
}

/// One row of the knockout map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutRow {
    /// Layer.
    pub layer: usize,
    /// KV head.
    pub head: usize,
    /// Accuracy per residue group with the head knocked out.
    pub groups: Vec<GroupAccuracy>,
    /// Clean minus knocked-out accuracy per group, percentage points.
    pub drop_pp: Vec<f64>,
    /// Mean drop over groups, percentage points.
    pub mean_drop_pp: f64,
}

/// The knockout map of a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutMap {
    /// Residue modulus.
    pub modulus: usize,
    /// Reference prompts per prompt.
    pub reference: usize,
    /// Entries replaced per head (haystack entries), of layer 0's head 0: on staggered grids a
    /// head replaces its own grid's count, which may differ by one.
    pub replaced_entries: usize,
    /// Clean accuracy per group on the same prompts.
    pub clean: Vec<GroupAccuracy>,
    /// One row per (layer, KV head), layer-major.
    pub rows: Vec<KnockoutRow>,
}

/// Knockouts of every (layer, KV head) of `model` on `prompts` with `reference` same-layout
/// prompts each (seeded by `seed`); `progress(done, total)` after every chunk.
pub fn knockout(
    model: &Decoder,
    task: &TaskConfig,
    prompts: &[Prompt],
    reference: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<KnockoutMap> {
    if reference == 0 {
        return Err(Error::invalid("reference", "must be at least 1 prompt, got 0"));
    }
    let device = Device::Cpu;
    let cfg = model.config();
    let (n_layer, n_kv) = (cfg.n_layer, cfg.n_kv_head);
    let mut clean: Vec<Outcome> = Vec::new();
    let mut knocked: Vec<Vec<Outcome>> = vec![Vec::new(); n_layer * n_kv];
    let chunk_size = (CHUNK / reference.min(CHUNK)).max(1);
    for chunk in prompts.chunks(chunk_size) {
        let refs: Vec<&Prompt> = chunk.iter().collect();
        clean.extend(score(model, &refs, &Probe::default(), &device)?);
        let mut ref_samples = Vec::with_capacity(chunk.len() * reference);
        for p in chunk {
            ref_samples.extend(protocol::same_layout(task, p, reference, seed)?);
        }
        let ref_refs: Vec<&Sample> = ref_samples.iter().collect();
        let cap = model.forward_probe(&tokens(&ref_refs, &device)?, &Probe { capture: true, replace: None })?;
        let c = chunk.len();
        for (l, layer) in cap.captures.iter().enumerate() {
            let mean = |u: &Tensor| -> Result<Tensor> {
                let (_, h, n, dh) = u.dims4()?;
                Ok(u.reshape((c, reference, h, n, dh))?.mean(1)?)
            };
            let (mk, mv) = (mean(&layer.keys)?, mean(&layer.values)?);
            for h in 0..n_kv {
                let m = haystack_entries(model, task, l, h);
                let pick = |u: &Tensor| -> Result<Tensor> { Ok(u.narrow(1, h, 1)?.squeeze(1)?.narrow(1, 0, m)?) };
                let replace = Replacement { layer: l, head: h, keys: pick(&mk)?, values: pick(&mv)? };
                let probe = Probe { capture: false, replace: Some(replace) };
                knocked[l * n_kv + h].extend(score(model, &refs, &probe, &device)?);
            }
        }
        progress(clean.len(), prompts.len());
    }
    let md = task.residue_modulus;
    let acc = |o: &[Outcome]| stats::group_accuracies(&o.iter().map(|o| (o.group, o.correct)).collect::<Vec<_>>(), md);
    let clean_groups = acc(&clean)?;
    let mut rows = Vec::with_capacity(knocked.len());
    for (i, outcomes) in knocked.iter().enumerate() {
        let groups = acc(outcomes)?;
        let drop_pp: Vec<f64> =
            clean_groups.iter().zip(&groups).map(|(c, k)| 100.0 * (c.accuracy - k.accuracy)).collect();
        let finite: Vec<f64> = drop_pp.iter().copied().filter(|d| d.is_finite()).collect();
        let mean_drop_pp = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
        rows.push(KnockoutRow { layer: i / n_kv, head: i % n_kv, groups, drop_pp, mean_drop_pp });
    }
    let m = haystack_entries(model, task, 0, 0);
    Ok(KnockoutMap { modulus: md, reference, replaced_entries: m, clean: clean_groups, rows })
}

/// The dead heads of a model (`theory/phase-lab.md` §7.5, E7): those whose knockout changes
/// accuracy by at most `max_drop_pp` in absolute value in every cell of every given map (both
/// protocols' maps, where present). With the pre-registered 0 pp, a dead head's knockout leaves
/// every group's accuracy exactly as it was.
pub fn dead_heads(maps: &[&KnockoutMap], max_drop_pp: f64) -> Vec<(usize, usize)> {
    let Some(first) = maps.first() else { return Vec::new() };
    first
        .rows
        .iter()
        .map(|r| (r.layer, r.head))
        .filter(|&(l, h)| {
            maps.iter().all(|m| {
                m.rows
                    .iter()
                    .filter(|r| (r.layer, r.head) == (l, h))
                    .all(|r| r.drop_pp.iter().all(|d| d.abs() <= max_drop_pp))
            })
        })
        .collect()
}
