//! E7: gates drift toward static concentration during training, with key and value gates at
//! adjacent offsets, judged by the pre-registered rule of `theory/phase-lab.md` §7.5 on what
//! each head *reads* from each offset (`analysis::gates::Reads`), from step 0, dead heads
//! excluded, per seed.

use super::claim::{not_run, Claim, LedgerClaim, SeedLine};
use super::parts::{Part, Reported};
use super::words::seeds_ours;
use crate::analysis::eval::{dead_heads, KnockoutMap};
use crate::analysis::gates::head_drifts;
use crate::analysis::phase_test::required_seeds;
use crate::analysis::verdict::{Verdict, DEAD_HEAD_MAX_DROP_PP, E7_MIN_DRIFT_OFFSETS};
use crate::report::ledger::collect::{arms, Arm, Collected, RunData};

/// The claim (registered in [`super::LEDGER`]).
pub struct E7;

/// What one seed shows (`Some(meets)`, or `None` when the rule does not apply: some live head
/// drifted but none of the drifted heads has a value branch, so "at least half with value peak
/// = key peak + 1" is 0 of 0), or why it cannot be judged (no reads, or no step-0 snapshot).
fn seed_part(r: &RunData) -> std::result::Result<(Option<bool>, String), String> {
    let g = r.gates.as_ref().ok_or("no gates")?;
    if g.snapshots.first().map(|s| s.step) != Some(0) {
        return Err("no step-0 snapshot".into());
    }
    let drifts = head_drifts(&g.snapshots);
    if drifts.is_empty() {
        return Err("no reads recorded".into());
    }
    let maps: Vec<&KnockoutMap> = r.knockouts.values().map(|k| &k.map).collect();
    let dead = dead_heads(&maps, DEAD_HEAD_MAX_DROP_PP);
    let live: Vec<_> = drifts.iter().filter(|d| !dead.contains(&(d.layer, d.head))).collect();
    let drifted: Vec<_> = live.iter().filter(|d| d.drift >= E7_MIN_DRIFT_OFFSETS).collect();
    let with_value: Vec<_> = drifted.iter().filter(|d| d.value_peak.is_some()).collect();
    let adjacent = with_value.iter().filter(|d| d.value_peak == Some(d.key_peak + 1)).count();
    // §7.5: some live head drifted *and*, among drifted heads, at least half have the value peak
    // one offset after the key peak. No drifted head fails the first half; drifted heads none
    // of which has a value branch leave the second half undefined (0/0): not applicable, never
    // a pass.
    let meets = if drifted.is_empty() {
        Some(false)
    } else if with_value.is_empty() {
        None
    } else {
        Some(2 * adjacent >= with_value.len())
    };
    let largest = live.iter().map(|d| d.drift).fold(f64::NEG_INFINITY, f64::max);
    let dead_list: Vec<String> = dead.iter().map(|(l, h)| format!("L{l}.H{h}")).collect();
    Ok((
        meets,
        format!(
            "seed {}: {}/{} live heads drifted (largest fall {largest:.2} offsets), {adjacent}/{} with value peak = key peak + 1{}; dead: {}",
            r.config.train.seed,
            drifted.len(),
            live.len(),
            with_value.len(),
            if meets.is_none() { " (no drifted head has a value branch: the rule does not apply)" } else { "" },
            if dead_list.is_empty() { "none".to_string() } else { dead_list.join(", ") }
        ),
    ))
}

/// One arm's part: the rule in at least `required_seeds(n)` of its `n` judged seeds; not
/// applicable when the rule applies to none of its judgeable seeds (no value branch).
fn part(a: &Arm) -> Part {
    let (mut ok, mut judged, mut inapplicable) = (0, 0, 0);
    let mut seeds = Vec::new();
    let mut lines = Vec::new();
    for r in a.runs.iter().filter(|r| r.gates.is_some()) {
        let (meets, text) = match seed_part(r) {
            Ok((meets, text)) => {
                match meets {
                    Some(m) => {
                        judged += 1;
                        ok += usize::from(m);
                    }
                    None => inapplicable += 1,
                }
                (meets, text)
            }
            Err(why) => {
                (None, format!("seed {}: not testable ({why}; rerun train and analyze gates)", r.config.train.seed))
            }
        };
        lines.push(SeedLine { arm: a.name.clone(), seed: r.seed, meets, text: text.clone() });
        seeds.push(text);
    }
    let need = required_seeds(judged);
    let verdict = if judged == 0 && inapplicable > 0 {
        Verdict::NotApplicable
    } else if judged == 0 {
        Verdict::NotRun
    } else if ok >= need {
        Verdict::Reproduced
    } else {
        Verdict::NotReproduced
    };
    let tail = if verdict == Verdict::NotApplicable {
        format!("not applicable: no drifted head of any seed has a value branch ({inapplicable} seed(s))")
    } else {
        format!("{ok}/{judged} seeds meet the rule (need {need})")
    };
    Part { seeds: lines, ..Part::new(&a.name, verdict, format!("{}: {}; {tail}", a.name, seeds.join("; "))) }
}

impl LedgerClaim for E7 {
    fn id(&self) -> &'static str {
        "E7"
    }

    fn short(&self) -> &'static str {
        "gates drift to static concentration; value peak = key peak + 1"
    }

    fn paper(&self) -> &'static str {
        "some gates drift; V one offset after K"
    }

    fn check(&self, c: &Collected) -> Claim {
        let claim =
            "some gates drift toward static concentration during training, key and value gates at adjacent offsets";
        let arms = arms(c);
        let gated: Vec<&Arm> = arms.iter().filter(|a| a.runs.iter().any(|r| r.gates.is_some())).collect();
        if gated.is_empty() {
            return not_run(self, claim, vec![]);
        }
        let parts: Vec<Part> = gated.iter().map(|a| part(a)).collect();
        let labels: Vec<&str> =
            gated.iter().flat_map(|a| &a.runs).filter(|r| r.gates.is_some()).map(|r| r.label.as_str()).collect();
        let mut c = Claim::from_parts(
            self,
            claim,
            format!(
                "per head, the static effective number of offsets it reads (gate times the norm of the projected key or value, per channel) falls by at least {E7_MIN_DRIFT_OFFSETS} from step 0 to the end (the larger fall of its branches); heads whose knockout changes no cell by more than {DEAD_HEAD_MAX_DROP_PP} pp under every protocol are dead and excluded; a seed meets the rule when some live head drifted and, among drifted heads with a value branch, at least half read their value peak one offset after their key peak; a model in at least required_seeds(n) seeds (a seed whose drifted heads have no value branch is not applicable, 0 of 0, and is not counted; a model with no other seed is not applicable); the claim by §7.6's combination: not reproduced if any model is"
            ),
            parts,
            Reported::default(),
        );
        c.ours = seeds_ours(&c);
        c.figures = labels.iter().map(|l| format!("figures/gates-{l}-trajectory.png")).collect();
        c.data = labels.iter().map(|l| format!("figures/gates-{l}.json")).collect();
        c
    }
}
