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
use crate::kernel::tensor::SlotKnock;
use crate::model::decoder::{Probe, Replacement};
use crate::model::Decoder;
use crate::stop::Stop;
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
            let lp: f64 = rows.clone().map(|r| logp[r][targets[r] as usize] as f64).sum();
            let predicted: Vec<String> = rows.map(|r| pred[r].to_string()).collect();
            Outcome {
                id: p.id,
                group: p.group,
                correct,
                prob: Some(lp.exp()),
                position: Some(p.target_pos),
                depth: Some(p.depth()),
                predicted: Some(predicted.join(" ")),
                ..Outcome::default()
            }
        })
        .collect())
}

/// Outcomes of `model` on `prompts`; `progress(done, total)` after every chunk; `stop` polled
/// before every chunk ([`Error::Interrupted`] when requested).
pub fn evaluate(
    model: &Decoder,
    prompts: &[Prompt],
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<Vec<Outcome>> {
    let device = Device::Cpu;
    let mut out = Vec::with_capacity(prompts.len());
    for chunk in prompts.chunks(CHUNK) {
        stop.check("eval")?;
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

/// What a knockout row mean-replaces (`theory/phase-lab.md` §4 and §8.9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Intervention {
    /// One KV head's haystack entries (§4): rows are (layer, KV head).
    #[default]
    KvHead,
    /// One window slot's gated contribution `a_i * (C_i x_i)` to every compressed entry of a
    /// layer, all KV heads at once (§8.9's offset knockout): rows are (layer, slot `0..W`).
    WindowSlot,
}

impl Intervention {
    /// Its name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Intervention::KvHead => "kv-head",
            Intervention::WindowSlot => "window-slot",
        }
    }

    /// §8.9's intervention for a model: window slots where a layer has one KV head or the
    /// kernel shares keys and values (`dsv4-csa`), KV heads otherwise (and always for `full`,
    /// which has no windows, and for a layer layout whose layers differ in window, where a KV
    /// head's row with one KV head per layer knocks out the layer's whole compressed path:
    /// `theory/kernels.md`, "Layer layouts").
    pub fn for_model(config: &crate::model::ModelConfig, spec: &crate::kernel::spec::KernelSpec) -> Self {
        if !config.is_full() && spec.common_window().is_some() && (config.n_kv_head == 1 || spec.shared_kv) {
            Intervention::WindowSlot
        } else {
            Intervention::KvHead
        }
    }
}

/// One row of the knockout map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutRow {
    /// Layer.
    pub layer: usize,
    /// KV head of a [`Intervention::KvHead`] row; 0 on a window-slot row, which knocks every
    /// KV head of the layer (its unit is [`KnockoutRow::slot`]).
    pub head: usize,
    /// The window slot of a [`Intervention::WindowSlot`] row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<usize>,
    /// Entries this row replaces per prompt (a KV-head row: that head's haystack entries, on its
    /// own grid; a window-slot row: every entry of the layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_entries: Option<usize>,
    /// Accuracy per residue group with the head knocked out.
    pub groups: Vec<GroupAccuracy>,
    /// Clean minus knocked-out accuracy per group, percentage points.
    pub drop_pp: Vec<f64>,
    /// Mean drop over groups, percentage points.
    pub mean_drop_pp: f64,
    /// Per-prompt knocked outcomes in the order of [`KnockoutMap::ids`], `1` correct, `0`
    /// wrong (maps made before they were kept have none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub knocked: String,
}

impl KnockoutRow {
    /// The row's name: `L{layer}.H{head}`, or `L{layer}.S{slot}` for a window slot.
    pub fn label(&self) -> String {
        match self.slot {
            Some(i) => format!("L{}.S{i}", self.layer),
            None => format!("L{}.H{}", self.layer, self.head),
        }
    }
}

/// The knockout map of a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutMap {
    /// What the rows replace.
    #[serde(default)]
    pub intervention: Intervention,
    /// Residue modulus.
    pub modulus: usize,
    /// Reference prompts per prompt.
    pub reference: usize,
    /// Entries replaced per head (haystack entries), of layer 0's head 0: on staggered grids a
    /// head replaces its own grid's count, which may differ by one (each row's own count is
    /// [`KnockoutRow::replaced_entries`]).
    pub replaced_entries: usize,
    /// Clean accuracy per group on the same prompts.
    pub clean: Vec<GroupAccuracy>,
    /// One row per (layer, KV head) or (layer, slot), layer-major.
    pub rows: Vec<KnockoutRow>,
    /// The prompts' ids, in the order of every per-prompt string (`family = id mod per_group`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<usize>,
    /// The prompts' residue groups, in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_groups: Vec<usize>,
    /// Per-prompt clean outcomes, `1` correct, `0` wrong.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub clean_correct: String,
}

/// `1` for a correct outcome, `0` for a wrong one, in order.
fn bits(outcomes: &[Outcome]) -> String {
    outcomes.iter().map(|o| if o.correct { '1' } else { '0' }).collect()
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
    knockout_by(model, task, prompts, reference, seed, Intervention::KvHead, progress, &Stop::never())
}

/// Knockouts by `intervention` (its rows: every (layer, KV head), or every (layer, window
/// slot)) of `model` on `prompts` with `reference` same-layout prompts each (seeded by
/// `seed`); `progress(done, total)` after every chunk; `stop` polled before every forward pass.
/// The references go through the model [`CHUNK`] sequences at a time whatever `reference` is,
/// so memory does not grow with it (the mean is their sum over the chunks, divided once).
#[allow(clippy::too_many_arguments)]
pub fn knockout_by(
    model: &Decoder,
    task: &TaskConfig,
    prompts: &[Prompt],
    reference: usize,
    seed: u64,
    intervention: Intervention,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<KnockoutMap> {
    if reference == 0 {
        return Err(Error::invalid("reference", "must be at least 1 prompt, got 0"));
    }
    let device = Device::Cpu;
    let cfg = model.config();
    let n_layer = cfg.n_layer;
    let slots = intervention == Intervention::WindowSlot;
    if slots && cfg.is_full() {
        return Err(Error::invalid("intervention", "window-slot knockouts need a compressed preset, got full"));
    }
    // Rows per layer: KV heads, or window slots.
    let per_layer = if slots { model.spec().needs_common_window("window-slot knockouts")? } else { cfg.n_kv_head };
    let mut clean: Vec<Outcome> = Vec::new();
    let mut knocked: Vec<Vec<Outcome>> = vec![Vec::new(); n_layer * per_layer];
    let chunk_size = (CHUNK / reference.min(CHUNK)).max(1);
    for chunk in prompts.chunks(chunk_size) {
        stop.check("knockout")?;
        let refs: Vec<&Prompt> = chunk.iter().collect();
        clean.extend(score(model, &refs, &Probe::default(), &device)?);
        let means = reference_means(model, task, chunk, reference, seed, slots, stop)?;
        for (l, (mk, mv)) in means.iter().enumerate() {
            if slots {
                for i in 0..per_layer {
                    let knock = SlotKnock {
                        slot: i,
                        keys: mk.narrow(0, i, 1)?.squeeze(0)?,
                        values: Some(mv.narrow(0, i, 1)?.squeeze(0)?),
                    };
                    let probe = Probe { knock_slot: Some((l, knock)), ..Probe::default() };
                    knocked[l * per_layer + i].extend(score(model, &refs, &probe, &device)?);
                }
                continue;
            }
            for h in 0..per_layer {
                let m = haystack_entries(model, task, l, h);
                let pick = |u: &Tensor| -> Result<Tensor> { Ok(u.narrow(1, h, 1)?.squeeze(1)?.narrow(1, 0, m)?) };
                let replace = Replacement { layer: l, head: h, keys: pick(mk)?, values: pick(mv)? };
                let probe = Probe { replace: Some(replace), ..Probe::default() };
                knocked[l * per_layer + h].extend(score(model, &refs, &probe, &device)?);
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
        let (layer, unit) = (i / per_layer, i % per_layer);
        let (head, slot, replaced) = if slots {
            (0, Some(unit), model.head_spec(layer, 0).geometry.num_windows(task.seq_len()))
        } else {
            (unit, None, haystack_entries(model, task, layer, unit))
        };
        rows.push(KnockoutRow {
            layer,
            head,
            slot,
            replaced_entries: Some(replaced),
            groups,
            drop_pp,
            mean_drop_pp,
            knocked: bits(outcomes),
        });
    }
    let m = haystack_entries(model, task, 0, 0);
    Ok(KnockoutMap {
        intervention,
        modulus: md,
        reference,
        replaced_entries: m,
        clean: clean_groups,
        rows,
        ids: clean.iter().map(|o| o.id).collect(),
        prompt_groups: clean.iter().map(|o| o.group).collect(),
        clean_correct: bits(&clean),
    })
}

/// Per layer, the mean over each prompt's `reference` same-layout references of what a
/// knockout replaces: the captured keys and values `[c, H, n, dh]` (or, with `slots`, each
/// window slot's contribution `[W, c, n, H*dh]`), for the `c` prompts of `chunk`. The references
/// run at most [`CHUNK`] sequences per forward pass, one prompt's at a time when they are more
/// (`chunk` then holds one prompt), summed and divided once.
fn reference_means(
    model: &Decoder,
    task: &TaskConfig,
    chunk: &[Prompt],
    reference: usize,
    seed: u64,
    slots: bool,
    stop: &Stop,
) -> Result<Vec<(Tensor, Tensor)>> {
    let device = Device::Cpu;
    let c = chunk.len();
    let mut ref_samples = Vec::with_capacity(c * reference);
    for p in chunk {
        ref_samples.extend(protocol::same_layout(task, p, reference, seed)?);
    }
    let capture = Probe { capture: true, capture_slots: slots, ..Probe::default() };
    // Either every prompt's references in one pass (c * reference <= CHUNK, as before), or
    // one prompt (c = 1) whose references are split into passes of CHUNK.
    let per_pass = if c * reference <= CHUNK { c * reference } else { CHUNK };
    let mut sums: Vec<(Tensor, Tensor)> = Vec::new();
    for (pass, part) in ref_samples.chunks(per_pass).enumerate() {
        if pass > 0 {
            stop.check("knockout")?;
        }
        let part: Vec<&Sample> = part.iter().collect();
        // Rows of this pass: `g` prompts with `per` references each.
        let (g, per) = if c * reference <= CHUNK { (c, reference) } else { (1, part.len()) };
        let cap = model.forward_probe(&tokens(&part, &device)?, &capture)?;
        for (l, layer) in cap.captures.iter().enumerate() {
            let (k, v) = if slots {
                let Some(contrib) = &layer.slots else {
                    return Err(Error::invalid("intervention", format!("layer {l} has no window slots to knock out")));
                };
                // `[W, g*per, n, H*dh]` -> summed over each prompt's references: `[W, g, n, H*dh]`.
                let sum = |u: &Tensor| -> Result<Tensor> {
                    let (w, _, n, hd) = u.dims4()?;
                    Ok(u.reshape((w, g, per, n, hd))?.sum(2)?)
                };
                (sum(&contrib.keys)?, sum(&contrib.values)?)
            } else {
                // `[g*per, H, n, dh]` -> `[g, H, n, dh]`.
                let sum = |u: &Tensor| -> Result<Tensor> {
                    let (_, h, n, dh) = u.dims4()?;
                    Ok(u.reshape((g, per, h, n, dh))?.sum(1)?)
                };
                (sum(&layer.keys)?, sum(&layer.values)?)
            };
            // Detached: a sum that kept its operands' graphs would hold every pass's forward.
            let (k, v) = (k.detach(), v.detach());
            match sums.get_mut(l) {
                None => sums.push((k, v)),
                Some((sk, sv)) => {
                    *sk = (&*sk + &k)?;
                    *sv = (&*sv + &v)?;
                }
            }
        }
    }
    // Times 1/n, as candle's `mean` does: the same bits as the one-pass mean of before.
    let scale = 1f64 / reference as f64;
    sums.into_iter().map(|(k, v)| Ok(((k * scale)?, (v * scale)?))).collect()
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
        .filter(|r| r.slot.is_none())
        .map(|r| (r.layer, r.head))
        .filter(|&(l, h)| {
            maps.iter().all(|m| {
                m.rows
                    .iter()
                    .filter(|r| r.slot.is_none() && (r.layer, r.head) == (l, h))
                    .all(|r| r.drop_pp.iter().all(|d| d.abs() <= max_drop_pp))
            })
        })
        .collect()
}
