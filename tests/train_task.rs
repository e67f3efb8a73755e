//! The retrieval-task generator: layout, recorded positions, determinism, validation, and the
//! phase families of issue 17 (`theory/phase-lab.md` §7.1). Every property test goes through
//! the one seeded runner (`common::runner`; `PHASEKV_TEST_SEED` explores other cases).

use crate::common;

use phasekv::task::layout::{self, depth, elimination_baseline, max_depth_cdf_gap};
use phasekv::task::{QueryPlacement, ScoredQuery, TaskConfig, BOS, QUERY};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

prop_compose! {
    fn task_config()(
        n_key in 4usize..40, n_val in 2usize..40, n_filler in 1usize..5,
        key_len in 1usize..3, val_len in 1usize..3,
        max_prefix in 0usize..10, max_gap in 0usize..5,
        records in 1usize..13, queries in 1usize..13, residue_modulus in 1usize..30,
        after in any::<bool>(), max_tail in 0usize..6, first in any::<bool>(),
    ) -> TaskConfig {
        // n_records <= distinct keys, n_queries <= n_records, by construction.
        let n_records = records.min(n_key.pow(key_len as u32));
        let n_queries = queries.min(n_records);
        let (query_placement, max_tail) =
            if after { (QueryPlacement::AfterRecords, max_tail) } else { (QueryPlacement::End, 0) };
        let scored_query = if first { ScoredQuery::First } else { ScoredQuery::Last };
        TaskConfig { n_key, n_val, n_filler, key_len, val_len, n_records, n_queries,
                     max_prefix, max_gap, residue_modulus, query_placement, max_tail, scored_query }
    }
}

/// Every recorded position points at what it claims, keys are distinct, the length is the
/// declared one, and every query asks for a record that precedes it.
#[test]
fn records_keep_every_position() {
    let strategy = (task_config(), any::<u64>(), 0u64..1000);
    common::runner("task-records", 64, Some("proptest-regressions/train_task.txt"))
        .run(&strategy, |(cfg, seed, stream)| records_keep_every_position_case(cfg, seed, stream))
        .unwrap();
}

fn records_keep_every_position_case(cfg: TaskConfig, seed: u64, stream: u64) -> Result<(), TestCaseError> {
    {
        cfg.validate().unwrap();
        let (kb, vb) = (cfg.key_base(), cfg.val_base());
        for s in cfg.batch(seed, stream, 3) {
            prop_assert_eq!(s.tokens.len(), cfg.seq_len());
            prop_assert_eq!(s.tokens[0], BOS);
            prop_assert_eq!(s.record_positions.len(), cfg.n_records);
            prop_assert_eq!(s.record_positions[0], 1 + s.prefix);
            prop_assert!(s.prefix <= cfg.max_prefix);
            let mut keys = Vec::new();
            for (r, &p) in s.record_positions.iter().enumerate() {
                let key = &s.tokens[p..p + cfg.key_len];
                prop_assert!(key.iter().all(|&t| t >= kb && t < vb));
                let val = &s.tokens[p + cfg.key_len..p + cfg.key_len + cfg.val_len];
                prop_assert!(val.iter().all(|&t| t >= vb && (t as usize) < cfg.vocab_size()));
                if r + 1 < cfg.n_records {
                    let gap = s.record_positions[r + 1] - p - cfg.key_len - cfg.val_len;
                    prop_assert!(gap <= cfg.max_gap);
                }
                keys.push(key.to_vec());
            }
            let mut dedup = keys.clone();
            dedup.sort();
            dedup.dedup();
            prop_assert_eq!(dedup.len(), keys.len(), "keys must be distinct");
            prop_assert_eq!(s.queries.len(), cfg.n_queries);
            let mut targets: Vec<usize> = s.queries.iter().map(|q| q.record_index).collect();
            targets.sort();
            targets.dedup();
            prop_assert_eq!(targets.len(), cfg.n_queries);
            for q in &s.queries {
                prop_assert_eq!(s.tokens[q.query_pos], QUERY);
                prop_assert_eq!(q.source_key_pos, s.record_positions[q.record_index]);
                prop_assert_eq!(q.source_value_pos, q.source_key_pos + cfg.key_len);
                prop_assert_eq!(&s.tokens[q.query_pos + 1..q.answer_pos], &keys[q.record_index][..]);
                prop_assert_eq!(&s.tokens[q.answer_pos..q.answer_pos + cfg.val_len], &q.answer[..]);
                prop_assert_eq!(&s.tokens[q.source_value_pos..q.source_value_pos + cfg.val_len], &q.answer[..]);
                prop_assert_eq!(q.residue_group, q.source_key_pos % cfg.residue_modulus);
                prop_assert!(q.source_value_pos + cfg.val_len <= q.query_pos);
            }
            // Every position the model is scored on predicts an answer token.
            for (q, inputs) in s.queries.iter().zip(s.answer_inputs()) {
                for (i, p) in inputs.into_iter().enumerate() {
                    prop_assert_eq!(s.tokens[p + 1], q.answer[i]);
                }
            }
            // Every training sequence has a layout training draws.
            prop_assert!(cfg.layout_probability(&s) > 0.0);
        }
    }
    Ok(())
}

/// The same (seed, stream) gives the same batch; another stream gives another.
#[test]
fn batches_are_a_function_of_seed_and_stream() {
    let strategy = (task_config(), any::<u64>(), 0u64..1000);
    common::runner("task-streams", 64, Some("proptest-regressions/train_task.txt"))
        .run(&strategy, |(cfg, seed, stream)| {
            let a = cfg.batch(seed, stream, 4);
            prop_assert_eq!(&a, &cfg.batch(seed, stream, 4));
            // Another stream differs somewhere unless the task has almost no randomness.
            if cfg.n_val > 1 && cfg.n_records > 1 {
                prop_assert_ne!(&a, &cfg.batch(seed, stream + 1, 4));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn training_layouts_cover_every_phase() {
    // Randomised paddings: over a few batches the source keys fall in every residue group.
    let cfg = TaskConfig::default();
    let mut seen = vec![false; cfg.residue_modulus];
    for stream in 0..20 {
        for s in cfg.batch(1, stream, 32) {
            for q in &s.queries {
                seen[q.residue_group] = true;
            }
        }
    }
    assert!(seen.iter().all(|&b| b), "groups never seen: {seen:?}");
}

#[test]
fn records_serialise_to_json_and_back() {
    let cfg = TaskConfig::default();
    let s = &cfg.batch(0, 0, 1)[0];
    let text = serde_json::to_string(s).unwrap();
    let back: phasekv::task::Sample = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, s);
    assert!(text.contains("source_key_pos") && text.contains("residue_group"));
}

#[test]
fn invalid_task_configs_name_the_field() {
    let mut c = TaskConfig::default();
    c.n_queries = c.n_records + 1;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("task.n_queries"), "{e}");
    let c = TaskConfig { n_key: 3, ..TaskConfig::default() };
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("task.n_records") && e.contains("distinct keys"), "{e}");
}

/// Fewer records (a curriculum's easier sequences) keep the sequence length, and every query
/// still points at one of them.
#[test]
fn fewer_records_keep_the_length() {
    let strategy = (task_config(), any::<u64>(), 1usize..13);
    common::runner("task-fewer-records", 32, Some("proptest-regressions/train_task.txt"))
        .run(&strategy, |(cfg, seed, k)| fewer_records_case(cfg, seed, k))
        .unwrap();
}

fn fewer_records_case(cfg: TaskConfig, seed: u64, k: usize) -> Result<(), TestCaseError> {
    {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let s = cfg.sample_records(&mut rng, k, cfg.max_prefix, &vec![cfg.max_gap; cfg.n_records]);
        let k = k.min(cfg.n_records);
        prop_assert_eq!(s.tokens.len(), cfg.seq_len());
        prop_assert_eq!(s.record_positions.len(), k);
        prop_assert_eq!(s.queries.len(), cfg.n_queries.min(k));
        for q in &s.queries {
            prop_assert_eq!(&s.tokens[q.answer_pos..q.answer_pos + cfg.val_len], &q.answer[..]);
            prop_assert!(q.record_index < k);
        }
    }
    Ok(())
}

prop_compose! {
    /// A task that can build phase families: the query block follows the records and the
    /// prefix range holds a whole period of residues.
    fn family_task()(base in task_config(), m in 1usize..30, extra in 0usize..6, tail in 0usize..6, first in any::<bool>())
        -> TaskConfig {
        TaskConfig {
            residue_modulus: m,
            max_prefix: m - 1 + extra,
            query_placement: QueryPlacement::AfterRecords,
            max_tail: tail,
            scored_query: if first { ScoredQuery::First } else { ScoredQuery::Last },
            ..base
        }
    }
}

/// A phase family holds one prompt per residue group; the prompts are one prompt shifted
/// (same tokens after the shift, same depth for every query), and each has a training layout.
#[test]
fn phase_families_differ_only_in_phase() {
    let strategy = (family_task(), any::<u64>());
    common::runner("task-phase-family", 64, Some("proptest-regressions/train_task.txt"))
        .run(&strategy, |(cfg, seed)| {
            use rand::SeedableRng;
            cfg.validate().unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let family = cfg.phase_family(&mut rng, None).unwrap();
            let m = cfg.residue_modulus;
            prop_assert_eq!(family.len(), m);
            let i = layout::scored(&cfg, &family[0]).unwrap();
            let base = &family.iter().min_by_key(|s| s.prefix).unwrap();
            for (g, s) in family.iter().enumerate() {
                prop_assert_eq!(s.tokens.len(), cfg.seq_len());
                prop_assert_eq!(s.queries[i].residue_group, g);
                prop_assert!(cfg.layout_probability(s) > 0.0);
                prop_assert_eq!(cfg.layout_probability(s), cfg.layout_probability(base));
                let delta = s.prefix - base.prefix;
                prop_assert_eq!(&s.tokens[1 + delta..], &base.tokens[1..cfg.seq_len() - delta]);
                for (q, b) in s.queries.iter().zip(&base.queries) {
                    prop_assert_eq!(depth(q), depth(b));
                    prop_assert_eq!(s.tokens[q.query_pos], QUERY);
                    prop_assert_eq!(&s.tokens[q.answer_pos..q.answer_pos + cfg.val_len], &q.answer[..]);
                    prop_assert_eq!(&s.tokens[q.source_value_pos..q.source_value_pos + cfg.val_len], &q.answer[..]);
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Issue 17's task shape (8 records, the query block after the records, the first query
/// scored): phase families give every residue group the same depth distribution (largest CDF
/// difference 0), the elimination-only reader sits at chance, and the first run's task shows
/// what it replaces (a depth CDF gap far from 0 under its own protocol of rejection-sampled
/// training layouts, and elimination answering the scored last query outright).
#[test]
fn the_phase_family_task_has_no_depth_confound_and_no_elimination_shortcut() {
    use rand::SeedableRng;
    let task = TaskConfig {
        query_placement: QueryPlacement::AfterRecords,
        max_tail: 8,
        scored_query: ScoredQuery::First,
        ..TaskConfig::default()
    };
    task.validate().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    let prompts: Vec<_> = (0..100).flat_map(|_| task.phase_family(&mut rng, None).unwrap()).collect();
    assert_eq!(prompts.len(), 100 * task.residue_modulus);
    assert_eq!(max_depth_cdf_gap(&task, &prompts), 0.0);
    let chance = task.chance_in_context();
    assert_eq!(elimination_baseline(&task, &prompts), chance);
    assert!(prompts.iter().all(|s| task.layout_probability(s) > 0.0));
    // The depths cover a wide range, so a depth effect cannot hide in a few positions.
    let depths: std::collections::BTreeSet<usize> =
        prompts.iter().map(|s| depth(&s.queries[layout::scored(&task, s).unwrap()])).collect();
    assert!(depths.len() >= 25, "{} distinct depths", depths.len());
    let reach = layout::reachable_positions(&task, &prompts);
    eprintln!("distinct depths {}, reachable key positions per group {:?}", depths.len(), reach);
    assert!(reach.iter().all(|&r| r >= 2), "{reach:?}");

    // The first run's task: the last of 8 queries for 8 records is answered by elimination,
    // and training layouts sorted into residue groups have depth distributions that differ.
    let old = TaskConfig::default();
    let samples: Vec<_> = (0..40).flat_map(|stream| old.batch(5, stream, 64)).collect();
    assert_eq!(elimination_baseline(&old, &samples), 1.0);
    let gap = max_depth_cdf_gap(&old, &samples);
    assert!(gap > 0.3, "first-run depth CDF gap {gap}");
}

#[test]
fn phase_families_refuse_a_task_that_cannot_build_them() {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let e = TaskConfig::default().phase_family(&mut rng, None).unwrap_err().to_string();
    assert!(e.contains("task.query_placement") && e.contains("after_records"), "{e}");
    let short = TaskConfig { query_placement: QueryPlacement::AfterRecords, max_prefix: 10, ..TaskConfig::default() };
    let e = short.phase_family(&mut rng, None).unwrap_err().to_string();
    assert!(e.contains("task.max_prefix") && e.contains("at least residue_modulus - 1 = 23"), "{e}");
    let bad_tail = TaskConfig { max_tail: 3, ..TaskConfig::default() };
    let e = bad_tail.validate().unwrap_err().to_string();
    assert!(e.contains("task.max_tail") && e.contains("must be 0"), "{e}");
}

/// In-sequence phase families: the prefix and the gaps before the target are redrawn per
/// member from their training ranges, so the records before the target move independently of
/// it; the target lands in every group, and the scored query's depth and every layout's
/// training probability are the family's.
#[test]
fn in_sequence_families_redraw_the_layout_before_the_target_only() {
    let strategy = (family_task(), any::<u64>());
    common::runner("task-phase-family-in-sequence", 64, Some("proptest-regressions/train_task.txt"))
        .run(&strategy, |(cfg, seed)| {
            use rand::SeedableRng;
            cfg.validate().unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let family = cfg.family(&mut rng, None, layout::FamilyShift::BeforeTarget).unwrap();
            prop_assert_eq!(family.len(), cfg.residue_modulus);
            let i = layout::scored(&cfg, &family[0]).unwrap();
            let (d0, r0, p0) =
                (depth(&family[0].queries[i]), family[0].queries[i].record_index, cfg.layout_probability(&family[0]));
            let rec = cfg.key_len + cfg.val_len;
            for (g, s) in family.iter().enumerate() {
                let q = &s.queries[i];
                prop_assert_eq!(s.tokens.len(), cfg.seq_len());
                prop_assert_eq!(q.residue_group, g);
                prop_assert_eq!(q.record_index, r0);
                prop_assert_eq!(depth(q), d0);
                prop_assert!(s.prefix <= cfg.max_prefix);
                prop_assert!(s.record_positions.windows(2).all(|w| w[1] - w[0] - rec <= cfg.max_gap));
                prop_assert_eq!(cfg.layout_probability(s), p0);
                prop_assert!(p0 > 0.0);
            }
            Ok(())
        })
        .unwrap();
}
