//! E1: every compressed model shows periodicity matching its stride; full attention stays flat.

use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E1;

impl LedgerClaim for E1 {
    fn check(&self, c: &Collected) -> Claim {
        let compressed = compressed(c);
        let full = full(c);
        let matches = |r: &RunData| {
            let s = stride_of(&r.preset).ok().flatten();
            // A profile that repeats every S positions has a smallest period dividing S (uniform
            // pooling can repeat every S/2); the estimator reports the smallest that fits.
            r.evals.values().any(|e| {
                e.profile.chi_square.p_value < ALPHA
                    && matches!((e.profile.period(), s), (Some(p), Some(s)) if s % p == 0)
            })
        };
        let mut parts: Vec<String> = Vec::new();
        for r in c.runs.iter().filter(|r| !r.evals.is_empty()) {
            let per: Vec<String> = r
                .evals
                .iter()
                .map(|(p, e)| {
                    format!(
                        "{} period {}, gap {:.1} pp, chi2 p {}",
                        p.name(),
                        period_word(e),
                        e.profile.max_gap_pp,
                        fmt_p(e.profile.chi_square.p_value)
                    )
                })
                .collect();
            parts.push(format!("{}: {}", r.preset, per.join("; ")));
        }
        let verdict = match full {
            None => Verdict::NotRun,
            Some(_) if compressed.is_empty() => Verdict::NotRun,
            Some(f) => {
                let flat =
                    f.evals.values().all(|e| e.profile.chi_square.p_value >= ALPHA && e.profile.period().is_none());
                if flat && compressed.iter().all(|r| matches(r)) {
                    Verdict::Reproduced
                } else {
                    Verdict::NotReproduced
                }
            }
        };
        Claim {
            id: "E1".into(),
            claim: "every compressed model shows periodicity matching its stride; full attention stays flat".into(),
            measured: parts.join(" | "),
            criterion: format!(
                "every compressed model: under some protocol chi-square p < {ALPHA} and an estimated period that divides S (the profile repeats every S positions); full: no period and chi-square p >= {ALPHA} under both"
            ),
            verdict,
            figures: both_figs(),
            data: both_data(),
        }
    }
}
