//! The retrieval-task generator: layout, recorded positions, determinism, validation.

use phasekv::task::{TaskConfig, BOS, QUERY};
use proptest::prelude::*;

prop_compose! {
    fn task_config()(
        n_key in 4usize..40, n_val in 2usize..40, n_filler in 1usize..5,
        key_len in 1usize..3, val_len in 1usize..3,
        max_prefix in 0usize..10, max_gap in 0usize..5,
        records in 1usize..13, queries in 1usize..13, residue_modulus in 1usize..30,
    ) -> TaskConfig {
        // n_records <= distinct keys, n_queries <= n_records, by construction.
        let n_records = records.min(n_key.pow(key_len as u32));
        let n_queries = queries.min(n_records);
        TaskConfig { n_key, n_val, n_filler, key_len, val_len, n_records, n_queries,
                     max_prefix, max_gap, residue_modulus }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every recorded position points at what it claims, keys are distinct, the length is the
    /// declared one, and every query asks for a record that precedes it.
    #[test]
    fn records_keep_every_position(cfg in task_config(), seed in any::<u64>(), stream in 0u64..1000) {
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
        }
    }

    /// The same (seed, stream) gives the same batch; another stream gives another.
    #[test]
    fn batches_are_a_function_of_seed_and_stream(cfg in task_config(), seed in any::<u64>(), stream in 0u64..1000) {
        let a = cfg.batch(seed, stream, 4);
        prop_assert_eq!(&a, &cfg.batch(seed, stream, 4));
        // Another stream differs somewhere unless the task has almost no randomness.
        if cfg.n_val > 1 && cfg.n_records > 1 {
            prop_assert_ne!(&a, &cfg.batch(seed, stream + 1, 4));
        }
    }
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
    let mut c = TaskConfig::default();
    c.n_key = 3;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("task.n_records") && e.contains("distinct keys"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Fewer records (a curriculum's easier sequences) keep the sequence length, and every
    /// query still points at one of them.
    #[test]
    fn fewer_records_keep_the_length(cfg in task_config(), seed in any::<u64>(), k in 1usize..13) {
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
}
