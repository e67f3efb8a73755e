//! The plan as a Slurm array job on a real Slurm (issue 16): `--emit-slurm` writes the array and
//! the dependent report job, and their report equals the one of one process, byte for byte; a
//! task stopped by SIGTERM (`scancel --signal=TERM`) checkpoints, requeues itself and resumes
//! exactly.
//!
//! Needs a running Slurm (`scripts/slurm-local.sh` starts a one-node one). `.ci/run` starts it
//! and sets `PHASEKV_REQUIRE_SLURM=1`, which turns a missing Slurm into a failure; without that
//! variable a machine without Slurm skips these tests with a loud message.

use crate::common;

use common::plans::{assert_same_report, phasekv_ok, scratch, tiny_sweep, write_plan};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether Slurm answers with a node that takes jobs; panics when it must (CI) and does not.
fn slurm_available() -> bool {
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
    };
    let why = match (run("scontrol", &["ping"]), run("sinfo", &["-h", "-N", "-o", "%t"])) {
        (None, _) => "`scontrol ping` failed (Slurm is not installed or slurmctld is not running)".to_string(),
        (Some(p), _) if !p.contains("is UP") => format!("slurmctld does not answer: {}", p.trim()),
        (_, Some(s)) if s.lines().any(|l| ["idle", "mix", "alloc"].contains(&l.trim())) => return true,
        (_, s) => format!("no node takes jobs (sinfo states: {})", s.unwrap_or_default().trim()),
    };
    if std::env::var("PHASEKV_REQUIRE_SLURM").is_ok_and(|v| v == "1") {
        panic!("PHASEKV_REQUIRE_SLURM=1 but Slurm is not usable: {why}; start it with scripts/slurm-local.sh");
    }
    eprintln!("\n!!!!!! SKIPPING the Slurm test: {why} (scripts/slurm-local.sh starts one) !!!!!!\n");
    false
}

fn cmd(program: &str, args: &[&str]) -> String {
    let o = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(o.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// `scontrol -o show job ID`, one line per (array) task; empty once Slurm forgot the job.
fn job_lines(id: &str) -> Vec<String> {
    let o = Command::new("scontrol").args(["-o", "show", "job", id]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect()
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))).unwrap_or("")
}

fn logs(dir: &Path) -> String {
    let mut s = String::new();
    if let Ok(rd) = std::fs::read_dir(dir.join("logs")) {
        let mut files: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            s += &format!("==> {} <==\n{}\n", f.display(), std::fs::read_to_string(&f).unwrap_or_default());
        }
    }
    s
}

/// Waits until every job in `ids` has ended; each must have completed.
fn wait_completed(ids: &[&str], job_dir: &Path, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let lines: Vec<String> = ids.iter().flat_map(|id| job_lines(id)).collect();
        let states: Vec<&str> = lines.iter().map(|l| field(l, "JobState")).collect();
        if !states.is_empty()
            && states.iter().all(|s| !matches!(*s, "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "REQUEUED"))
        {
            assert!(states.iter().all(|s| *s == "COMPLETED"), "jobs ended as {states:?}\n{}", logs(job_dir));
            return;
        }
        if t0.elapsed() > limit {
            for id in ids {
                let _ = Command::new("scancel").arg(id).status();
            }
            panic!("jobs {ids:?} still {states:?} after {limit:?}\n{}", logs(job_dir));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Emits the plan's Slurm job and submits it; returns (array job id, report job id).
fn emit_and_submit(plan_file: &Path, out: &Path, job_dir: &Path, tasks: usize) -> (String, String) {
    let o = phasekv_ok(&[
        "reproduce",
        "--plan",
        plan_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--emit-slurm",
        job_dir.to_str().unwrap(),
        "--slurm-tasks",
        &tasks.to_string(),
    ]);
    assert!(o.contains(&format!("in {tasks} array tasks")), "{o}");
    // The job inherits the environment: progress lines every second in the task logs.
    let o = Command::new("sh").arg(job_dir.join("submit.sh")).env("PHASEKV_PROGRESS_SECS", "1").output().unwrap();
    assert!(o.status.success(), "submit.sh: {}", String::from_utf8_lossy(&o.stderr));
    let ids = String::from_utf8_lossy(&o.stdout).to_string();
    let ids: Vec<&str> = ids.split_whitespace().collect();
    assert_eq!(ids.len(), 2, "submit.sh printed {ids:?}");
    let report = job_lines(ids[1]).join("\n");
    assert!(report.contains(&format!("Dependency=afterok:{}", ids[0])), "the report job waits for the array: {report}");
    (ids[0].to_string(), ids[1].to_string())
}

#[test]
fn a_slurm_array_job_gives_the_report_of_one_process() {
    if !slurm_available() {
        return;
    }
    let dir = scratch("slurm-array");
    let plan_file = dir.join("sweep.json");
    write_plan(&plan_file, &tiny_sweep(6));
    let job_dir = dir.join("job");
    let shared = dir.join("shared");
    // Three tasks for four units: task 0 runs two of them.
    let (array, report) = emit_and_submit(&plan_file, &shared, &job_dir, 3);
    let one = dir.join("one");
    phasekv_ok(&["reproduce", "--plan", plan_file.to_str().unwrap(), "--out", one.to_str().unwrap()]);
    wait_completed(&[&array, &report], &job_dir, Duration::from_secs(180));
    assert_eq!(job_lines(&array).len(), 3, "three array tasks");
    assert_same_report(&one, &shared);
    let log = logs(&job_dir);
    for i in 0..3 {
        assert!(log.contains(&format!("shard {i}/3")), "task {i} ran shard {i}/3:\n{log}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_task_stopped_by_sigterm_requeues_itself_and_resumes_exactly() {
    if !slurm_available() {
        return;
    }
    let dir = scratch("slurm-term");
    let mut plan = tiny_sweep(STEPS);
    plan.seeds = vec![0];
    plan.sweep.as_mut().unwrap().axes[1].values = vec![4.into()];
    let plan_file = dir.join("one-model.json");
    write_plan(&plan_file, &plan);
    let pf = plan_file.to_str().unwrap();
    let job_dir = dir.join("job");
    let shared = dir.join("shared");
    let (array, report) = emit_and_submit(&plan_file, &shared, &job_dir, 1);
    // The uninterrupted reference, meanwhile, on the other core.
    let reference = dir.join("reference");
    let ref_run = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(["reproduce", "--plan", pf, "--out", reference.to_str().unwrap()])
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Mid-training: SIGTERM to the task, as Slurm sends it at a time limit or on preemption.
    let run = shared.join("runs/w4-s4-seed0");
    let log = run.join("log.jsonl");
    let t0 = Instant::now();
    while std::fs::read_to_string(&log).map(|t| t.lines().count()).unwrap_or(0) < 20 {
        assert!(t0.elapsed() < Duration::from_secs(90), "training never started\n{}", logs(&job_dir));
        std::thread::sleep(Duration::from_millis(50));
    }
    let task = format!("{array}_0");
    cmd("scancel", &["--signal=TERM", &task]);
    // The task checkpoints, exits 143 and requeues itself; Slurm holds a requeued job for
    // about two minutes before it may start again, which the test shortens.
    let t0 = Instant::now();
    loop {
        let lines = job_lines(&task);
        let l = lines.first().map(String::as_str).unwrap_or("");
        if field(l, "JobState") == "PENDING" && field(l, "Restarts") == "1" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the task was not requeued: {l}\n{}", logs(&job_dir));
        std::thread::sleep(Duration::from_millis(100));
    }
    let ckpt: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoint.json")).unwrap()).unwrap();
    let stopped_at = ckpt["step"].as_u64().unwrap();
    assert!(stopped_at > 0 && (stopped_at as usize) < STEPS, "checkpoint at step {stopped_at} of {STEPS}");
    assert!(!run.join("metrics.json").exists(), "training must not have finished");
    cmd("scontrol", &["update", &format!("jobid={task}"), "StartTime=now"]);
    wait_completed(&[&array, &report], &job_dir, Duration::from_secs(180));
    let r = ref_run.wait_with_output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    let text = logs(&job_dir);
    assert!(text.contains("restart 0") && text.contains("restart 1"), "{text}");
    assert!(text.contains("stopped by SIGTERM; requeueing"), "{text}");
    // Line-based progress in the task log (stderr is not a terminal there).
    let lines = text.lines().filter(|l| l.starts_with("progress training:")).count();
    assert!(lines >= 3, "{lines} progress lines in the task log:\n{text}");
    // Resumed exactly: the same weights and the same per-step training log as without the stop.
    let a = std::fs::read(run.join("model.safetensors")).unwrap();
    let b = std::fs::read(reference.join("runs/w4-s4-seed0/model.safetensors")).unwrap();
    assert!(a == b, "the resumed model differs from the uninterrupted one (stopped at step {stopped_at})");
    let steps = |p: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(p.join("log.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("elapsed_s");
                v
            })
            .collect()
    };
    let resumed = steps(&run);
    assert_eq!(resumed.iter().filter(|v| v["kind"] == "train").count(), STEPS, "each step logged once");
    assert_eq!(resumed, steps(&reference.join("runs/w4-s4-seed0")));
    assert_same_report(&reference, &shared);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Training steps of the SIGTERM test's model (a few seconds).
const STEPS: usize = 5000;
