//! Upper bounds on every size a user can give, in one place, and the one bounded file read.
//!
//! Each bound is chosen so that the largest accepted input fits this project's machines
//! (a 2-core, 24 GiB build box shared by several jobs): an input above a bound is rejected
//! before anything is allocated or computed, with one line naming the field, the value and
//! the allowed range. [`TABLE`] lists them all; the table of limits in `theory/limits.md` is generated from
//! it (`markdown_table`) and a test keeps the two equal.
//!
//! Files are read only when they are regular files (not a FIFO, a device such as `/dev/zero`
//! behind a symlink, or a directory) and no larger than a cap, so no read is unbounded.

use crate::{Error, Result};
use std::io::Read;
use std::path::Path;

/// Key, value and filler vocabulary sizes (`task.n_key`, `task.n_val`, `task.n_filler`).
pub const MAX_VOCAB_PART: usize = 1 << 20;
/// Tokens per key or value (`task.key_len`, `task.val_len`).
pub const MAX_KEY_LEN: usize = 64;
/// Records and queries per sequence (`task.n_records`, `task.n_queries`).
pub const MAX_RECORDS: usize = 4096;
/// Prefix padding and gap (`task.max_prefix`, `task.max_gap`).
pub const MAX_PADDING: usize = 1 << 16;
/// Residue modulus (`task.residue_modulus`, `audit analyze --modulus`).
pub const MAX_MODULUS: usize = 4096;
/// Tokens per sequence (`task.seq_len()`, computed with checked arithmetic).
pub const MAX_SEQ_LEN: usize = 1 << 16;
/// Hidden and MLP widths (`model.d_model`, `model.d_ff`).
pub const MAX_WIDTH: usize = 1 << 14;
/// Head width (`model.d_head`).
pub const MAX_D_HEAD: usize = 1024;
/// Query and key/value heads (`model.n_head`, `model.n_kv_head`).
pub const MAX_HEADS: usize = 256;
/// Decoder blocks (`model.n_layer`).
pub const MAX_LAYERS: usize = 256;
/// Trainable parameters of a model (embedding, blocks, head): 2^28 f32 values with their
/// gradient and two AdamW moments are 4 GiB.
pub const MAX_PARAMS: u64 = 1 << 28;
/// Estimated f32 values one training step holds (see `RunConfig::activation_floats`, 2-10 %
/// above the measured peak RSS): 2^31 values are 8 GiB, a third of the build box.
pub const MAX_ACTIVATION_FLOATS: u64 = 1 << 31;
/// Optimiser steps and every step count of a config (`train.steps`, `warmup_steps`,
/// `curriculum_steps`, `eval_every`, `checkpoint_every`).
pub const MAX_STEPS: usize = 100_000_000;
/// Timed steps of `train --bench`.
pub const MAX_BENCH_STEPS: usize = 100_000;
/// Sequences per training step (`train.batch_size`).
pub const MAX_BATCH: usize = 1 << 16;
/// Held-out evaluation sequences (`train.eval_samples`).
pub const MAX_EVAL_SAMPLES: usize = 1 << 20;
/// Tokens held in memory at once by an evaluation or a prompt set (`eval_samples * seq_len`,
/// `--samples * M * seq_len`): 2^27 token ids are 512 MiB.
pub const MAX_HELD_TOKENS: u64 = 1 << 27;
/// Prompts per residue group (`eval`, `analyze knockout|gates`, `audit export` `--samples`).
pub const MAX_SAMPLES_PER_GROUP: usize = 100_000;
/// Work of `eval` and `analyze knockout` (forward passes times the multiply-adds of one,
/// `lab::forward_work`), checked before any work. The committed reproduction's w8s4 model is
/// 2.1e7 units per prompt; issue 47 measured `eval --samples 40000` (9.6e5 prompts, 2.0e13
/// units) at an estimated 1.75-2.8 h, about 2.5e9 units/s, so the largest accepted evaluation
/// takes about an hour there: 17 600 prompts per group on that model (the pre-registered 240
/// are 1.2e11 units). A load of 13 (2026-12-03) made 960 prompts take 14.9 s in the test
/// profile, start included.
pub const MAX_LAB_WORK: u64 = 1 << 43;
/// Same-layout reference prompts per knocked-out prompt (`analyze knockout --reference`).
pub const MAX_KNOCKOUT_REFERENCE: usize = 1024;
/// Window `W` of a preset run through the invariant harness (`kernel check --preset`).
pub const MAX_CHECK_WINDOW: usize = 512;
/// Work of `kernel check` (`--cases` times the work of one case on the preset), in units of
/// `(W + 2T + 16) * n(T) * W * d * d_h` at the longest case (`conformance::harness::check_work`).
/// Measured in the test profile (2026-12-03, load about 1 on the 2-core box): w512s1 with 4
/// reference cases is 4.4e10 units and took 130 s, almost all of it K4's 512 probes per case,
/// so the largest accepted check (6 such cases) takes about 3.5 minutes there. W alone bounds
/// nothing: at W = 512 a case with S = 256 is 74 times cheaper than with S = 1.
pub const MAX_CHECK_WORK: u64 = 1 << 36;
/// Property-test cases per invariant (`kernel check --cases`, a plan's `kernel_cases`).
pub const MAX_CHECK_CASES: u32 = 100_000;
/// Sequence length of `kernel bench --tokens`.
pub const MAX_BENCH_TOKENS: usize = 1 << 20;
/// `kernel bench --d-model` and `--d-head`.
pub const MAX_BENCH_WIDTH: usize = 4096;
/// Timed seconds per row of `kernel bench --seconds`.
pub const MAX_BENCH_SECONDS: f64 = 3600.0;
/// Work `kernel validate` may spend on a dump, in units of `(2S + 2) * B * n * W * max(d, d_h)`
/// (the reference runs and the phase profile; grows as `W^2` when `S ~ W`). Measured in the
/// test profile: 2^28 units (W = S = 4096, T = 8192, d = 4) took 73 s, so the largest
/// accepted dump takes about 5 minutes there, with progress shown.
pub const MAX_VALIDATION_WORK: u64 = 1 << 30;
/// Bytes `kernel validate` may hold for a dump, estimated before any work
/// (`conformance::validate::memory_estimate`: the dump and, per run compared, the f64 reference
/// and its low-precision twin in f64): 8 GiB, a third of the build box.
pub const MAX_VALIDATION_BYTES: u64 = 8 << 30;
/// A JSON file read whole: configs, `metadata.json`, `metrics.json`, results.
pub const MAX_JSON_BYTES: u64 = 64 << 20;
/// A JSONL file of per-sample results (`audit analyze`).
pub const MAX_JSONL_BYTES: u64 = 1 << 30;
/// Result lines `audit analyze` reads: its permutation test and resamplings cost
/// [`crate::analysis::phase::PERMUTATION_ROUNDS`] passes over them (2^20 lines: about 2^31
/// steps, under a minute), and each line read is held as an outcome (about 200 bytes).
pub const MAX_RESULT_LINES: u64 = 1 << 20;
/// A kernel dump (`.safetensors` or one `.npy`).
pub const MAX_DUMP_BYTES: u64 = 2 << 30;
/// A weights or checkpoint file of a run.
pub const MAX_WEIGHTS_BYTES: u64 = 8 << 30;

/// One documented bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// The field or flag, as the user writes it.
    pub field: &'static str,
    /// The largest accepted value, as printed.
    pub max: &'static str,
    /// What it bounds, and why.
    pub what: &'static str,
}

macro_rules! limit {
    ($field:expr, $max:expr, $what:expr) => {
        Limit { field: $field, max: $max, what: $what }
    };
}

/// Every bound, in the order of the table in `theory/limits.md`. `max` is the constant's value spelt out
/// (a test checks each against the constant).
pub const TABLE: &[Limit] = &[
    limit!("task.n_key, task.n_val, task.n_filler", "1048576", "vocabulary parts (MAX_VOCAB_PART)"),
    limit!("task.key_len, task.val_len", "64", "tokens per key or value (MAX_KEY_LEN)"),
    limit!("task.n_records, task.n_queries", "4096", "records and queries per sequence (MAX_RECORDS)"),
    limit!("task.max_prefix, task.max_gap", "65536", "padding (MAX_PADDING)"),
    limit!("task.residue_modulus, audit analyze --modulus", "4096", "residue groups (MAX_MODULUS)"),
    limit!("sequence length (from the task)", "65536", "tokens per sequence, checked arithmetic (MAX_SEQ_LEN)"),
    limit!("model.d_model, model.d_ff", "16384", "widths (MAX_WIDTH)"),
    limit!("model.d_head", "1024", "head width (MAX_D_HEAD)"),
    limit!("model.n_head, model.n_kv_head", "256", "heads (MAX_HEADS)"),
    limit!("model.n_layer", "256", "decoder blocks (MAX_LAYERS)"),
    limit!(
        "model parameters (from the config)",
        "268435456",
        "2^28 f32 with gradient and AdamW moments: 4 GiB (MAX_PARAMS)"
    ),
    limit!("activations per step (from the config)", "2147483648", "2^31 f32 estimated: 8 GiB (MAX_ACTIVATION_FLOATS)"),
    limit!(
        "train.steps, warmup_steps, curriculum_steps, eval_every, checkpoint_every",
        "100000000",
        "step counts (MAX_STEPS)"
    ),
    limit!("train --bench", "100000", "timed training steps (MAX_BENCH_STEPS)"),
    limit!("train.batch_size", "65536", "sequences per step (MAX_BATCH)"),
    limit!("train.eval_samples", "1048576", "held-out sequences (MAX_EVAL_SAMPLES)"),
    limit!(
        "tokens held (eval_samples or --samples x groups, x sequence length)",
        "134217728",
        "2^27 token ids: 512 MiB (MAX_HELD_TOKENS)"
    ),
    limit!("eval, analyze, audit export --samples", "100000", "prompts per residue group (MAX_SAMPLES_PER_GROUP)"),
    limit!("analyze knockout --reference", "1024", "reference prompts per prompt (MAX_KNOCKOUT_REFERENCE)"),
    limit!(
        "eval, analyze knockout (work of the prompts)",
        "8796093022208",
        "2^43 units: forward passes x multiply-adds each, about 1 h (MAX_LAB_WORK)"
    ),
    limit!("kernel check --preset wWsS", "512", "window W in the invariant harness (MAX_CHECK_WINDOW)"),
    limit!(
        "kernel check (work of --cases on the preset)",
        "68719476736",
        "2^36 units of (W+2T+16) n W d d_h at T = 2W+2S+3, about 3.5 min (MAX_CHECK_WORK)"
    ),
    limit!("kernel bench --tokens", "1048576", "sequence length (MAX_BENCH_TOKENS)"),
    limit!("kernel bench --d-model, --d-head", "4096", "widths (MAX_BENCH_WIDTH)"),
    limit!("kernel bench --seconds", "3600", "finite, above 0 (MAX_BENCH_SECONDS)"),
    limit!(
        "kernel validate (work of a dump)",
        "1073741824",
        "2^30 units of (2S+2) B n W d, about 5 min (MAX_VALIDATION_WORK)"
    ),
    limit!(
        "kernel validate (memory of a dump)",
        "8589934592",
        "bytes: the dump and two references in f64, estimated (MAX_VALIDATION_BYTES)"
    ),
    limit!(
        "JSON files (configs, metadata.json, metrics.json)",
        "67108864",
        "bytes, regular files only (MAX_JSON_BYTES)"
    ),
    limit!("audit analyze results JSONL", "1073741824", "bytes, regular files only (MAX_JSONL_BYTES)"),
    limit!(
        "audit analyze results lines",
        "1048576",
        "lines, counted before any is parsed: the permutation test's work (MAX_RESULT_LINES)"
    ),
    limit!("kernel dumps (.safetensors, each .npy)", "2147483648", "bytes, regular files only (MAX_DUMP_BYTES)"),
    limit!("weights and checkpoints", "8589934592", "bytes, regular files only (MAX_WEIGHTS_BYTES)"),
];

/// The table of limits in `theory/limits.md`, generated from [`TABLE`].
pub fn markdown_table() -> String {
    let mut out = String::from("| field | largest accepted | bounds |\n|---|---|---|\n");
    for l in TABLE {
        out.push_str(&format!("| {} | {} | {} |\n", l.field, l.max, l.what));
    }
    out
}

/// `v <= max`, else an error naming `field`, the value and the range `min..=max`.
pub fn check_range(field: &str, v: usize, min: usize, max: usize) -> Result<()> {
    if v < min || v > max {
        return Err(Error::invalid(field, format!("must be in {min}..={max}, got {v}")));
    }
    Ok(())
}

/// A computed size `v` (or `None` when its arithmetic overflowed) at most `max`, else an
/// error naming `field`, the value and the limit.
pub fn check_product(field: &str, v: Option<u64>, max: u64) -> Result<u64> {
    match v {
        Some(v) if v <= max => Ok(v),
        Some(v) => Err(Error::invalid(field, format!("{v} is above the limit of {max}"))),
        None => Err(Error::invalid(field, format!("overflows 64 bits; the limit is {max}"))),
    }
}

/// `a * b * ...` in `u64`, `None` on overflow.
pub fn product(factors: &[usize]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f as u64))
}

/// What kind of file system object `meta` is, in words (for "not a regular file").
fn kind(meta: &std::fs::Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Opens `path` for reading when it is a regular file (symlinks followed) of at most `cap`
/// bytes; a FIFO, a device, a directory or a larger file is an error naming the path, before
/// anything is read. Returns the file and its size; read it through `take(cap + 1)`.
pub fn open_regular(path: &Path, cap: u64) -> Result<(std::fs::File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let check = |meta: &std::fs::Metadata| -> Result<()> {
        if !meta.is_file() {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!("is {}; only regular files are read", kind(meta)),
            });
        }
        if meta.len() > cap {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!("is {} bytes, above the limit of {cap} bytes", meta.len()),
            });
        }
        Ok(())
    };
    check(&meta)?;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // The object opened may not be the one examined (a rename in between): check it again.
    check(&file.metadata().map_err(|e| Error::io(path, e))?)?;
    Ok((file, meta.len()))
}

/// Reads `path` whole when it is a regular file (symlinks followed) of at most `cap` bytes;
/// a FIFO, a device, a directory or a larger file is an error naming the path, before
/// anything is read. The one bounded read of the crate.
pub fn read_file(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let (file, len) = open_regular(path, cap)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap + 1).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > cap {
        return Err(Error::File { path: path.to_path_buf(), reason: format!("grew above the limit of {cap} bytes") });
    }
    Ok(bytes)
}

/// [`read_file`] as UTF-8 text.
pub fn read_text(path: &Path, cap: u64) -> Result<String> {
    String::from_utf8(read_file(path, cap)?)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("is not UTF-8 text: {e}") })
}

/// A stable 64-bit content hash (FNV-1a), as `fnv1a64:<16 hex digits>`: the identity of a
/// run's config, its weights, and the checksum of its checkpoints.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut h = ContentHasher::new();
    h.update(bytes);
    h.finish()
}

/// [`content_hash`] of bytes that arrive in pieces (a file streamed), equal to the hash of
/// their concatenation.
#[derive(Clone, Debug)]
pub struct ContentHasher(u64);

impl Default for ContentHasher {
    fn default() -> Self {
        ContentHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl ContentHasher {
    /// The hash of no bytes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hashes `bytes` after what came before.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash, as `fnv1a64:<16 hex digits>`.
    pub fn finish(&self) -> String {
        format!("fnv1a64:{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_values_are_the_constants() {
        let want: &[(&str, u64)] = &[
            ("task.n_key", MAX_VOCAB_PART as u64),
            ("task.key_len", MAX_KEY_LEN as u64),
            ("task.n_records", MAX_RECORDS as u64),
            ("task.max_prefix", MAX_PADDING as u64),
            ("task.residue_modulus", MAX_MODULUS as u64),
            ("sequence length", MAX_SEQ_LEN as u64),
            ("model.d_model", MAX_WIDTH as u64),
            ("model.d_head", MAX_D_HEAD as u64),
            ("model.n_head", MAX_HEADS as u64),
            ("model.n_layer", MAX_LAYERS as u64),
            ("model parameters", MAX_PARAMS),
            ("activations per step", MAX_ACTIVATION_FLOATS),
            ("train.steps", MAX_STEPS as u64),
            ("train --bench", MAX_BENCH_STEPS as u64),
            ("train.batch_size", MAX_BATCH as u64),
            ("train.eval_samples", MAX_EVAL_SAMPLES as u64),
            ("tokens held", MAX_HELD_TOKENS),
            ("eval, analyze", MAX_SAMPLES_PER_GROUP as u64),
            ("analyze knockout", MAX_KNOCKOUT_REFERENCE as u64),
            ("eval, analyze knockout (work", MAX_LAB_WORK),
            ("kernel check --preset", MAX_CHECK_WINDOW as u64),
            ("kernel check (work", MAX_CHECK_WORK),
            ("kernel bench --tokens", MAX_BENCH_TOKENS as u64),
            ("kernel bench --d-model", MAX_BENCH_WIDTH as u64),
            ("kernel bench --seconds", MAX_BENCH_SECONDS as u64),
            ("kernel validate", MAX_VALIDATION_WORK),
            ("kernel validate (memory", MAX_VALIDATION_BYTES),
            ("JSON files", MAX_JSON_BYTES),
            ("audit analyze results JSONL", MAX_JSONL_BYTES),
            ("audit analyze results lines", MAX_RESULT_LINES),
            ("kernel dumps", MAX_DUMP_BYTES),
            ("weights and checkpoints", MAX_WEIGHTS_BYTES),
        ];
        assert_eq!(want.len(), TABLE.len());
        for ((prefix, value), row) in want.iter().zip(TABLE) {
            assert!(row.field.starts_with(prefix), "{prefix} vs {}", row.field);
            assert_eq!(row.max, value.to_string(), "{}", row.field);
        }
    }

    #[test]
    fn the_limits_page_holds_the_generated_table() {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/theory/limits.md")).unwrap();
        assert!(page.contains(&markdown_table()), "theory/limits.md's table differs from limits::markdown_table()");
    }

    #[test]
    fn special_files_and_large_files_are_refused_before_reading() {
        let e = read_file(Path::new("/dev/zero"), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("/dev/zero") && e.contains("character device"), "{e}");
        let e = read_file(Path::new("/"), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        let dir = std::env::temp_dir().join(format!("phasekv-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("big.json");
        std::fs::write(&f, vec![b' '; 100]).unwrap();
        let e = read_file(&f, 99).unwrap_err().to_string();
        assert!(e.contains("100 bytes") && e.contains("limit of 99"), "{e}");
        assert_eq!(read_file(&f, 100).unwrap().len(), 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn products_overflow_into_errors() {
        assert_eq!(product(&[usize::MAX, 2]), None);
        let e = check_product("x", product(&[usize::MAX, 2]), 10).unwrap_err().to_string();
        assert!(e.contains("invalid x") && e.contains("overflows"), "{e}");
        assert_eq!(check_product("x", Some(10), 10).unwrap(), 10);
        assert!(check_range("f", 0, 1, 5).unwrap_err().to_string().contains("must be in 1..=5, got 0"));
    }

    #[test]
    fn content_hash_is_stable() {
        assert_eq!(content_hash(b""), "fnv1a64:cbf29ce484222325");
        assert_ne!(content_hash(b"a"), content_hash(b"b"));
    }
}
