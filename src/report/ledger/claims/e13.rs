//! E13 (v3 only, `theory/phase-lab.md` §9.7): DeepSeek-V4.1's layout, even above odd. On
//! `dsv41-layout-kv1` the phase effect holds at `S = 4` and, per seed, every even phase's
//! depth-adjusted accuracy (folded by 4, prefix protocol) is above every odd phase's, in at least
//! `required_seeds(n)` seeds. Its spread beside `dsv4-layout-kv1`'s, with the seed-level
//! interval of the difference, is reported, not judged.

use super::arm::{arm_for, seed_records};
use super::claim::{not_run, Claim, Interval, LedgerClaim, SeedLine};
use super::e8::difference;
use super::files::{both_data, both_figs};
use super::judge::{holds, PRIMARY};
use super::parts::{Part, Reported};
use super::words::{level_words, seeds_ours};
use crate::analysis::claims_v3::{even_above_odd, holds_in_enough_seeds, E12_PRESET, E13_PRESET, LAYOUT_STRIDE};
use crate::analysis::phase_test::{adjusted_phase_accuracies, required_seeds};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::SeedCount;
use crate::analysis::verdict::{Rules, Verdict};
use crate::report::ledger::collect::{arms, Arm, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E13;

const CLAIM: &str = "DeepSeek-V4.1's layout: every even residue group above every odd one";

/// The even-above-odd part: each seed's depth-adjusted phase accuracies (prefix, folded by 4).
fn even_part(a: &Arm) -> Part {
    let Some(seeds) = seed_records(a, Protocol::Prefix) else {
        return Part::new(&a.name, Verdict::NotRun, format!("{}: no prefix outcome lines with depths", a.name));
    };
    // The part's own name, so that its seed lines count apart from the effect's part.
    let name = format!("{} even above odd", a.name);
    let mut lines = Vec::new();
    let mut meeting = 0;
    for (r, records) in a.runs.iter().zip(&seeds) {
        let (meets, text) = match adjusted_phase_accuracies(records, LAYOUT_STRIDE) {
            Ok(adj) => {
                let ok = even_above_odd(&adj);
                let each: Vec<String> =
                    adj.iter().enumerate().map(|(p, v)| format!("{p}: {:.1} %", 100.0 * v)).collect();
                (Some(ok), format!("depth-adjusted prefix accuracy by phase {}", each.join(", ")))
            }
            Err(e) => (None, format!("not testable: {e}")),
        };
        meeting += usize::from(meets == Some(true));
        lines.push(SeedLine { arm: name.clone(), seed: r.seed, meets, text });
    }
    let n = a.runs.len();
    let verdict = if holds_in_enough_seeds(meeting, n) { Verdict::Reproduced } else { Verdict::NotReproduced };
    let mut p = Part::new(
        &name,
        verdict,
        format!(
            "{}: every even phase above every odd one (prefix, folded by {LAYOUT_STRIDE}) in {meeting} of {n} seeds (required {})",
            a.name,
            required_seeds(n)
        ),
    );
    p.seeds = lines;
    p
}

impl LedgerClaim for E13 {
    fn id(&self) -> &'static str {
        "E13"
    }

    fn short(&self) -> &'static str {
        "DeepSeek-V4.1 layout: even phases above odd (dsv41-layout-kv1)"
    }

    fn paper(&self) -> &'static str {
        "V4.1-Flash: all even groups above odd, smallest gap"
    }

    fn applies_to(&self, rules: Rules) -> bool {
        rules == Rules::V3
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let Some(a) = arm_for(&arms, E13_PRESET, true) else {
            let mut n = not_run(self, CLAIM, both_data());
            n.measured = "no data yet: the arm dsv41-layout-kv1 was not trained in this run set".into();
            return n;
        };
        let (effect, judged) = holds(a, PRIMARY, LAYOUT_STRIDE);
        let mut parts = vec![effect];
        if judged.is_some() {
            parts.push(even_part(a));
        }
        let mut rep = Reported::default();
        rep.test(a, Protocol::Prefix, LAYOUT_STRIDE, crate::analysis::phase_test::ALPHA);
        match arm_for(&arms, E12_PRESET, true).map(|b| (b, difference(a, b))) {
            Some((b, Ok(([va, vb, d], paired)))) => rep.texts.push(format!(
                "depth-adjusted spread (in-sequence, mean over seeds) {} against {}'s {}, difference {} (seed-level: seeds, then prompt families; {}, {}; reported, not a verdict; the paper: V4.1-Flash has the family's smallest gap)",
                Interval::of_nonneg(&va).words(),
                b.name,
                Interval::of_nonneg(&vb).words(),
                Interval::of(&d).words(),
                SeedCount { seeds: a.runs.len().min(b.runs.len()) }.words(),
                if paired { "paired by seed" } else { "unpaired: the seeds differ" }
            )),
            Some((_, Err(e))) => rep.texts.push(format!("spreads: {e}")),
            None => rep.texts.push("dsv4-layout-kv1 not in the run set: no comparison of spreads".into()),
        }
        let mut claim = Claim::from_parts(
            self,
            CLAIM,
            format!(
                "in-sequence, seeds pooled: dsv41-layout-kv1's phase effect at S = {LAYOUT_STRIDE} holds ({}); and, per seed, every even phase's depth-adjusted accuracy (folded by {LAYOUT_STRIDE}, prefix protocol) is above every odd phase's, in at least required_seeds(n) of its n successful seeds (§9.7); its spread beside dsv4-layout-kv1's, with the seed-level interval of the difference, is reported, not judged",
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
