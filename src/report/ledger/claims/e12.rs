//! E12 (v3 only, `theory/phase-lab.md` §9.7): DeepSeek-V4's layout on `dsv4-layout-kv1` (four
//! layers: CSA, HCA16, CSA, HCA16; one KV head each, so a KV-head knockout mean-replaces a whole
//! layer's entries). (a) The phase effect holds at `S = 4` and the corrected period scan declares
//! 4, as E10 judges it; (b) *HCA layers contribute little*: per seed, the largest in-sequence
//! knockout drop over the HCA (odd) layers is at most `E12_HCA_SHARE` times the largest over the
//! CSA (even) layers, whose drop must reach `E12_MIN_CSA_DROP_PP` (a seed below it is not
//! testable); (b) holds in at least `required_seeds(n)` of the arm's `n` seeds, a seed that is
//! not testable counting as one that does not meet it.

use super::arm::{arm_for, stat_seed};
use super::claim::{not_run, Claim, Interval, LedgerClaim, Measure, SeedLine};
use super::files::{both_data, both_figs};
use super::gaps::require_period;
use super::judge::{holds, PRIMARY};
use super::parts::{Part, Reported};
use super::words::{level_words, seeds_ours};
use crate::analysis::claims_v3::{
    e12_seed, holds_in_enough_seeds, is_hca_layer, LayoutSeed, E12_HCA_SHARE, E12_MIN_CSA_DROP_PP, E12_PRESET,
    LAYOUT_STRIDE,
};
use crate::analysis::phase_test::required_seeds;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{column_sorted, two_stage, BootInterval, SeedCount, SEED_LEVEL_ROUNDS};
use crate::analysis::verdict::{Rules, Verdict};
use crate::report::ledger::collect::{arms, Arm, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E12;

const CLAIM: &str =
    "DeepSeek-V4's layout: the pattern repeats with period 4, and the HCA layers contribute little to retrieval";

/// The mean over seeds of `values` with its seed-level interval (the seeds resampled; each seed's
/// drop is read on its own prompts, held fixed).
fn seed_mean(values: &[f64], seed: u64) -> Option<BootInterval> {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let reps = two_stage(&[values.len()], false, SEED_LEVEL_ROUNDS, seed, |_, i, _| Ok(values[i])).ok()?;
    Some(BootInterval::from_sorted(mean, &column_sorted(&reps, 0)))
}

/// Part (b): each seed's largest CSA and HCA knockout drops (in-sequence).
fn hca_part(a: &Arm) -> Part {
    let name = format!("{} HCA share", a.name);
    let mut lines = Vec::new();
    let mut judged: Vec<LayoutSeed> = Vec::new();
    for r in &a.runs {
        let read = match r.knockouts.get(&Protocol::InSequence) {
            None => Err("no in-sequence knockout map".to_string()),
            Some(k) => {
                let rows: Vec<(usize, f64)> = k.map.rows.iter().map(|row| (row.layer, row.mean_drop_pp)).collect();
                e12_seed(&rows, |l| is_hca_layer(&a.kernel, l)).map_err(|e| e.to_string())
            }
        };
        let (meets, text) = match read {
            Err(e) => {
                return Part::new(&name, Verdict::NotRun, format!("{}: seed {}: {e}", a.name, r.seed));
            }
            Ok(s) => {
                judged.push(s);
                let words = format!(
                    "largest knockout drop over CSA layers {:.1} pp, over HCA layers {:.1} pp",
                    s.csa_drop_pp, s.hca_drop_pp
                );
                if s.testable() {
                    (Some(s.meets()), words)
                } else {
                    (None, format!("not testable: {words}, the CSA drop below {E12_MIN_CSA_DROP_PP} pp (no layer's knockout reaches retrieval)"))
                }
            }
        };
        lines.push(SeedLine { arm: name.clone(), seed: r.seed, meets, text });
    }
    let n = a.runs.len();
    let meeting = judged.iter().filter(|s| s.meets()).count();
    let testable = judged.iter().filter(|s| s.testable()).count();
    let verdict = if holds_in_enough_seeds(meeting, n) {
        Verdict::Reproduced
    } else if testable < required_seeds(n) {
        // Fewer seeds can be judged than the rule needs: the data cannot decide it.
        Verdict::NotRun
    } else {
        Verdict::NotReproduced
    };
    let mut text = format!(
        "{}: HCA drop at most {E12_HCA_SHARE} x CSA drop in {meeting} of {n} seeds (required {}; {testable} testable)",
        a.name,
        required_seeds(n)
    );
    if verdict == Verdict::NotRun {
        text += ": not testable in enough seeds";
    }
    let mut p = Part::new(&name, verdict, text);
    for (what, values) in [
        ("largest CSA-layer knockout drop (in-sequence)", judged.iter().map(|s| s.csa_drop_pp).collect::<Vec<f64>>()),
        ("largest HCA-layer knockout drop (in-sequence)", judged.iter().map(|s| s.hca_drop_pp).collect()),
    ] {
        if let Some(b) = seed_mean(&values, stat_seed(a)) {
            let v = Interval::of(&b);
            p.text +=
                &format!("; {what}: {} ({}, seeds resampled)", v.words(), SeedCount { seeds: values.len() }.words());
            p.measures.push(Measure {
                arm: a.name.clone(),
                protocol: Protocol::InSequence.name().into(),
                what: what.into(),
                groups: 0,
                value: v,
                noise_floor_pp: None,
                p: None,
                paper_pp: None,
                decides: false,
                seeds: Some(values.len()),
                per_seed_pp: a.runs.iter().map(|r| r.seed).zip(values.iter().copied()).collect(),
            });
        }
    }
    p.seeds = lines;
    p
}

impl LedgerClaim for E12 {
    fn id(&self) -> &'static str {
        "E12"
    }

    fn short(&self) -> &'static str {
        "DeepSeek-V4 layout: period 4, HCA layers contribute little"
    }

    fn paper(&self) -> &'static str {
        "period 4; HCA contributes little"
    }

    fn applies_to(&self, rules: Rules) -> bool {
        rules == Rules::V3
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let Some(a) = arm_for(&arms, E12_PRESET, true) else {
            let mut n = not_run(self, CLAIM, both_data());
            n.measured = "no data yet: the arm dsv4-layout-kv1 was not trained in this run set".into();
            return n;
        };
        let (mut effect, judged) = holds(a, PRIMARY, LAYOUT_STRIDE);
        if judged.is_some() {
            require_period(&mut effect, a, PRIMARY, LAYOUT_STRIDE);
        }
        let parts = vec![effect, hca_part(a)];
        let mut rep = Reported::default();
        rep.test(a, Protocol::Prefix, LAYOUT_STRIDE, crate::analysis::phase_test::ALPHA);
        let mut claim = Claim::from_parts(
            self,
            CLAIM,
            format!(
                "(a) in-sequence, seeds pooled: dsv4-layout-kv1's phase effect at S = {LAYOUT_STRIDE} holds ({}) and the corrected period scan declares {LAYOUT_STRIDE} (as E10); (b) per seed, the largest accuracy drop (clean minus knocked, in-sequence, scored families) over the HCA layers' knockouts is at most {E12_HCA_SHARE} times the largest over the CSA layers', and that CSA drop is at least {E12_MIN_CSA_DROP_PP} pp (a seed below it is not testable); (b) holds in at least required_seeds(n) of the n successful seeds (§9.7); both drops' seed-level intervals are reported",
                level_words(a.rules, 1)
            ),
            parts,
            rep,
        );
        claim.ours = seeds_ours(&claim);
        claim.figures = both_figs();
        claim.data = both_data();
        claim
    }
}
