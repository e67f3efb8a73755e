//! Shards: which units one invocation of a sharded reproduction runs (`--shard i/n`, or a
//! Slurm array task).

use super::unit::Unit;
use crate::{Error, Result};

/// Parses `i/n` (0-based `i < n`).
pub fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || Error::invalid("--shard", format!("must be i/n with 0 <= i < n, or slurm, got {s:?}"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The shard of a Slurm array task, from `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_MIN` and
/// `SLURM_ARRAY_TASK_COUNT` (as given, `None` where unset): `(id - min, count)`.
pub fn slurm_shard(id: Option<&str>, min: Option<&str>, count: Option<&str>) -> Result<(usize, usize)> {
    let var = |name: &str, v: Option<&str>| -> Result<usize> {
        let v = v.ok_or_else(|| {
            Error::invalid("--shard", format!("slurm needs {name}, which is not set (not inside a Slurm array job?)"))
        })?;
        v.trim().parse().map_err(|_| Error::invalid("--shard", format!("{name} must be a number, got {v:?}")))
    };
    let id = var("SLURM_ARRAY_TASK_ID", id)?;
    let min = match min {
        Some(m) => var("SLURM_ARRAY_TASK_MIN", Some(m))?,
        None => 0,
    };
    let count = var("SLURM_ARRAY_TASK_COUNT", count)?;
    if id < min || id - min >= count {
        return Err(Error::invalid(
            "--shard",
            format!(
                "SLURM_ARRAY_TASK_ID {id} is outside the array {min}..{} (SLURM_ARRAY_TASK_MIN, _COUNT)",
                min + count
            ),
        ));
    }
    Ok((id - min, count))
}

/// The units of shard `i` of `n`: `i, i+n, i+2n, ...`. A shard that would be empty (more parts
/// than units) is an error naming the allowed range.
pub fn shard(units: &[Unit], i: usize, n: usize) -> Result<Vec<Unit>> {
    if n == 0 || i >= n {
        return Err(Error::invalid("--shard", format!("must be i/n with 0 <= i < n, got {i}/{n}")));
    }
    if n > units.len() {
        return Err(Error::invalid(
            "--shard",
            format!("{i}/{n} splits a plan of {} units into {n} parts; n must be 1..={}", units.len(), units.len()),
        ));
    }
    Ok(units.iter().enumerate().filter(|(k, _)| k % n == i).map(|(_, u)| u.clone()).collect())
}
