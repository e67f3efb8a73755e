//! The ledger: every claim in order ([`LEDGER`]), each judged with its section and the flags
//! every claim of a run set carries, and the figures the claims draw.

use super::claim::{Claim, LedgerClaim};
use super::e1::E1;
use super::e11::E11;
use super::e12::E12;
use super::e13::E13;
use super::e14::E14;
use super::e2::E2;
use super::e3::E3;
use super::e4::E4;
use super::e5::E5;
use super::e6::E6;
use super::e7::E7;
use super::e8::{E10, E8, E9};
use super::k::K;
use super::sensitivity::compare_with_excluded;
use super::t1::T1;
use super::t2::T2;
use super::words::section_of;
use super::x1::X1;
use crate::analysis::verdict::Rules;
use crate::analysis::verdict::Verdict;
use crate::report::ledger::changes::changes_for;
use crate::report::ledger::collect::rules;
use crate::report::ledger::collect::Collected;
use crate::Result;
use std::path::Path;

/// Every claim, in ledger order (a ledger holds those that apply to its rules, [`ledger_for`]).
pub const LEDGER: &[&dyn LedgerClaim] =
    &[&T1, &T2, &E1, &E2, &E3, &E4, &E5, &E6, &E7, &E8, &E9, &E10, &X1, &E11, &E12, &E13, &E14, &K];

/// The claims of a ledger judged by `rules`, in ledger order: v1 and v2 ledgers have no E11-E14.
pub fn ledger_for(rules: Rules) -> Vec<&'static dyn LedgerClaim> {
    LEDGER.iter().copied().filter(|l| l.applies_to(rules)).collect()
}

/// The flag on a v1 claim judged by the depth-controlled test (or E6's knockout row tests) since
/// its fit became exact under separation (issue 32, `theory/phase-lab.md` §8.6): a change of
/// method after the v1 run, so it is flagged there; under v2 it is the pre-registered fit.
pub const FIT_FLAG: &str = "flagged: fit corrected after the run (issue 32, theory/phase-lab.md §8.6, §8.11): the depth-controlled test's likelihood ratio is now the exact supremum under separation (Konis's LP on the all-correct or all-wrong cells, Newton's method on the rest) for the observed statistic and every bootstrap replicate, with ties within LR_PRECISION counted; v1's fit stopped at its 200-iteration cap where a cell was separated, which overstated G and understated the bootstrap p. The v1 criteria are applied to the corrected statistics";

/// The claims, verdicts from data.
pub fn claims(c: &Collected) -> Vec<Claim> {
    let rules = rules(c);
    let ledger = ledger_for(rules);
    let mut out: Vec<Claim> = ledger
        .iter()
        .map(|l| {
            let mut claim = l.check(c);
            claim.section = section_of(&claim.id, rules).into();
            let judged_on_models = claim.verdict != Verdict::NotRun && (!claim.tests.is_empty() || claim.id == "E6");
            if rules == Rules::V1 && judged_on_models {
                claim.flags.push(FIT_FLAG.into());
            }
            // The changes made after seeing data (§8.11), from their one list. A v2 claim that
            // is not run because one arm trained in no seed still rests on the other arms'
            // models: flagged alike.
            let on_models = !claim.tests.is_empty() || ["E6", "E7"].contains(&claim.id.as_str());
            for ch in changes_for(rules) {
                if ch.touches(&claim.id, on_models) {
                    claim.flags.push(ch.flag());
                }
            }
            claim
        })
        .collect();
    compare_with_excluded(c, &ledger, &mut out);
    out
}

/// The figures every claim draws for itself, with captions; `None` when `stop` said stop
/// (asked before each claim's).
pub fn draw_claim_figures(c: &Collected, out: &Path, stop: &dyn Fn() -> bool) -> Result<Option<Vec<(String, String)>>> {
    let mut caps = Vec::new();
    for l in ledger_for(rules(c)) {
        if stop() {
            return Ok(None);
        }
        caps.extend(l.draw(c, out)?);
    }
    Ok(Some(caps))
}
