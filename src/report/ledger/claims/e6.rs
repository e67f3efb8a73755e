//! E6: knockout maps, uniform for full attention and phase-concentrated for compressed models.

use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E6;

impl LedgerClaim for E6 {
    fn check(&self, c: &Collected) -> Claim {
        let claim =
            "knockout maps: uniform stripes for full attention, phase-concentrated losses for compressed models";
        let concentrated = |k: &KnockoutResult| {
            k.map
                .rows
                .iter()
                .filter(|r| {
                    let fin: Vec<f64> = r.drop_pp.iter().copied().filter(|d| d.is_finite()).collect();
                    fin.iter().any(|&d| d >= KO_CONCENTRATED_PP) && fin.iter().any(|&d| d <= KO_FLAT_PP)
                })
                .count()
        };
        let row_p = |k: &KnockoutResult| -> Vec<f64> {
            k.map.rows.iter().map(|r| stats::chi_square_independence(&r.groups).map(|x| x.2).unwrap_or(1.0)).collect()
        };
        let fk = c.runs.iter().find(|r| is_full(r)).and_then(|r| r.knockout.as_ref());
        let ck: Vec<(&str, &KnockoutResult)> = c
            .runs
            .iter()
            .filter(|r| !is_full(r))
            .filter_map(|r| r.knockout.as_ref().map(|k| (r.preset.as_str(), k)))
            .collect();
        match fk {
            Some(f) if !ck.is_empty() => {
                let n_rows = f.map.rows.len().max(1) as f64;
                let fp = row_p(f);
                let full_uniform = fp.iter().all(|&p| p >= ALPHA / n_rows);
                let comp: Vec<String> = ck
                    .iter()
                    .map(|(p, k)| format!("{p} {}/{} rows concentrated", concentrated(k), k.map.rows.len()))
                    .collect();
                let all_conc = ck.iter().all(|(_, k)| concentrated(k) > 0);
                let figs = std::iter::once("full")
                    .chain(ck.iter().map(|x| x.0))
                    .map(|p| format!("figures/knockout-{p}.png"))
                    .collect();
                let data = std::iter::once("full")
                    .chain(ck.iter().map(|x| x.0))
                    .map(|p| format!("figures/knockout-{p}.json"))
                    .collect();
                Claim {
                    id: "E6".into(),
                    claim: claim.into(),
                    measured: format!(
                        "full: {} of {} rows uniform across groups (smallest row chi2 p {}), {} phase-concentrated; {}",
                        fp.iter().filter(|&&p| p >= ALPHA / n_rows).count(),
                        fp.len(),
                        fmt_p(fp.iter().copied().fold(1.0, f64::min)),
                        concentrated(f),
                        comp.join(", ")
                    ),
                    criterion: format!(
                        "every full-attention row is uniform (chi-square over groups p >= {ALPHA}/rows) and every compressed model has a phase-concentrated row (drop >= {KO_CONCENTRATED_PP} pp in some group, <= {KO_FLAT_PP} pp in another)"
                    ),
                    verdict: if full_uniform && all_conc { Verdict::Reproduced } else { Verdict::NotReproduced },
                    figures: figs,
                    data,
                }
            }
            _ => not_run("E6", claim, vec![]),
        }
    }
}
