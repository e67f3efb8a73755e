//! Evaluation layouts whose residue groups differ only in phase, and the checks
//! `theory/phase-lab.md` §7.1 asks of them: coverage under training, matched depth
//! distributions, and an elimination-only baseline.
//!
//! **The phase family.** A base prompt is drawn from the training distribution of a task whose
//! query block follows the records ([`QueryPlacement::AfterRecords`]), with its prefix drawn in
//! `0..=max_prefix - (M - 1)`. The family holds `M` copies of it, the `g`-th shifted right by the
//! `δ_g` in `0..M` that puts the scored target's key in residue group `g`: `δ_g` filler tokens
//! are inserted after `BOS` and `δ_g` filler tokens dropped from the end of the sequence (after
//! the query block, where nothing is scored). Keys, values, gaps, tail, the order of the queries
//! and the scored target are the same in every copy, and the query block moves with the records,
//! so every copy has the same depth (query position minus source-key position): the residue
//! groups' depth distributions are *equal*, not matched in mean and variance. Every copy's
//! layout (prefix `≤ max_prefix`, gaps and tail in their training ranges) is a training layout
//! with the same probability as any other.

use super::{QueryPlacement, QueryRecord, Sample, ScoredQuery, TaskConfig};
use crate::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// How the members of a phase family differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyShift {
    /// Filler inserted after `BOS`: every record moves with the target (prefix padding).
    Prefix,
    /// The prefix and the gaps before the target redrawn from their training ranges, so that
    /// the target lands in each group while the records before it move independently
    /// (in-sequence padding). The gaps from the target on, the tail and so the depth are the
    /// family's; the tokens are drawn afresh for each member.
    BeforeTarget,
}

/// The scored query of an evaluation prompt built by this task's config.
pub fn scored(task: &TaskConfig, s: &Sample) -> Option<usize> {
    match task.scored_query {
        ScoredQuery::Last => s.queries.len().checked_sub(1),
        ScoredQuery::First => (!s.queries.is_empty()).then_some(0),
    }
}

/// Depth of a query: its `QUERY` marker's position minus its target key's position.
pub fn depth(q: &QueryRecord) -> usize {
    q.query_pos - q.source_key_pos
}

impl TaskConfig {
    /// Checks that this task can build phase families: the query block follows the records,
    /// and the prefix range holds a full period of residues (`max_prefix >= M - 1`).
    pub fn check_phase_family(&self) -> Result<()> {
        if self.query_placement != QueryPlacement::AfterRecords {
            return Err(Error::invalid(
                "task.query_placement",
                "phase families need \"after_records\" (with the query block at the end a shift changes depth)",
            ));
        }
        let m = self.residue_modulus;
        if self.max_prefix + 1 < m {
            return Err(Error::invalid(
                "task.max_prefix",
                format!("must be at least residue_modulus - 1 = {} for a phase family, got {}", m - 1, self.max_prefix),
            ));
        }
        Ok(())
    }

    /// One phase family (module doc): `M` prompts, the `g`-th with the scored target's key in
    /// residue group `g`, otherwise identical up to the shift. `target` picks the scored
    /// record (`None`: uniform).
    pub fn phase_family(&self, rng: &mut ChaCha8Rng, target: Option<usize>) -> Result<Vec<Sample>> {
        self.family(rng, target, FamilyShift::Prefix)
    }

    /// A phase family whose members move by `shift` ([`FamilyShift`]).
    pub fn family(&self, rng: &mut ChaCha8Rng, target: Option<usize>, shift: FamilyShift) -> Result<Vec<Sample>> {
        self.check_phase_family()?;
        let m = self.residue_modulus;
        let prefix0 = rng.random_range(0..=self.max_prefix + 1 - m);
        let gaps: Vec<usize> = (0..self.n_records).map(|_| rng.random_range(0..=self.max_gap)).collect();
        let tail = rng.random_range(0..=self.max_tail);
        let target = match target {
            Some(t) => t,
            None => rng.random_range(0..self.n_records),
        };
        if shift == FamilyShift::BeforeTarget {
            let rec = self.key_len + self.val_len;
            return (0..m)
                .map(|g| {
                    let mut own = gaps.clone();
                    own[..target].iter_mut().for_each(|x| *x = rng.random_range(0..=self.max_gap));
                    let at = 1 + target * rec + own[..target].iter().sum::<usize>();
                    let first = (g + m - at % m) % m;
                    let prefix = first + m * rng.random_range(0..=(self.max_prefix - first) / m);
                    self.sample_prompt_with_tail(rng, prefix, &own, tail, target)
                })
                .collect();
        }
        let base = self.sample_prompt_with_tail(rng, prefix0, &gaps, tail, target)?;
        let pad: Vec<u32> = (0..m).map(|_| 2 + rng.random_range(0..self.n_filler) as u32).collect();
        let i = scored(self, &base).expect("a prompt has queries");
        let k0 = base.queries[i].source_key_pos;
        Ok((0..m).map(|g| shifted(&base, (g + m - k0 % m) % m, &pad, m)).collect())
    }

    /// The training probability of a prompt's observable layout: its prefix, the gaps between
    /// consecutive records, and the filler between the last record and the query block (the
    /// last gap plus the tail, whose sum is what a sequence shows). 0 for a layout training
    /// never draws. Curriculum batches are not counted (they end before evaluation matters).
    pub fn layout_probability(&self, s: &Sample) -> f64 {
        let n = s.record_positions.len();
        if n != self.n_records || s.prefix > self.max_prefix {
            return 0.0;
        }
        let rec = self.key_len + self.val_len;
        let uniform = |v: usize, max: usize| if v <= max { 1.0 / (max + 1) as f64 } else { 0.0 };
        let mut p = uniform(s.prefix, self.max_prefix);
        for w in s.record_positions.windows(2) {
            p *= uniform(w[1] - w[0] - rec, self.max_gap);
        }
        if self.query_placement == QueryPlacement::AfterRecords {
            let Some(first_query) = s.queries.iter().map(|q| q.query_pos).min() else { return 0.0 };
            let last_end = s.record_positions[n - 1] + rec;
            let Some(between) = first_query.checked_sub(last_end) else { return 0.0 };
            // P(gap + tail = between), gap uniform in 0..=max_gap, tail in 0..=max_tail.
            let ways = (0..=self.max_gap).filter(|g| between >= *g && between - g <= self.max_tail).count();
            p *= ways as f64 / ((self.max_gap + 1) * (self.max_tail + 1)) as f64;
        }
        p
    }
}

/// `base` shifted right by `delta` (module doc): `pad[..delta]` inserted after `BOS`, `delta`
/// tokens dropped from the end.
fn shifted(base: &Sample, delta: usize, pad: &[u32], m: usize) -> Sample {
    let t = base.tokens.len();
    let mut tokens = Vec::with_capacity(t);
    tokens.push(base.tokens[0]);
    tokens.extend_from_slice(&pad[..delta]);
    tokens.extend_from_slice(&base.tokens[1..t - delta]);
    let queries = base
        .queries
        .iter()
        .map(|q| QueryRecord {
            source_key_pos: q.source_key_pos + delta,
            source_value_pos: q.source_value_pos + delta,
            query_pos: q.query_pos + delta,
            answer_pos: q.answer_pos + delta,
            residue_group: (q.source_key_pos + delta) % m,
            ..q.clone()
        })
        .collect();
    Sample {
        tokens,
        record_positions: base.record_positions.iter().map(|p| p + delta).collect(),
        prefix: base.prefix + delta,
        queries,
    }
}

/// The largest difference, over residue groups and depths, between a group's empirical depth
/// CDF and the pooled one (a two-sample Kolmogorov-Smirnov distance against the pool), for
/// each prompt's scored query. 0 when every group has the same depth distribution.
pub fn max_depth_cdf_gap(task: &TaskConfig, prompts: &[Sample]) -> f64 {
    let pairs: Vec<(usize, usize)> = prompts
        .iter()
        .filter_map(|s| scored(task, s).map(|i| (s.queries[i].residue_group, depth(&s.queries[i]))))
        .collect();
    max_cdf_gap(&pairs, task.residue_modulus)
}

/// The largest difference between any group's empirical CDF and the pooled one, over
/// `(group, value)` pairs with groups taken mod `m` (what [`max_depth_cdf_gap`] computes).
pub fn max_cdf_gap(pairs: &[(usize, usize)], m: usize) -> f64 {
    let m = m.max(1);
    let mut by_group: Vec<Vec<usize>> = vec![Vec::new(); m];
    let mut pooled = Vec::with_capacity(pairs.len());
    for &(g, d) in pairs {
        by_group[g % m].push(d);
        pooled.push(d);
    }
    pooled.sort_unstable();
    let cdf = |xs: &[usize], d: usize| xs.partition_point(|&x| x <= d) as f64 / xs.len().max(1) as f64;
    let mut worst = 0.0f64;
    for g in by_group.iter_mut().filter(|g| !g.is_empty()) {
        g.sort_unstable();
        for &d in &pooled {
            worst = worst.max((cdf(g, d) - cdf(&pooled, d)).abs());
        }
    }
    worst
}

/// The accuracy of a reader that knows every value in context and eliminates those of records
/// already asked in the query block, guessing uniformly among the rest: the mean over prompts
/// of `1 / (n_records - queries before the scored one)`. With the first query scored it is
/// chance, `1 / n_records`; with the last query of 8 for 8 records it is 1.
pub fn elimination_baseline(task: &TaskConfig, prompts: &[Sample]) -> f64 {
    let acc: f64 =
        prompts.iter().filter_map(|s| scored(task, s).map(|i| 1.0 / (s.record_positions.len() - i) as f64)).sum();
    acc / prompts.len().max(1) as f64
}

/// The distinct source-key positions each residue group reaches among the prompts' scored
/// queries.
pub fn reachable_positions(task: &TaskConfig, prompts: &[Sample]) -> Vec<usize> {
    let m = task.residue_modulus;
    let mut seen: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); m];
    for s in prompts {
        if let Some(i) = scored(task, s) {
            let q = &s.queries[i];
            seen[q.residue_group % m].insert(q.source_key_pos);
        }
    }
    seen.iter().map(|s| s.len()).collect()
}
