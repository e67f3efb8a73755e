//! How many units one `phasekv reproduce` process runs at once (`--jobs`): by default one per
//! core its shard may use, and no more than its available memory holds at
//! [`UNIT_MEMORY_BYTES`] a unit.

use crate::{Error, Result};

/// The most units one process runs at once.
pub const MAX_JOBS: usize = 256;

/// Memory set aside per running unit by the default: what an emitted Slurm array task requests
/// (`--slurm-mem`'s default, 2 GiB). A v2-sized model unit peaks at a few hundred MiB
/// (`reproduce --quick`: 405 MiB one unit at a time, 606 MiB two at once).
pub const UNIT_MEMORY_BYTES: u64 = 2 << 30;

/// `--jobs`: `given` when in `1..=MAX_JOBS`, else the error naming the flag and its range;
/// by default `cpus / shards`, capped at `available_memory / UNIT_MEMORY_BYTES` when the
/// available memory is known, at least 1 and at most [`MAX_JOBS`].
pub fn jobs(given: Option<usize>, cpus: usize, shards: usize, available_memory: Option<u64>) -> Result<usize> {
    match given {
        Some(j) if (1..=MAX_JOBS).contains(&j) => Ok(j),
        Some(j) => Err(Error::invalid("--jobs", format!("must be in 1..={MAX_JOBS}, got {j}"))),
        None => {
            let by_cpu = cpus / shards.max(1);
            let by_memory =
                available_memory.map_or(usize::MAX, |m| usize::try_from(m / UNIT_MEMORY_BYTES).unwrap_or(usize::MAX));
            Ok(by_cpu.min(by_memory).clamp(1, MAX_JOBS))
        }
    }
}

/// This machine's available memory in bytes (`MemAvailable` of `/proc/meminfo`), or `None`
/// where it cannot be read.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
