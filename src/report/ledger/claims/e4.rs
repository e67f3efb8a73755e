//! E4: within-window asymmetry in W8/S8.

use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E4;

impl LedgerClaim for E4 {
    fn check(&self, c: &Collected) -> Claim {
        let claim = "within-window asymmetry: in W8/S8, accuracy varies strongly among phases that share a window";
        match run(c, "w8s8").filter(|r| !r.evals.is_empty()) {
            None => not_run("E4", claim, vec![]),
            Some(r) => {
                let mut parts = Vec::new();
                let mut any = false;
                for (p, e) in &r.evals {
                    let Some(f) = &e.profile.folded else { continue };
                    let ph: Vec<GroupAccuracy> =
                        f.phases.iter().filter(|g| g.group <= E4_LAST_SHARED_PHASE).cloned().collect();
                    let spread = stats::max_gap_pp(&ph);
                    let chi = stats::chi_square_independence(&ph).map(|x| x.2).unwrap_or(1.0);
                    let accs: Vec<String> = ph.iter().map(|g| format!("{:.0}", 100.0 * g.accuracy)).collect();
                    any |= chi < ALPHA && spread >= E4_MIN_SPREAD_PP;
                    parts.push(format!(
                        "{}: phases 0..{E4_LAST_SHARED_PHASE} at {} % (spread {:.1} pp, chi2 p {})",
                        p.name(),
                        accs.join("/"),
                        spread,
                        fmt_p(chi)
                    ));
                }
                Claim {
                    id: "E4".into(),
                    claim: claim.into(),
                    measured: parts.join("; "),
                    criterion: format!(
                        "under some protocol the phases 0..{E4_LAST_SHARED_PHASE} of w8s8 differ (chi-square p < {ALPHA}) by at least {E4_MIN_SPREAD_PP} pp"
                    ),
                    verdict: if any { Verdict::Reproduced } else { Verdict::NotReproduced },
                    figures: vec!["figures/folded-prefix.png".into(), "figures/folded-in-sequence.png".into()],
                    data: vec!["figures/folded-prefix.csv".into(), "figures/folded-in-sequence.csv".into()],
                }
            }
        }
    }
}
