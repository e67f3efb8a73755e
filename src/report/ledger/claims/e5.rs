//! E5: prefix-padding gaps, large for compressed models and small for full attention, each
//! magnitude beside the paper's (`theory/phase-lab.md` §7.5).

use super::pooled::*;
use super::*;
use crate::analysis::stats::GapSummary;
use crate::analysis::verdict::{self, Magnitude, PAPER_BASELINE_GAP_PP, PAPER_COMPRESSED_GAP_PP};

/// The claim (registered in [`super::LEDGER`]).
pub struct E5;

const P: Protocol = Protocol::Prefix;

fn magnitude(g: &GapSummary) -> Magnitude {
    Magnitude { pp: g.gap_pp, lo_pp: g.ci_lo_pp, hi_pp: g.ci_hi_pp }
}

/// The compressed part: the model with the largest folded prefix gap must show an effect that
/// holds, its gap beside the paper's.
fn compressed_part(comp: &[&Arm], gaps: &mut Vec<String>) -> Part {
    let mut best: Option<(&Arm, usize, GapSummary)> = None;
    for &a in comp {
        let Some(s) = stride_of(&a.preset).ok().flatten() else { continue };
        let all = gap(a, P, None).map(|g| gap_words(&g)).unwrap_or_else(|e| e);
        match gap(a, P, Some(s)) {
            Ok(g) => {
                gaps.push(format!("{}: folded by {s} {}; over {} groups {all}", a.name, gap_words(&g), modulus(a)));
                if best.as_ref().is_none_or(|b| g.gap_pp > b.2.gap_pp) {
                    best = Some((a, s, g));
                }
            }
            Err(e) => gaps.push(format!("{}: {e}", a.name)),
        }
    }
    let Some((a, s, g)) = best else {
        return Part { verdict: Verdict::NotRun, text: format!("compressed: {NO_OUTCOMES}") };
    };
    let (mut part, test) = holds(a, P, s);
    if let Some(t) = test {
        part.verdict = verdict::verdict(
            verdict::Claim::Effect { paper_pp: PAPER_COMPRESSED_GAP_PP },
            false,
            &t.agreement,
            magnitude(&g),
        );
    }
    part.text = format!(
        "largest folded prefix gap {} ({:.1} pp [{:.1}, {:.1}], paper: up to {PAPER_COMPRESSED_GAP_PP} pp): {}; {}",
        a.name,
        g.gap_pp,
        g.ci_lo_pp,
        g.ci_hi_pp,
        part.text,
        reported(a, PRIMARY, s, ALPHA)
    );
    part
}

/// The baseline part of one full-attention arm: no effect and a folded gap whose interval
/// reaches down to the paper's bound, at each of S = 4, 6, 8.
fn baseline_part(a: &Arm) -> Part {
    if ceiling(a) == Some(true) {
        return ceiling_part(a);
    }
    let alpha = ALPHA / BASELINE_STRIDES.len() as f64;
    let mut parts = Vec::new();
    for s in BASELINE_STRIDES {
        let part = match (pooled(a, P, s, alpha), gap(a, P, Some(s))) {
            (Ok(t), Ok(g)) => Part {
                verdict: verdict::verdict(
                    verdict::Claim::NoEffect { paper_max_pp: PAPER_BASELINE_GAP_PP },
                    false,
                    &t.agreement,
                    magnitude(&g),
                ),
                text: format!(
                    "{}; folded gap {} (paper: at most {PAPER_BASELINE_GAP_PP} pp)",
                    describe(&t),
                    gap_words(&g)
                ),
            },
            (Err(e), _) | (_, Err(e)) => Part { verdict: Verdict::NotRun, text: format!("S = {s}: {e}") },
        };
        parts.push(part);
    }
    Part { verdict: combine(&parts), text: format!("{} prefix: {}", a.name, texts(&parts).replace(" | ", "; ")) }
}

impl LedgerClaim for E5 {
    fn check(&self, c: &Collected) -> Claim {
        let claim = "prefix-padding gaps are large for compressed models (paper: up to 78 pp) and small for baselines (paper: at most 6.1 pp)";
        let arms = arms(c);
        let has_prefix = |a: &&Arm| a.runs.iter().any(|r| r.evals.contains_key(&P));
        let full: Vec<&Arm> = arms.iter().filter(|a| arm_is_full(a)).filter(has_prefix).collect();
        let comp: Vec<&Arm> = arms.iter().filter(|a| !arm_is_full(a)).filter(has_prefix).collect();
        if full.is_empty() || comp.is_empty() {
            return not_run("E5", claim, vec![]);
        }
        let mut gaps = Vec::new();
        let mut parts = vec![compressed_part(&comp, &mut gaps)];
        for a in full {
            gaps.push(format!(
                "{}: over {} groups {}",
                a.name,
                modulus(a),
                gap(a, P, None).map(|g| gap_words(&g)).unwrap_or_else(|e| e)
            ));
            parts.push(baseline_part(a));
        }
        Claim {
            id: "E5".into(),
            claim: claim.into(),
            measured: format!("{} || gaps (seeds pooled, 95 % bootstrap interval): {}", texts(&parts), gaps.join("; ")),
            criterion: format!(
                "prefix protocol, seeds pooled: the compressed model with the largest folded-by-S gap has a phase effect that holds (pooled p < {ALPHA} and required_seeds(n) seeds), reproduced when that gap is at least {} of {PAPER_COMPRESSED_GAP_PP} pp, else reproduced qualitatively (smaller); full attention: the effect is absent at each of S = 4, 6, 8 (each at {ALPHA}/3) and the lower end of each folded gap's interval is at most {PAPER_BASELINE_GAP_PP} pp; a model at the ceiling is not testable",
                verdict::MAGNITUDE_FRACTION
            ),
            verdict: combine(&parts),
            figures: vec![phase_fig(P)],
            data: vec![phase_data(P)],
        }
    }
}
