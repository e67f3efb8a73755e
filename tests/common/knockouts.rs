//! Constructed knockout maps for the ledger's tests: a clean map at 80 % in every group and
//! KV-head rows that drop a given number of points per group.

use phasekv::analysis::eval::{KnockoutMap, KnockoutRow};
use phasekv::analysis::stats::GroupAccuracy;

/// A KV-head knockout map of `m` groups with `n` prompts each, clean at 80 % in every group
/// (below the ceiling, so the interaction test decides), with one row per entry of `drops`:
/// row `l` drops `drops[l](group)` points (down to 0 %).
pub fn map_at_80(m: usize, n: usize, drops: &[&dyn Fn(usize) -> f64]) -> KnockoutMap {
    let clean_k = 4 * n / 5;
    let clean: Vec<GroupAccuracy> = (0..m).map(|g| GroupAccuracy::new(g, clean_k, n)).collect();
    let rows = drops
        .iter()
        .enumerate()
        .map(|(l, drop)| {
            let groups: Vec<GroupAccuracy> = (0..m)
                .map(|g| {
                    GroupAccuracy::new(g, clean_k.saturating_sub((drop(g) / 100.0 * n as f64).round() as usize), n)
                })
                .collect();
            let drop_pp: Vec<f64> = groups.iter().map(|k| 100.0 * (0.8 - k.accuracy)).collect();
            let mean_drop_pp = drop_pp.iter().sum::<f64>() / m as f64;
            KnockoutRow {
                layer: l,
                head: 0,
                slot: None,
                replaced_entries: None,
                groups,
                drop_pp,
                mean_drop_pp,
                knocked: String::new(),
            }
        })
        .collect();
    KnockoutMap {
        intervention: Default::default(),
        modulus: m,
        reference: 4,
        replaced_entries: 10,
        clean,
        rows,
        ids: vec![],
        prompt_groups: vec![],
        clean_correct: String::new(),
    }
}
