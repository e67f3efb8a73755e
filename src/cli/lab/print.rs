//! What `eval` and `audit analyze` print: the balance, the profile and the pre-registered
//! statistics.

use phasekv::analysis::phase::{PhaseProfile, PhaseStatistics};
use phasekv::analysis::protocol::Balance;
use phasekv::analysis::stats::GapSummary;

/// Prints the balance check and a profile summary.
pub fn print_profile(title: &str, balance: Option<&Balance>, p: &PhaseProfile) {
    println!("{title}");
    if let Some(b) = balance {
        println!(
            "  balance: target position per group, mean {:.2}..{:.2} (spread {:.2} tokens), std {:.2}..{:.2} (spread {:.1} %): {}",
            b.groups.iter().map(|g| g.mean).fold(f64::INFINITY, f64::min),
            b.groups.iter().map(|g| g.mean).fold(f64::NEG_INFINITY, f64::max),
            b.mean_spread,
            b.groups.iter().map(|g| g.std).fold(f64::INFINITY, f64::min),
            b.groups.iter().map(|g| g.std).fold(f64::NEG_INFINITY, f64::max),
            100.0 * b.std_spread,
            if b.agrees() { "balanced" } else { "NOT balanced" }
        );
        let per: Vec<String> =
            b.groups.iter().map(|g| format!("{}: {:.1}\u{b1}{:.1}", g.group, g.mean, g.std)).collect();
        println!("  target position per group (mean\u{b1}std): {}", per.join(", "));
    }
    let accs: Vec<String> = p.groups.iter().map(|g| format!("{:.0}", 100.0 * g.accuracy)).collect();
    println!("  accuracy % by group 0..{}: {}", p.modulus, accs.join(" "));
    if let Some(f) = &p.folded {
        let accs: Vec<String> = f.phases.iter().map(|g| format!("{:.1}", 100.0 * g.accuracy)).collect();
        println!("  folded by phase mod {}: {} (gap {:.1} pp)", f.stride, accs.join(" "), f.gap_pp);
    }
    let best = p.period.best().map(|c| format!("{} (p = {:.2e})", c.period, c.p_value)).unwrap_or_default();
    let runner = p.period.runner_up().map(|c| format!("{} (p = {:.2e})", c.period, c.p_value)).unwrap_or_default();
    println!(
        "  mean {:.2} %, max gap {:.1} pp; period estimate: {} [best {best}, runner-up {runner}]",
        100.0 * p.mean_accuracy,
        p.max_gap_pp,
        p.period().map(|x| x.to_string()).unwrap_or_else(|| "none".into()),
    );
    println!(
        "  chi-square {:.1} (df {}), p = {:.2e}; permutation p = {:.4}",
        p.chi_square.statistic, p.chi_square.df, p.chi_square.p_value, p.permutation_p
    );
}

/// Prints the pre-registered statistics (`theory/phase-lab.md` §7.2-7.3).
pub fn print_statistics(st: &PhaseStatistics) {
    if let Some(t) = &st.phase_test {
        println!(
            "  depth-controlled phase test (pre-registered, S = {}): p = {} ({:?}), depth-adjusted phase gap {:.1} pp",
            t.stride, t.p, t.method, t.adjusted_gap_pp
        );
    }
    let gap = |g: &GapSummary| {
        format!(
            "{:.1} pp (95 % CI {:.1}..{:.1}, null 95th percentile {:.1})",
            g.gap_pp, g.ci_lo_pp, g.ci_hi_pp, g.noise_floor_pp
        )
    };
    println!("  max gap over groups {}", gap(&st.gap));
    if let Some(f) = &st.folded_gap {
        println!("  max gap over phases {}", gap(f));
    }
    let period = st.period_scan.period.map_or("none".to_string(), |p| p.to_string());
    println!(
        "  period scan (exploratory, corrected): {period}, corrected p = {}; best {} in {:.0} % of resamples",
        st.period_scan.corrected_p,
        st.period_scan.best,
        100.0 * st.period_stability
    );
}
