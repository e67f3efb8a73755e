//! What the phase claims read of an arm (`theory/phase-lab.md` §7.3, §8.2): which arm it is,
//! its seeds' records, and the seeds the training-success rule excluded (an arm none of whose
//! seeds trained, and the training budgets of compared arms).

use super::parts::Part;
use crate::analysis::phase_test::{NllRecord, PhaseRecord};
use crate::analysis::protocol::Protocol;
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::{Arm, RunData};

/// What a claim says of a model whose per-prompt outcomes are missing.
pub(super) const NO_OUTCOMES: &str = "not testable: no per-prompt outcomes; rerun eval";

/// Whether a run is the full-attention baseline (the model config's one predicate).
pub(super) fn is_full(r: &RunData) -> bool {
    r.config.model.is_full()
}

/// Whether an arm is full attention.
pub(super) fn arm_is_full(a: &Arm) -> bool {
    a.runs.iter().any(|r| is_full(r))
}

/// Whether some seed of an arm was evaluated.
pub(super) fn evaluated(a: &Arm) -> bool {
    a.runs.iter().any(|r| !r.evals.is_empty())
}

/// The part of an arm none of whose seeds trained under the v2 rules (every seed excluded by
/// §8.2's rule): not run, with what the rule made of each seed; `None` for any other arm.
pub(super) fn untrained_part(a: &Arm) -> Option<Part> {
    if !a.runs.is_empty() || a.excluded.is_empty() {
        return None;
    }
    let seeds: Vec<String> = a
        .excluded
        .iter()
        .map(|(r, o)| {
            let acc = r.metrics.as_ref().map(|m| format!("{:.1} %", 100.0 * m.final_eval.accuracy));
            format!("seed {} {} ({})", r.seed, acc.unwrap_or_else(|| "-".into()), o.words())
        })
        .collect();
    Some(Part::new(
        &a.name,
        Verdict::NotRun,
        format!(
            "{}: not run: 0 successful seeds, {} excluded by the training-success rule ({}): {}",
            a.name,
            a.excluded.len(),
            a.rules.training_section(),
            seeds.join(", ")
        ),
    ))
}

/// The arm named `name` whose seeds all failed the training-success rule, if any.
pub(super) fn untrained_arm<'a>(arms: &'a [Arm<'a>], name: &str) -> Option<&'a Arm<'a>> {
    arms.iter().find(|a| a.name == name && untrained_part(a).is_some())
}

/// Whether an arm's preset puts its KV heads or layers on different grids (issue 30).
pub(super) fn on_staggered_grids(a: &Arm) -> bool {
    a.kernel.stagger != crate::kernel::spec::Stagger::None
}

/// Whether an arm has one KV head per layer (the capacity arm of E3).
pub(super) fn one_head(a: &Arm) -> bool {
    a.runs.iter().all(|r| r.config.model.n_kv_head == 1)
}

/// The evaluated arm of `preset` with (`one_head`) or without one KV head per layer, preferring
/// the arm named after the preset.
pub(super) fn arm_for<'a>(arms: &'a [Arm<'a>], preset: &str, one: bool) -> Option<&'a Arm<'a>> {
    let mut c = arms.iter().filter(|a| a.preset == preset && one_head(a) == one && evaluated(a));
    let all: Vec<&Arm> = c.by_ref().collect();
    all.iter().find(|a| a.name == preset).or(all.first()).copied()
}

/// The arm's residue modulus `M`.
pub(super) fn modulus(a: &Arm) -> usize {
    a.runs.iter().chain(a.excluded.iter().map(|e| &e.0)).map(|r| r.config.task.residue_modulus).next().unwrap_or(1)
}

/// The seed of every resampled statistic: the arm's evaluation seed.
pub(super) fn stat_seed(a: &Arm) -> u64 {
    a.runs.iter().flat_map(|r| r.evals.values()).map(|e| e.eval_seed).next().unwrap_or(0)
}

/// Every seed's records under `p` (seeds in collection order), or `None` when a seed lacks them.
pub(super) fn seed_records(a: &Arm, p: Protocol) -> Option<Vec<Vec<PhaseRecord>>> {
    a.runs.iter().map(|r| r.records.get(&p).cloned()).collect()
}

/// Every seed's continuous-test records under `p`, or `None` when a seed lacks them.
pub(super) fn nll_records(a: &Arm, p: Protocol) -> Option<Vec<Vec<NllRecord>>> {
    a.runs.iter().map(|r| r.nll.get(&p).cloned()).collect()
}

/// Every seed's prompt families under `p` (aligned with [`seed_records`]), or `None` when a
/// seed lacks them.
pub(super) fn seed_families(a: &Arm, p: Protocol) -> Option<Vec<Vec<usize>>> {
    a.runs.iter().map(|r| r.families.get(&p).cloned()).collect()
}

/// Whether two arms share their seed numbers in the same order (a comparison is then paired by
/// seed, issue 38).
pub(super) fn same_seeds(a: &Arm, b: &Arm) -> bool {
    a.runs.iter().map(|r| r.seed).eq(b.runs.iter().map(|r| r.seed))
}

/// The seeds of an arm with how many trained longer (v2's extensions, §8.2), in words: `k of n
/// seeds extended` (issue 38: a comparison states unequal training budgets).
pub(super) fn extended_words(a: &Arm) -> (usize, String) {
    let ext = |r: &RunData| r.metrics.as_ref().is_some_and(|m| !m.extensions.is_empty());
    let k = a.runs.iter().filter(|r| ext(r)).count();
    let kx = a.excluded.iter().filter(|e| ext(e.0)).count();
    let extra = if a.excluded.is_empty() {
        String::new()
    } else {
        format!(" ({} of {} with the excluded)", k + kx, a.runs.len() + a.excluded.len())
    };
    (k, format!("{} extended in {k} of {} seeds{extra}", a.name, a.runs.len()))
}

/// The training budgets of two compared arms in words, when they differ (the fraction of seeds
/// extended), else `None`.
pub(super) fn budget_difference(a: &Arm, b: &Arm) -> Option<String> {
    let ((ka, wa), (kb, wb)) = (extended_words(a), extended_words(b));
    let fa = ka as f64 / a.runs.len().max(1) as f64;
    let fb = kb as f64 / b.runs.len().max(1) as f64;
    (fa != fb).then(|| format!("unequal training budgets: {wa}, {wb}"))
}
