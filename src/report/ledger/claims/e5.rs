//! E5: prefix-padding gaps, large for compressed models and small for full attention.

use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E5;

impl LedgerClaim for E5 {
    fn check(&self, c: &Collected) -> Claim {
        let compressed = compressed(c);
        let full = full(c);
        let claim = "prefix-padding gaps are large for compressed models (paper: up to 78 pp) and small for baselines (paper: at most 6.1 pp)";
        let pre = |r: &RunData| r.evals.get(&Protocol::Prefix).cloned();
        match (
            full.and_then(pre),
            compressed.iter().filter_map(|r| pre(r).map(|e| (r.preset.clone(), e))).collect::<Vec<_>>(),
        ) {
            (Some(f), comp) if !comp.is_empty() => {
                let best = comp.iter().max_by(|a, b| a.1.profile.max_gap_pp.total_cmp(&b.1.profile.max_gap_pp));
                let gaps: Vec<String> = comp
                    .iter()
                    .map(|(p, e)| {
                        format!("{p} {:.1} pp (perm. p {})", e.profile.max_gap_pp, fmt_p(e.profile.permutation_p))
                    })
                    .collect();
                let small = f.profile.permutation_p >= ALPHA;
                let large = best.is_some_and(|(_, e)| {
                    e.profile.permutation_p < ALPHA && e.profile.max_gap_pp >= E5_MIN_GAP_RATIO * f.profile.max_gap_pp
                });
                Claim {
                    id: "E5".into(),
                    claim: claim.into(),
                    measured: format!(
                        "full {:.1} pp (permutation p {}, within sampling noise: {}); {}",
                        f.profile.max_gap_pp,
                        fmt_p(f.profile.permutation_p),
                        if small { "yes" } else { "no" },
                        gaps.join(", ")
                    ),
                    criterion: format!(
                        "full's prefix gap is sampling noise (permutation p >= {ALPHA}) and the largest compressed prefix gap is significant (p < {ALPHA}) and at least twice full's"
                    ),
                    verdict: if small && large { Verdict::Reproduced } else { Verdict::NotReproduced },
                    figures: vec![phase_fig(Protocol::Prefix)],
                    data: vec![phase_data(Protocol::Prefix)],
                }
            }
            _ => not_run("E5", claim, vec![]),
        }
    }
}
