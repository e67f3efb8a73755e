//! `phasekv reproduce --emit-slurm`: write a Slurm array job for the plan.

use phasekv::reproduce::{self, Plan};
use std::path::Path;
use std::process::ExitCode;

pub(super) fn emit_slurm(
    plan: &Plan,
    name: &str,
    out: &Path,
    dir: &Path,
    tasks: usize,
    mem: &str,
) -> anyhow::Result<ExitCode> {
    let abs = |p: &Path| std::path::absolute(p).map_err(|e| phasekv::Error::io(p, e));
    let dir = abs(dir)?;
    let out = abs(out)?;
    // Refused before anything is computed or written (emit checks again).
    reproduce::slurm::check_mem(mem)?;
    let minutes = if tasks >= 1 && tasks <= plan.units()?.len() {
        reproduce::slurm::task_minutes(plan, &out, tasks)?
    } else {
        0 // refused by emit, naming the range
    };
    let job = reproduce::slurm::SlurmJob {
        exe: std::env::current_exe().map_err(|e| phasekv::Error::io(Path::new("the phasekv executable"), e))?,
        plan_file: dir.join("plan.json"),
        out: out.clone(),
        dir: dir.clone(),
        tasks,
        mem: mem.to_string(),
        minutes,
        name: format!(
            "phasekv-{}",
            name.chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
                .collect::<String>()
        ),
    };
    reproduce::slurm::emit(plan, &job)?;
    println!("{} units in {tasks} array tasks of {minutes} min each, output {}", plan.units()?.len(), out.display());
    println!("submit: sh {}", dir.join(reproduce::slurm::SUBMIT_SCRIPT).display());
    Ok(ExitCode::SUCCESS)
}
