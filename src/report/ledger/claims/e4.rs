//! E4: within-window asymmetry in W8/S8, its magnitude beside the paper's
//! (`theory/phase-lab.md` §7.5, corrected by §8.8: the spread over the phases whose key-value
//! pair shares a window only).

use super::arm::{arm_for, seed_records, stat_seed};
use super::claim::{not_run, Claim, Interval, LedgerClaim, Measure, INTERVAL_FLAG};
use super::gaps::seed_level_spread;
use super::judge::{holds, PRIMARY};
use super::parts::Reported;
use super::words::{ceiling_words, count_ours, level_words};
use crate::analysis::phase_test::ALPHA;
use crate::analysis::phase_test::{adjusted_gap_bootstrap, adjusted_gap_bootstrap_over, window_sharing_phases};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{self, BootInterval, Magnitude};
use crate::analysis::verdict::{self, Rules, Verdict, MAGNITUDE_FRACTION, PAPER_WITHIN_WINDOW_PP};
use crate::report::ledger::collect::{arms, Arm, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E4;

/// Flag of E4's corrected quantity (issue 32, written after seeing v1's data).
pub const E4_FLAG: &str = "flagged: quantity corrected after seeing the data (issue 32, theory/phase-lab.md §8.8): the paper's within-window claim concerns the phases whose key-value pair shares a window (p + key_len + val_len - 1 <= W - 1: phases 0-6 in W8/S8 with one-token keys and values); v1's ledger took the spread over all 8 phases, which includes the window-boundary phase where the value falls into the next window. The spread is now taken over the window-sharing phases only, per seed, then averaged; the all-phase spread is reported beside it";

/// The phases of `a`'s kernel whose key-value pair shares a window, or why there are none.
pub(super) fn sharing_phases(a: &Arm) -> std::result::Result<Vec<usize>, String> {
    let spec = &a.kernel;
    let task = &a.runs.first().ok_or("not run: no successful seed")?.config.task;
    let (w, s) = (spec.geometry.window(), spec.geometry.stride());
    Ok(window_sharing_phases(w, s, task.key_len, task.val_len))
}

impl LedgerClaim for E4 {
    fn id(&self) -> &'static str {
        "E4"
    }

    fn short(&self) -> &'static str {
        "W8/S8: accuracy varies among phases sharing a window"
    }

    fn paper(&self) -> &'static str {
        "50 pp within a window"
    }

    fn check(&self, c: &Collected) -> Claim {
        let claim = "within-window asymmetry: in W8/S8, accuracy varies strongly among phases that share a window";
        let arms = arms(c);
        let Some(a) = arm_for(&arms, "w8s8", false) else { return not_run(self, claim, vec![]) };
        let s = 8;
        let (mut part, judged) = holds(a, PRIMARY, s);
        if let Some(j) = judged {
            let seeds = seed_records(a, PRIMARY).unwrap_or_default();
            let phases = sharing_phases(a);
            let boot = phases.clone().and_then(|ph| {
                adjusted_gap_bootstrap_over(&seeds, s, &ph, stats::BOOTSTRAP_ROUNDS, stat_seed(a))
                    .map_err(|e| e.to_string())
            });
            match (phases, boot) {
                (Ok(ph), Ok(b)) => {
                    // Issue 38 (§8.11): under v2 the seed-level interval (seeds, then prompt
                    // families within each) decides; the prompt-level one is reported.
                    let seed_level = match a.rules {
                        Rules::V1 => None,
                        Rules::V2 | Rules::V3 => Some(seed_level_spread(a, PRIMARY, s, &ph)),
                    };
                    // v1 judges the raw spread and its percentile interval (§7.5); v2 the
                    // bias-corrected one with its basic interval (§8.7), seed-level.
                    let m = match (a.rules, &seed_level) {
                        (Rules::V1, _) => Magnitude { pp: b.estimate, lo_pp: b.lo, hi_pp: b.hi },
                        (Rules::V2 | Rules::V3, Some(Ok((sb, _)))) => {
                            let (pp, lo_pp, hi_pp) = sb.corrected_nonneg();
                            Magnitude { pp, lo_pp, hi_pp }
                        }
                        (Rules::V2 | Rules::V3, _) => {
                            let (pp, lo_pp, hi_pp) = b.corrected_nonneg();
                            Magnitude { pp, lo_pp, hi_pp }
                        }
                    };
                    if let Some(Ok((sb, each))) = &seed_level {
                        let n = a.runs.len();
                        part.text += &format!(
                            "; seed-level (seeds, then prompt families; {}): {} (per seed {})",
                            stats::SeedCount { seeds: n }.words(),
                            Interval::of_nonneg(sb).words(),
                            each.iter().map(|(k, v)| format!("{v:.1} pp (seed {k})")).collect::<Vec<_>>().join(", ")
                        );
                        part.measures.push(Measure {
                            arm: a.name.clone(),
                            protocol: PRIMARY.name().into(),
                            what: format!(
                                "depth-adjusted spread over window-sharing phases {}-{} (mean over seeds)",
                                ph[0],
                                ph[ph.len() - 1]
                            ),
                            groups: ph.len(),
                            value: Interval::of_nonneg(sb),
                            noise_floor_pp: None,
                            p: None,
                            paper_pp: Some(PAPER_WITHIN_WINDOW_PP),
                            decides: true,
                            seeds: Some(n),
                            per_seed_pp: each.clone(),
                        });
                    } else if let Some(Err(e)) = &seed_level {
                        part.text += &format!("; seed-level interval: {e}");
                    }
                    let seed_decides = matches!(seed_level, Some(Ok(_)));
                    part.verdict = j.verdict(verdict::Claim::Effect { paper_pp: PAPER_WITHIN_WINDOW_PP }, m);
                    let boundary: Vec<usize> = (0..s).filter(|p| !ph.contains(p)).collect();
                    part.text += &format!(
                        "; window-sharing phases {}-{} (window-boundary phases {boundary:?} reported apart){}",
                        ph[0],
                        ph[ph.len() - 1],
                        magnitude_words(&b)
                    );
                    part.measures.push(Measure {
                        arm: a.name.clone(),
                        protocol: PRIMARY.name().into(),
                        what: format!(
                            "depth-adjusted spread over window-sharing phases {}-{} (mean over seeds{})",
                            ph[0],
                            ph[ph.len() - 1],
                            if seed_decides { "; prompts within seeds, reported" } else { "" }
                        ),
                        groups: ph.len(),
                        value: Interval::of_nonneg(&b),
                        noise_floor_pp: None,
                        p: None,
                        paper_pp: Some(PAPER_WITHIN_WINDOW_PP),
                        decides: !seed_decides,
                        seeds: None,
                        per_seed_pp: Vec::new(),
                    });
                    // The v1 quantity, over every phase (the window boundary included): reported.
                    if let Ok(all) = adjusted_gap_bootstrap(&seeds, s, stats::BOOTSTRAP_ROUNDS, stat_seed(a)) {
                        part.text += &format!(
                            "; over all {s} phases (window boundary included, reported): {}",
                            Interval::of_nonneg(&all).full_words()
                        );
                        part.measures.push(Measure {
                            arm: a.name.clone(),
                            protocol: PRIMARY.name().into(),
                            what: "depth-adjusted spread over all phases, window boundary included (mean over seeds; reported)".into(),
                            groups: s,
                            value: Interval::of_nonneg(&all),
                            noise_floor_pp: None,
                            p: None,
                            paper_pp: None,
                            decides: false,
                            seeds: None,
                            per_seed_pp: Vec::new(),
                        });
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    part.verdict = Verdict::NotRun;
                    part.text += &format!("; magnitude: {e}");
                }
            }
        }
        let mut also = Reported::default();
        also.test(a, Protocol::Prefix, s, ALPHA);
        let mut c = Claim::from_parts(
            self,
            claim,
            format!(
                "in-sequence, seeds pooled: the phase effect of w8s8 at S = 8 holds ({}); reproduced when its depth-adjusted phase spread over the phases whose key-value pair shares a window (per seed, then averaged) is at least {MAGNITUDE_FRACTION} of the paper's {PAPER_WITHIN_WINDOW_PP} pp, else reproduced qualitatively (smaller); {}",
                level_words(a.rules, 1),
                match a.rules {
                    Rules::V3 => ceiling_words(a.rules),
                    _ => "v1: at the ceiling not testable; v2: an absent effect at the ceiling not testable (§8.5)",
                }
            ),
            vec![part],
            also,
        );
        c.ours = match c.measures.first() {
            Some(m) => match m.seeds {
                Some(n) => {
                    format!("{} ({}; seed-level, {})", m.value.words(), m.arm, stats::SeedCount { seeds: n }.words())
                }
                None => format!("{} ({})", m.value.words(), m.arm),
            },
            None => count_ours(&c),
        };
        // Both changes came after the v1 run; the v2 rules pre-registered them (§8.7, §8.8).
        if a.rules == crate::analysis::verdict::Rules::V1 {
            c.flags.push(E4_FLAG.into());
            c.flags.push(INTERVAL_FLAG.into());
        }
        c.figures = vec!["figures/folded-prefix.png".into(), "figures/folded-in-sequence.png".into()];
        c.data = vec!["figures/folded-prefix.csv".into(), "figures/folded-in-sequence.csv".into()];
        c
    }
}

/// A magnitude beside the paper's.
fn magnitude_words(b: &BootInterval) -> String {
    format!(
        "; depth-adjusted phase spread (mean over seeds; prompts within seeds) {} (paper: {PAPER_WITHIN_WINDOW_PP} pp)",
        Interval::of_nonneg(b).full_words()
    )
}
