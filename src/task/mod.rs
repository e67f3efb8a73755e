//! The synthetic retrieval task (`theory/phase-lab.md` §1 and §7.1; `theory/training.md` for its defaults): seeded sequences of key/value
//! records with filler gaps and paddings, one or several queries per sequence, and a per-sample
//! record that keeps every position (source key, query, answer).
//!
//! Vocabulary (ids in this order): `BOS`, `QUERY`, `n_filler` filler tokens, `n_key` key tokens,
//! `n_val` value tokens. A record is `key (key_len tokens) value (val_len tokens)`; the keys of
//! one sequence are distinct (as whole key strings). A sequence of fixed length
//! [`TaskConfig::seq_len`] is
//!
//! ```text
//! BOS [prefix filler] record_1 [gap] record_2 ... record_n [gap] [fill] (QUERY key value)^q
//! ```
//!
//! The model must emit the target value after `QUERY key`; with teacher forcing, greedy exact
//! match of all `val_len` tokens is equivalent to every answer token being the argmax, which is
//! how [`crate::model`] scores it in one forward pass.
//!
//! The source-key position of a query is the position of the first key token of its target
//! record; its residue group is that position mod `residue_modulus` (`M = 24` by default).
//!
//! Two placements of the query block ([`QueryPlacement`]): at the end of the sequence (the first
//! run's task: the query sits at a fixed position, so a target's depth determines its phase), or
//! right after the records and a random tail, with filler after it (issue 17's task: the query
//! moves with the records, so phase and depth come apart). [`layout`] holds the evaluation
//! families built on the second placement and the checks the pre-registration asks for
//! (`theory/phase-lab.md` §7.1).

pub mod layout;

use crate::{Error, Result};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Token id of the beginning-of-sequence marker.
pub const BOS: u32 = 0;
/// Token id of the query marker.
pub const QUERY: u32 = 1;

/// Where the query block sits in a sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryPlacement {
    /// At the end of the sequence, filler between the last record and the queries (fixed query
    /// positions).
    #[default]
    End,
    /// Right after the last record's gap and a tail of `0..=max_tail` filler tokens; filler
    /// fills the sequence after the query block.
    AfterRecords,
}

/// Which query of an evaluation prompt is scored (its target is asked there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoredQuery {
    /// The last query: the records asked before it can be eliminated (the first run's task).
    #[default]
    Last,
    /// The first query: nothing has been asked yet, so elimination cannot help.
    First,
}

fn is_default<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

/// Everything that defines the task distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    /// Number of distinct key tokens.
    pub n_key: usize,
    /// Number of distinct value tokens.
    pub n_val: usize,
    /// Number of filler tokens (gaps and paddings draw from them uniformly).
    pub n_filler: usize,
    /// Tokens per key.
    pub key_len: usize,
    /// Tokens per value.
    pub val_len: usize,
    /// Records per sequence.
    pub n_records: usize,
    /// Queries per sequence (distinct target records; 1 = single-query).
    pub n_queries: usize,
    /// Largest prefix padding (filler tokens after `BOS`), drawn uniformly in `0..=max_prefix`.
    pub max_prefix: usize,
    /// Largest gap after each record, drawn uniformly in `0..=max_gap`.
    pub max_gap: usize,
    /// Residue modulus `M` for the residue group of a source key.
    pub residue_modulus: usize,
    /// Where the query block sits (left out of the JSON when it is the default, so configs of
    /// runs from before the field keep their identity hash).
    #[serde(skip_serializing_if = "is_default")]
    pub query_placement: QueryPlacement,
    /// Largest tail of filler between the last record's gap and the query block, drawn
    /// uniformly in `0..=max_tail` (only with [`QueryPlacement::AfterRecords`]).
    #[serde(skip_serializing_if = "is_default")]
    pub max_tail: usize,
    /// Which query of an evaluation prompt is scored.
    #[serde(skip_serializing_if = "is_default")]
    pub scored_query: ScoredQuery,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            n_key: 32,
            n_val: 32,
            n_filler: 4,
            key_len: 1,
            val_len: 1,
            n_records: 8,
            n_queries: 8,
            max_prefix: 33,
            max_gap: 3,
            residue_modulus: 24,
            query_placement: QueryPlacement::End,
            max_tail: 0,
            scored_query: ScoredQuery::Last,
        }
    }
}

/// One query of a sample, with every position it involves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryRecord {
    /// Index of the target record in the sequence (0-based, in order of appearance).
    pub record_index: usize,
    /// Position of the first key token of the target record (the source-key position).
    pub source_key_pos: usize,
    /// Position of the first value token of the target record.
    pub source_value_pos: usize,
    /// Position of the `QUERY` marker.
    pub query_pos: usize,
    /// Position of the first answer (value) token after the query.
    pub answer_pos: usize,
    /// The answer tokens (the target value).
    pub answer: Vec<u32>,
    /// `source_key_pos mod residue_modulus`.
    pub residue_group: usize,
}

/// One generated sequence with its positions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Token ids, length [`TaskConfig::seq_len`].
    pub tokens: Vec<u32>,
    /// Position of the first key token of every record, in order.
    pub record_positions: Vec<usize>,
    /// Number of filler tokens before the first record.
    pub prefix: usize,
    /// The queries, in order of position.
    pub queries: Vec<QueryRecord>,
}

impl Sample {
    /// Positions `p` whose next token is an answer token (the model is scored on predicting
    /// `tokens[p + 1]` from the prefix up to `p`), grouped per query in order.
    pub fn answer_inputs(&self) -> Vec<Vec<usize>> {
        self.queries.iter().map(|q| (0..q.answer.len()).map(|i| q.answer_pos + i - 1).collect()).collect()
    }
}

impl TaskConfig {
    /// Total vocabulary size.
    pub fn vocab_size(&self) -> usize {
        2 + self.n_filler + self.n_key + self.n_val
    }

    /// First key token id.
    pub fn key_base(&self) -> u32 {
        (2 + self.n_filler) as u32
    }

    /// First value token id.
    pub fn val_base(&self) -> u32 {
        (2 + self.n_filler + self.n_key) as u32
    }

    /// Number of distinct key strings (`n_key ^ key_len`, saturating).
    pub fn distinct_keys(&self) -> usize {
        (0..self.key_len).fold(1usize, |acc, _| acc.saturating_mul(self.n_key))
    }

    /// Length of every sequence: room for the largest prefix and gaps, and the query block.
    /// (Saturates at `usize::MAX` for a config that [`TaskConfig::validate`] refuses.)
    pub fn seq_len(&self) -> usize {
        self.checked_seq_len().unwrap_or(usize::MAX)
    }

    /// [`TaskConfig::seq_len`] with checked arithmetic: `None` when it overflows.
    pub fn checked_seq_len(&self) -> Option<usize> {
        let record = self.key_len.checked_add(self.val_len)?.checked_add(self.max_gap)?;
        let query = self.key_len.checked_add(self.val_len)?.checked_add(1)?;
        1usize
            .checked_add(self.max_prefix)?
            .checked_add(self.n_records.checked_mul(record)?)?
            .checked_add(self.max_tail)?
            .checked_add(self.n_queries.checked_mul(query)?)
    }

    /// Chance level of exact match when guessing uniformly among the values in context.
    pub fn chance_in_context(&self) -> f64 {
        1.0 / self.n_records.max(1) as f64
    }

    /// Checks every field; errors name the field and the allowed range.
    pub fn validate(&self) -> Result<()> {
        use crate::limits::*;
        let range = |field: &str, v: usize, min: usize, max: usize| check_range(&format!("task.{field}"), v, min, max);
        range("n_key", self.n_key, 1, MAX_VOCAB_PART)?;
        range("n_val", self.n_val, 1, MAX_VOCAB_PART)?;
        range("n_filler", self.n_filler, 1, MAX_VOCAB_PART)?;
        range("key_len", self.key_len, 1, MAX_KEY_LEN)?;
        range("val_len", self.val_len, 1, MAX_KEY_LEN)?;
        range("n_records", self.n_records, 1, MAX_RECORDS)?;
        range("n_queries", self.n_queries, 1, MAX_RECORDS)?;
        range("max_prefix", self.max_prefix, 0, MAX_PADDING)?;
        range("max_gap", self.max_gap, 0, MAX_PADDING)?;
        range("max_tail", self.max_tail, 0, MAX_PADDING)?;
        if self.max_tail > 0 && self.query_placement == QueryPlacement::End {
            return Err(Error::invalid(
                "task.max_tail",
                format!(
                    "must be 0 with query_placement \"end\" (the tail only exists before a moving query block), got {}",
                    self.max_tail
                ),
            ));
        }
        range("residue_modulus", self.residue_modulus, 1, MAX_MODULUS)?;
        match self.checked_seq_len() {
            Some(t) if t <= MAX_SEQ_LEN => {}
            Some(t) => {
                return Err(Error::invalid(
                    "task",
                    format!(
                        "sequence length {t} (1 + max_prefix + records + queries) is above the limit of {MAX_SEQ_LEN}"
                    ),
                ))
            }
            None => {
                return Err(Error::invalid("task", format!("sequence length overflows; the limit is {MAX_SEQ_LEN}")))
            }
        }
        if self.n_records > self.distinct_keys() {
            return Err(Error::invalid(
                "task.n_records",
                format!(
                    "must be at most the number of distinct keys (n_key^key_len = {}), got {}",
                    self.distinct_keys(),
                    self.n_records
                ),
            ));
        }
        if self.n_queries > self.n_records {
            return Err(Error::invalid(
                "task.n_queries",
                format!("must be at most n_records ({}), got {}", self.n_records, self.n_queries),
            ));
        }
        Ok(())
    }

    /// Draws one sample with random prefix and gaps.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> Sample {
        let prefix = rng.random_range(0..=self.max_prefix);
        let gaps: Vec<usize> = (0..self.n_records).map(|_| rng.random_range(0..=self.max_gap)).collect();
        self.sample_with_layout(rng, prefix, &gaps)
    }

    /// Draws one sample with the given prefix and gaps (clamped to `max_prefix`/`max_gap`);
    /// keys, values, fillers and query targets are random. The padding protocols of
    /// `theory/phase-lab.md` §1 build on this.
    pub fn sample_with_layout(&self, rng: &mut ChaCha8Rng, prefix: usize, gaps: &[usize]) -> Sample {
        self.sample_records(rng, self.n_records, prefix, gaps)
    }

    /// Like [`TaskConfig::sample_with_layout`] with only `n_records` records (clamped to
    /// `1..=self.n_records`) and as many queries as fit (`min(n_queries, n_records)`), filler
    /// making up the same sequence length (a curriculum draws easier sequences this way).
    pub fn sample_records(&self, rng: &mut ChaCha8Rng, n_records: usize, prefix: usize, gaps: &[usize]) -> Sample {
        let n_records = n_records.clamp(1, self.n_records);
        let prefix = prefix.min(self.max_prefix);
        let gaps: Vec<usize> = (0..n_records).map(|r| gaps.get(r).copied().unwrap_or(0).min(self.max_gap)).collect();
        // Drawn only for the moving query block, so the first run's streams are unchanged.
        let tail = match self.query_placement {
            QueryPlacement::End => 0,
            QueryPlacement::AfterRecords => rng.random_range(0..=self.max_tail),
        };
        self.build(rng, n_records, prefix, &gaps, tail, None)
    }

    /// An evaluation prompt (`theory/phase-lab.md` §1): all `n_records` records after `prefix`
    /// filler tokens with the given gaps (not clamped to the training ranges), and the query
    /// block with record `target` asked where [`TaskConfig::scored_query`] says (the other
    /// queries are unscored context, as in training). With the query block at the end the
    /// scored query sits at a fixed position. Errors when the layout does not fit in
    /// [`TaskConfig::seq_len`] or `target` is not a record.
    pub fn sample_prompt(&self, rng: &mut ChaCha8Rng, prefix: usize, gaps: &[usize], target: usize) -> Result<Sample> {
        self.sample_prompt_with_tail(rng, prefix, gaps, 0, target)
    }

    /// [`TaskConfig::sample_prompt`] with a tail of `tail` filler tokens before a moving query
    /// block ([`QueryPlacement::AfterRecords`]; must be 0 otherwise).
    pub fn sample_prompt_with_tail(
        &self,
        rng: &mut ChaCha8Rng,
        prefix: usize,
        gaps: &[usize],
        tail: usize,
        target: usize,
    ) -> Result<Sample> {
        if tail > 0 && self.query_placement == QueryPlacement::End {
            return Err(Error::invalid("tail", format!("must be 0 with the query block at the end, got {tail}")));
        }
        if target >= self.n_records {
            return Err(Error::invalid(
                "target",
                format!("must be a record index in 0..{}, got {target}", self.n_records),
            ));
        }
        let gaps: Vec<usize> = (0..self.n_records).map(|r| gaps.get(r).copied().unwrap_or(0)).collect();
        let used = 1 + prefix + self.n_records * (self.key_len + self.val_len) + gaps.iter().sum::<usize>() + tail;
        if used + self.n_queries * (1 + self.key_len + self.val_len) > self.seq_len() {
            return Err(Error::invalid(
                "layout",
                format!(
                    "prefix {prefix} and gaps {gaps:?} need {used} tokens before the queries; the task has room for {}",
                    self.haystack_len()
                ),
            ));
        }
        Ok(self.build(rng, self.n_records, prefix, &gaps, tail, Some(target)))
    }

    /// Tokens before the query block (`BOS`, paddings, records, gaps): where records can be.
    pub fn haystack_len(&self) -> usize {
        self.seq_len() - self.n_queries * (1 + self.key_len + self.val_len)
    }

    /// Position of the last query's first answer token input, i.e. the position whose next
    /// token is the first answer token of the last query (with the query block at the end).
    pub fn last_answer_input(&self) -> usize {
        self.seq_len() - self.val_len - 1
    }

    /// Builds a sequence (the layout must fit; the random draws of the training path come in
    /// the same order as they always did, so old runs reproduce).
    fn build(
        &self,
        rng: &mut ChaCha8Rng,
        n_records: usize,
        prefix: usize,
        gaps: &[usize],
        tail: usize,
        scored: Option<usize>,
    ) -> Sample {
        let n_queries = self.n_queries.min(n_records);
        let t_len = self.seq_len();
        let filler = |rng: &mut ChaCha8Rng| 2 + rng.random_range(0..self.n_filler) as u32;
        // Distinct keys: draw key strings until n_records distinct ones.
        let mut keys: Vec<Vec<u32>> = Vec::with_capacity(n_records);
        while keys.len() < n_records {
            let k: Vec<u32> =
                (0..self.key_len).map(|_| self.key_base() + rng.random_range(0..self.n_key) as u32).collect();
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let values: Vec<Vec<u32>> = (0..n_records)
            .map(|_| (0..self.val_len).map(|_| self.val_base() + rng.random_range(0..self.n_val) as u32).collect())
            .collect();
        let mut tokens = Vec::with_capacity(t_len);
        tokens.push(BOS);
        for _ in 0..prefix {
            tokens.push(filler(rng));
        }
        let mut record_positions = Vec::with_capacity(n_records);
        for r in 0..n_records {
            record_positions.push(tokens.len());
            tokens.extend_from_slice(&keys[r]);
            tokens.extend_from_slice(&values[r]);
            for _ in 0..gaps[r] {
                tokens.push(filler(rng));
            }
        }
        let query_block = n_queries * (1 + self.key_len + self.val_len);
        match self.query_placement {
            QueryPlacement::End => {
                while tokens.len() < t_len - query_block {
                    tokens.push(filler(rng));
                }
            }
            QueryPlacement::AfterRecords => {
                for _ in 0..tail {
                    tokens.push(filler(rng));
                }
            }
        }
        let mut targets: Vec<usize> = (0..n_records).collect();
        targets.shuffle(rng);
        targets.truncate(n_queries);
        if let Some(scored) = scored {
            match targets.iter().position(|&r| r == scored) {
                Some(i) => {
                    targets.remove(i);
                }
                None => {
                    targets.pop();
                }
            }
            match self.scored_query {
                ScoredQuery::Last => targets.push(scored),
                ScoredQuery::First => targets.insert(0, scored),
            }
        }
        let mut queries = Vec::with_capacity(n_queries);
        for &r in &targets {
            let query_pos = tokens.len();
            tokens.push(QUERY);
            tokens.extend_from_slice(&keys[r]);
            let answer_pos = tokens.len();
            tokens.extend_from_slice(&values[r]);
            let source_key_pos = record_positions[r];
            queries.push(QueryRecord {
                record_index: r,
                source_key_pos,
                source_value_pos: source_key_pos + self.key_len,
                query_pos,
                answer_pos,
                answer: values[r].clone(),
                residue_group: source_key_pos % self.residue_modulus,
            });
        }
        while tokens.len() < t_len {
            tokens.push(filler(rng));
        }
        debug_assert_eq!(tokens.len(), t_len);
        Sample { tokens, record_positions, prefix, queries }
    }

    /// `batch` samples from the generator stream `stream` of `seed`: the same `(seed, stream)`
    /// always gives the same batch, whatever was drawn before (training uses the step number as
    /// the stream, so a resumed run sees exactly the batches it would have seen).
    pub fn batch(&self, seed: u64, stream: u64, batch: usize) -> Vec<Sample> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        (0..batch).map(|_| self.sample(&mut rng)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid_and_sample_has_declared_length() {
        let c = TaskConfig::default();
        c.validate().unwrap();
        let s = c.batch(3, 0, 4);
        for x in &s {
            assert_eq!(x.tokens.len(), c.seq_len());
        }
    }
}
