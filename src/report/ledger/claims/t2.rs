//! Theorem 2 (gradient flow reaches static concentration): the converged fraction over seeds, and the chosen offsets as a figure.

use super::claim::{not_run, Claim, LedgerClaim};
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::Collected;
use crate::Result;
use std::path::Path;

/// T2: the smallest fraction of seeds that must converge to one-hot gates.
pub const T2_MIN_CONVERGED: f64 = 0.95;

/// The claim (registered in [`super::LEDGER`]).
pub struct T2;

/// The figure: how often each key offset was chosen.
const FIGURE: &str = "figures/t2-offsets.png";
/// The figure: how the recorded seeds approach concentration over time.
const CONVERGENCE: &str = "figures/t2-convergence.png";

impl LedgerClaim for T2 {
    fn id(&self) -> &'static str {
        "T2"
    }

    fn short(&self) -> &'static str {
        "gradient flow reaches static concentration (Theorem 2)"
    }

    fn paper(&self) -> &'static str {
        "converges (proof)"
    }

    fn check(&self, c: &Collected) -> Claim {
        match &c.theory {
            None => not_run(
                self,
                "gradient flow reaches static concentration (Theorem 2)",
                vec!["theory/theory.json".into()],
            ),
            Some(t) => Claim {
                claim: "gradient flow from a small random initialisation reaches static concentration (Theorem 2)"
                    .into(),
                measured: format!(
                    "{:.1} % of {} seeds converged to one-hot gates (median time {}), heads coincide in {:.1} %",
                    100.0 * t.t2.converged_fraction,
                    t.t2.runs,
                    t.t2.median_t_conv.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into()),
                    100.0 * t.t2.coincide_fraction
                ),
                criterion: format!("at least {} % of seeds converge", 100.0 * T2_MIN_CONVERGED),
                section: String::new(),
                verdict: if t.t2.converged_fraction >= T2_MIN_CONVERGED {
                    Verdict::Reproduced
                } else {
                    Verdict::NotReproduced
                },
                figures: if t.t2_curves.is_empty() {
                    vec![FIGURE.into()]
                } else {
                    vec![CONVERGENCE.into(), FIGURE.into()]
                },
                data: vec!["theory/theory.json".into()],
                ours: format!("{:.1} % of {} seeds converged", 100.0 * t.t2.converged_fraction, t.t2.runs),
                ..not_run(self, "", vec![])
            },
        }
    }

    fn draw(&self, c: &Collected, out: &Path) -> Result<Vec<(String, String)>> {
        let Some(t) = &c.theory else { return Ok(vec![]) };
        crate::figures::theory::t2_offset_counts(&out.join(FIGURE.trim_end_matches(".png")), &t.t2)?;
        let mut drawn = Vec::new();
        if !t.t2_curves.is_empty() {
            let threshold = crate::theory::flow::FlowConfig::default().threshold;
            let stem = out.join(CONVERGENCE.trim_end_matches(".png"));
            crate::figures::theory::t2_convergence(&stem, &t.t2_curves, threshold, t.t1_f1)?;
            drawn.push((
                CONVERGENCE.into(),
                format!(
                    "Theorem 2 over time, the first {} seeds of the run (theory/theory.json's t2_curves): left, the least concentrated head's max_r min(pK(r), pV(r+1)), which exceeds the threshold {threshold} exactly when every head has converged (dots: each seed's convergence time); right, log10 of the loss above Theorem 1's optimum F_1 = {:.4} at the same parameters, which a seed whose heads coincide (named in the legend) cannot reach: it concentrates on a colliding vertex.",
                    t.t2_curves.len(),
                    t.t1_f1
                ),
            ));
        }
        drawn.push((
            FIGURE.into(),
            "Theorem 2: how often gradient flow chose each key offset r = 1..S-1, over every head of the converged seeds (stems: the counts are discrete; S and H, read from the data, in the title); dashed grey: the uniform level, every offset chosen equally often.".into(),
        ));
        Ok(drawn)
    }
}
