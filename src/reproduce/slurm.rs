//! `phasekv reproduce --emit-slurm DIR`: a plan as a Slurm array job and a dependent report job.
//!
//! `DIR/array.sbatch` runs shard `$SLURM_ARRAY_TASK_ID` of `$SLURM_ARRAY_TASK_COUNT` (through
//! `--shard slurm`) with one thread, under `srun` so that `scancel --signal=TERM` and the
//! `--signal=TERM@120` warning before the time limit reach phasekv, which checkpoints and exits
//! with status 143; the script then requeues its own task (`#SBATCH --requeue`), and the
//! requeued task resumes from the checkpoint. `DIR/report.sbatch` runs `phasekv report` over the
//! shared output once every task succeeded (`--dependency=afterok`, submitted by
//! `DIR/submit.sh`). The time request of a task is the sum of its units' measured times (from a
//! previous run in the same output) or estimates ([`super::Minutes`]), with a margin.

use super::{ModelUnit, Plan, Unit};
use crate::lab::read_json;
use crate::run_dir::atomic_write;
use crate::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Files written by [`emit`].
pub const ARRAY_SCRIPT: &str = "array.sbatch";
/// See [`ARRAY_SCRIPT`].
pub const REPORT_SCRIPT: &str = "report.sbatch";
/// See [`ARRAY_SCRIPT`].
pub const SUBMIT_SCRIPT: &str = "submit.sh";

/// Seconds before the time limit at which Slurm sends SIGTERM (`#SBATCH --signal`).
pub const SIGNAL_LEAD_SECONDS: u64 = 120;

/// What the scripts run and where.
#[derive(Clone, Debug)]
pub struct SlurmJob {
    /// The phasekv binary (absolute).
    pub exe: PathBuf,
    /// The plan file the tasks read (absolute; [`emit`] writes it into the script directory).
    pub plan_file: PathBuf,
    /// The shared output root (absolute).
    pub out: PathBuf,
    /// Where the scripts and task logs go (absolute).
    pub dir: PathBuf,
    /// Array tasks (each runs one shard).
    pub tasks: usize,
    /// Memory per task, as sbatch takes it (`2G`).
    pub mem: String,
    /// Minutes per task.
    pub minutes: u64,
    /// Job name.
    pub name: String,
}

/// A unit's measured seconds in `out` (training plus analyses, theory, kernels), if it ran there.
pub fn measured_seconds(out: &Path, unit: &Unit) -> Option<f64> {
    let num = |path: PathBuf, key: &str| -> Option<f64> {
        read_json::<serde_json::Value>(&path).ok().and_then(|v| v.get(key).and_then(|x| x.as_f64()))
    };
    match unit {
        Unit::Kernels => num(out.join("kernels").join("kernels.json"), "seconds"),
        Unit::Theory => num(out.join("theory").join("theory.json"), "seconds"),
        Unit::Model(m) => {
            let dir = out.join(ModelUnit::dir(m));
            let train = num(dir.join(crate::run_dir::METRICS_FILE), "train_seconds")?;
            Some(train + num(dir.join("unit.json"), "analysis_seconds").unwrap_or(0.0))
        }
    }
}

/// Minutes to request per task: the slowest shard's units (measured in `out` where they ran
/// before, else estimated), times 1.5, plus the SIGTERM lead and 5 minutes, rounded up.
pub fn task_minutes(plan: &Plan, out: &Path, tasks: usize) -> Result<u64> {
    let units = plan.units()?;
    // Unit k goes to task k % tasks, as in [`super::shard`]: summed in one pass, linear in
    // the units whatever `tasks` is (a shard per task was quadratic).
    if tasks == 0 || tasks > units.len() {
        return Err(Error::invalid(
            "--slurm-tasks",
            format!("must be 1..={} (the plan's units), got {tasks}", units.len()),
        ));
    }
    let mut secs = vec![0.0f64; tasks];
    for (k, u) in units.iter().enumerate() {
        secs[k % tasks] += measured_seconds(out, u).unwrap_or_else(|| plan.estimate_seconds(u));
    }
    let worst = secs.into_iter().fold(0.0f64, f64::max);
    Ok(((1.5 * worst + SIGNAL_LEAD_SECONDS as f64) / 60.0).ceil() as u64 + 5)
}

/// A path in single quotes for sh.
fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// `H:MM:00` for sbatch `--time`.
fn hours(minutes: u64) -> String {
    format!("{}:{:02}:00", minutes / 60, minutes % 60)
}

/// The array script.
pub fn array_script(job: &SlurmJob, units: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(s, "#SBATCH --job-name={}", job.name);
    let _ = writeln!(s, "#SBATCH --array=0-{}", job.tasks.saturating_sub(1));
    let _ = writeln!(s, "#SBATCH --ntasks=1");
    let _ = writeln!(s, "#SBATCH --cpus-per-task=1");
    let _ = writeln!(s, "#SBATCH --mem={}", job.mem);
    let _ = writeln!(s, "#SBATCH --time={}", hours(job.minutes));
    let _ = writeln!(s, "#SBATCH --requeue");
    let _ = writeln!(s, "#SBATCH --signal=TERM@{SIGNAL_LEAD_SECONDS}");
    let _ = writeln!(s, "#SBATCH --open-mode=append");
    let _ = writeln!(s, "#SBATCH --output={}/logs/array-%A_%a.out", slurm_pattern(&job.dir));
    let _ = write!(
        s,
        r#"# Written by `phasekv reproduce --emit-slurm`: {units} units in {tasks} tasks, one thread each.
# Submit with `sh {submit}` (this array, then the report once every task succeeded).
# Re-run failed tasks: `sbatch --array=3,5 {this}`; then `sbatch {report}`.
set -u
export RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1 OMP_NUM_THREADS=1
export PHASEKV_PROGRESS_SECS="${{PHASEKV_PROGRESS_SECS:-30}}"
echo "phasekv task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT, restart ${{SLURM_RESTART_COUNT:-0}}, $(hostname), $(date -u +%FT%TZ)"
srun --ntasks=1 --cpus-per-task=1 {exe} reproduce --plan {plan} --out {out} --shard slurm --jobs 1
status=$?
# 143: SIGTERM (time limit, preemption, scancel --signal=TERM) stopped training after a
# checkpoint; requeue this task, which resumes from it.
if [ "$status" -eq 143 ]; then
    echo "phasekv task $SLURM_ARRAY_TASK_ID stopped by SIGTERM; requeueing"
    scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"
fi
exit "$status"
"#,
        tasks = job.tasks,
        submit = job.dir.join(SUBMIT_SCRIPT).display(),
        this = job.dir.join(ARRAY_SCRIPT).display(),
        report = job.dir.join(REPORT_SCRIPT).display(),
        exe = quote(&job.exe),
        plan = quote(&job.plan_file),
        out = quote(&job.out),
    );
    s
}

/// The report script (run after the array).
pub fn report_script(job: &SlurmJob) -> String {
    format!(
        r#"#!/bin/bash
#SBATCH --job-name={name}-report
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem={mem}
#SBATCH --time=0:30:00
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --output={dir}/logs/report-%j.out
# Written by `phasekv reproduce --emit-slurm`: the ledger and figures from every task's output.
set -eu
export RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1
{exe} report --from {out} --out {out}
"#,
        name = job.name,
        mem = job.mem,
        dir = slurm_pattern(&job.dir),
        exe = quote(&job.exe),
        out = quote(&job.out),
    )
}

/// The submit script: the array, then the report with `--dependency=afterok` on it.
pub fn submit_script(job: &SlurmJob) -> String {
    format!(
        r#"#!/bin/sh
# Written by `phasekv reproduce --emit-slurm`. Prints the two job ids.
set -eu
array=$(sbatch --parsable "$@" {array})
array=${{array%%;*}}
report=$(sbatch --parsable --dependency=afterok:"$array" {report})
echo "$array $report"
"#,
        array = quote(&job.dir.join(ARRAY_SCRIPT)),
        report = quote(&job.dir.join(REPORT_SCRIPT)),
    )
}

/// `--mem` as Slurm's grammar has it: a whole number above 0 and an optional unit `K`, `M`,
/// `G` or `T` (megabytes without one); anything else is an error naming the flag.
pub fn check_mem(mem: &str) -> Result<()> {
    let digits = mem.strip_suffix(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']).unwrap_or(mem);
    let ok = !digits.is_empty()
        && digits.len() <= 12
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.bytes().any(|b| b != b'0');
    if ok {
        return Ok(());
    }
    Err(Error::invalid(
        "--slurm-mem",
        format!(
            "must be a whole number above 0 with an optional unit K, M, G or T (e.g. 2G), got {:?}",
            mem.chars().take(40).collect::<String>()
        ),
    ))
}

/// Checks every value the scripts interpolate, and that `job.dir` is new or empty and is not
/// the output: nothing of another emit, or of the run, is overwritten.
pub fn check_job(job: &SlurmJob) -> Result<()> {
    check_mem(&job.mem)?;
    let dir = job.dir.to_string_lossy();
    if dir.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            "--emit-slurm",
            format!("{:?} contains whitespace, which #SBATCH lines cannot quote; choose another directory", job.dir),
        ));
    }
    if job.name.is_empty() || !job.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(Error::invalid("job name", format!("{:?} must be of A-Z a-z 0-9 - _", job.name)));
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    if job.dir == job.out || canonical(&job.dir).is_some_and(|d| Some(d) == canonical(&job.out)) {
        return Err(Error::invalid(
            "--emit-slurm",
            format!("{} is the output (--out): the scripts' plan.json would replace the run's", job.dir.display()),
        ));
    }
    match std::fs::read_dir(&job.dir).map(|mut d| d.next().is_some()) {
        Ok(true) => Err(Error::invalid(
            "--emit-slurm",
            format!("{} exists and is not empty; give a new directory or remove it", job.dir.display()),
        )),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(&job.dir, e)),
    }
}

/// `path` for an `#SBATCH --output` filename pattern: `%` doubled, so Slurm writes it as is.
fn slurm_pattern(path: &Path) -> String {
    path.display().to_string().replace('%', "%%")
}

/// Writes `plan.json`, the three scripts and `logs/` into `job.dir` (after [`check_job`]).
pub fn emit(plan: &Plan, job: &SlurmJob) -> Result<()> {
    check_job(job)?;
    let units = plan.units()?.len();
    if job.tasks == 0 || job.tasks > units {
        return Err(Error::invalid(
            "--slurm-tasks",
            format!("must be 1..={units} (the plan's units), got {}", job.tasks),
        ));
    }
    let logs = job.dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io(&logs, e))?;
    let text = serde_json::to_string_pretty(plan).map_err(|e| Error::invalid("plan", e.to_string()))?;
    atomic_write(&job.plan_file, format!("{text}\n").as_bytes())?;
    atomic_write(&job.dir.join(ARRAY_SCRIPT), array_script(job, units).as_bytes())?;
    atomic_write(&job.dir.join(REPORT_SCRIPT), report_script(job).as_bytes())?;
    let submit = job.dir.join(SUBMIT_SCRIPT);
    atomic_write(&submit, submit_script(job).as_bytes())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in [ARRAY_SCRIPT, REPORT_SCRIPT, SUBMIT_SCRIPT] {
            let p = job.dir.join(f);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(())
}
