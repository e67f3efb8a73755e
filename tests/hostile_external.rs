//! Issue 28, failures 1-5 and 11: `kernel check --external` against kernel processes that misbehave
//! on purpose (`tests/fixtures/misbehaving_kernel.py`, standard library only). Each run must end
//! with its exit status and one line on stderr, quickly (short `--reply-timeout`s), with the
//! child and its grandchild (a `sleep` in the same process group, pids in a file) no longer
//! running, and nothing written in the working directory but the pid file. Where phasekv is
//! signalled or killed, every process of the kernel's group, taken by pid while it ran, must be
//! gone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-hostile-external-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `--external` command of the fixture in `mode`, writing its pids to `dir/pids`.
fn child(mode: &str, dir: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/misbehaving_kernel.py");
    format!("python3 {} {mode} --pidfile {}", script.display(), dir.join("pids").display())
}

fn start(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(["kernel", "check"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run phasekv")
}

struct Ended {
    code: i32,
    out: String,
    err: String,
    secs: f64,
}

/// `kernel check` with 4 cases per invariant (more when `args` say so).
fn check(dir: &Path, args: &[&str]) -> Ended {
    let mut all = args.to_vec();
    if !args.contains(&"--cases") {
        all.extend(["--cases", "4"]);
    }
    finish(start(dir, &all), Instant::now())
}

/// Waits for `child` (killed after 60 s, so a hang fails instead of blocking the suite).
fn finish(mut child: Child, started: Instant) -> Ended {
    let deadline = started + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("phasekv still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = started.elapsed().as_secs_f64();
    let o = child.wait_with_output().unwrap();
    Ended {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into(),
        err: String::from_utf8_lossy(&o.stderr).into(),
        secs,
    }
}

/// Whether `pid` runs (a zombie, dead but not yet reaped by its new parent, does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"),
    }
}

/// The child and its grandchild, by the pids the fixture wrote.
fn fixture_pids(dir: &Path) -> Vec<u32> {
    let pids = std::fs::read_to_string(dir.join("pids")).expect("the fixture wrote its pids");
    let pids: Vec<u32> = pids.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    pids
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`).
fn group_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(2)?.parse().ok()
}

/// Every running process of the kernel's process group (its guard, the `sh` that started the
/// fixture, the fixture and its grandchild), by pid: taken while they run, checked after.
fn kernel_group(dir: &Path) -> Vec<u32> {
    let pgid = group_of(fixture_pids(dir)[0]).expect("the fixture runs");
    let members: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| group_of(p) == Some(pgid) && running(p))
        .collect();
    assert!(members.len() >= 3, "the guard, the fixture and its grandchild: {members:?}");
    members
}

/// None of `pids` runs within `secs` seconds.
fn assert_gone(pids: &[u32], secs: f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    while pids.iter().any(|&p| running(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in pids {
        assert!(!running(p), "process {p} of the kernel's group is still running");
    }
}

/// The child and its grandchild are gone (each given a second to be reaped).
fn assert_nothing_left_running(dir: &Path) {
    assert_gone(&fixture_pids(dir), 1.0);
}

/// Only `allowed` entries in the working directory.
fn assert_wrote_only(dir: &Path, allowed: &[&str]) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(allowed.contains(&name.as_str()), "{} was written in the working directory", name);
    }
}

/// Exit status 2, one line on stderr holding every needle, the group ended, nothing written.
fn assert_one_line_exit_2(e: &Ended, dir: &Path, needles: &[&str]) {
    assert_eq!(e.code, 2, "{}\n{}", e.out, e.err);
    assert_eq!(e.err.trim_end().lines().count(), 1, "not one line:\n{}", e.err);
    assert!(e.err.starts_with("error: external kernel `python3 "), "{}", e.err);
    for n in needles {
        assert!(e.err.contains(n), "'{n}' missing: {}", e.err);
    }
    assert!(!e.out.contains("FAIL"), "a broken process is not a failed invariant:\n{}", e.out);
    assert_nothing_left_running(dir);
    assert_wrote_only(dir, &["pids"]);
}

#[test]
fn failure_1_more_windows_than_the_geometry_is_a_failed_invariant_not_a_panic() {
    let dir = scratch("windows");
    let failures = dir.join("failures");
    let cmd = child("windows-plus 3", &dir);
    let e = check(&dir, &["--external", &cmd, "--shrink", "4", "--failures", failures.to_str().unwrap()]);
    assert_eq!(e.code, 1, "{}\n{}", e.out, e.err);
    // (stderr holds proptest's notes that shrinking stopped at --shrink, nothing else)
    assert!(!e.err.contains("panicked") && !e.err.contains("error"), "a failed invariant is a row: {}", e.err);
    let k1 = e.out.lines().find(|l| l.starts_with("K1 ")).unwrap_or_else(|| panic!("no K1 row:\n{}", e.out));
    assert!(k1.contains("FAIL") && k1.contains("windows") && k1.contains("the geometry gives"), "{k1}");
    assert!(e.out.contains("verdict: FAILED"), "{}", e.out);
    assert_nothing_left_running(&dir);
    assert_wrote_only(&dir, &["pids", "failures"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_2_a_late_reply_ends_the_run_and_a_wrong_id_is_never_paired() {
    let dir = scratch("late");
    // The timeout leaves the child's start (python3, under load) time for the hello.
    let e = check(&dir, &["--external", &child("late 4 4", &dir), "--reply-timeout", "2"]);
    assert_one_line_exit_2(&e, &dir, &["no reply within 2 s (--reply-timeout) at request 4 (compress)"]);
    assert!(e.secs < 7.0, "took {} s", e.secs);
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch("wrong-id");
    let e = check(&dir, &["--external", &child("wrong-id 3", &dir), "--reply-timeout", "5"]);
    assert_one_line_exit_2(&e, &dir, &["reply with id \"2\", expected 3", "at request 3 (compress)"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_3_the_hello_is_held_to_the_limits_of_kernel_check() {
    let mut spec: serde_json::Value =
        serde_json::to_value(phasekv::kernel::KernelSpec::preset("w4s2").unwrap()).unwrap();
    spec["geometry"]["window"] = serde_json::json!(1_000_000_000u64);
    let huge_spec = serde_json::json!({"spec": spec.to_string(), "dtype": "f64"}).to_string();
    for (label, hello, needle) in [
        ("preset", r#"{"preset": "w100000000s1", "dtype": "f64"}"#.to_string(), "above the harness's limit of 512"),
        ("spec", huge_spec, "1000000000"),
        ("d-head", r#"{"preset": "w4s2", "dtype": "f64", "min_d_head": "99999"}"#.into(), "1..=1024"),
        ("dtype", r#"{"preset": "w4s2", "dtype": "f128"}"#.into(), "dtype 'f128'"),
        ("label", r#"{"preset": "w4s2", "dtype": "f64", "label": "a\nb"}"#.into(), "control characters"),
    ] {
        let dir = scratch(&format!("hello-{label}"));
        let quoted = format!("hello '{hello}'");
        let e = check(&dir, &["--external", &child(&quoted, &dir)]);
        assert!(e.secs < 20.0, "{label}: took {} s", e.secs);
        assert_one_line_exit_2(&e, &dir, &["its hello reply", needle]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn failure_4_a_silent_or_dead_child_ends_the_run_with_one_line() {
    // Silent after the hello, and silent from the start: within --reply-timeout + 5 s.
    for (mode, at, timeout) in
        [("silent-after-hello", "at request 2 (compress)", 2.0), ("silent", "at request 1 (hello)", 1.0)]
    {
        let dir = scratch(mode);
        let e = check(&dir, &["--external", &child(mode, &dir), "--reply-timeout", &timeout.to_string()]);
        assert_one_line_exit_2(&e, &dir, &[&format!("no reply within {timeout} s"), at, "it wrote nothing to stderr"]);
        assert!(e.secs < timeout + 5.0, "{mode}: took {} s", e.secs);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // Dead mid-run: what it did, where, its status and its last stderr line.
    let dir = scratch("die");
    let e = check(&dir, &["--external", &child("die 5", &dir), "--reply-timeout", "20"]);
    assert_one_line_exit_2(
        &e,
        &dir,
        &["exited before replying (exit status 3) at request 5 (compress)", "dying on purpose at request 5"],
    );
    assert!(e.secs < 20.0, "took {} s", e.secs);
    std::fs::remove_dir_all(&dir).unwrap();
    // A slow child is bounded by the run's budget, shrinking included.
    let dir = scratch("budget");
    let e = check(&dir, &["--external", &child("slow 0.3", &dir), "--budget", "2", "--cases", "64"]);
    assert_one_line_exit_2(&e, &dir, &["time budget of 2 s (--budget)"]);
    assert!(e.secs < 7.0, "took {} s", e.secs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `kernel check` against a child that answers hello and then goes silent, started in `dir`;
/// returns once the child serves (its pids are written before it reads the hello), with every
/// process of its group.
fn start_serving(dir: &Path) -> (Child, Instant, Vec<u32>) {
    let cmd = child("silent-after-hello", dir);
    let started = Instant::now();
    let phasekv = start(dir, &["--external", &cmd, "--reply-timeout", "30"]);
    while !dir.join("pids").exists() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let group = kernel_group(dir);
    (phasekv, started, group)
}

#[test]
fn failure_5_a_first_signal_stops_at_once_and_ends_the_group() {
    for (signal, code, name) in [("INT", 130, "SIGINT"), ("TERM", 143, "SIGTERM"), ("HUP", 129, "SIGHUP")] {
        let dir = scratch(&format!("signal-{signal}"));
        let (phasekv, started, group) = start_serving(&dir);
        let sent = Command::new("kill").args([&format!("-{signal}"), &phasekv.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let e = finish(phasekv, started);
        assert_eq!(e.code, code, "{}\n{}", e.out, e.err);
        assert_eq!(e.err.trim_end().lines().count(), 1, "{}", e.err);
        assert!(e.err.starts_with(&format!("interrupted by {name}: stopped at once")), "{}", e.err);
        assert!(e.secs < 10.0, "took {} s", e.secs);
        assert_gone(&group, 1.0);
        assert_wrote_only(&dir, &["pids"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn failure_4_phasekv_killed_by_sigkill_takes_the_kernel_group_with_it() {
    // Nothing of phasekv runs after SIGKILL: the group's guard sees phasekv's end of its pipe
    // close and kills the group (the shell, the fixture, its grandchild).
    let dir = scratch("sigkill");
    let (mut phasekv, _, group) = start_serving(&dir);
    phasekv.kill().unwrap();
    let status = phasekv.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status:?}");
    assert_gone(&group, 3.0);
    assert_wrote_only(&dir, &["pids"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_11_a_failures_directory_of_another_run_is_refused() {
    let dir = scratch("failures");
    let failures = dir.join("failures");
    std::fs::create_dir_all(&failures).unwrap();
    std::fs::write(failures.join("K2.safetensors"), b"another run's").unwrap();
    let e = check(&dir, &["--external", &child("silent", &dir), "--failures", failures.to_str().unwrap()]);
    assert_eq!(e.code, 2, "{}", e.err);
    assert_eq!(e.err.trim_end().lines().count(), 1, "{}", e.err);
    assert!(e.err.contains("invalid --failures") && e.err.contains("not empty"), "{}", e.err);
    assert!(!dir.join("pids").exists(), "the kernel was started before the refusal");
    assert_eq!(std::fs::read(failures.join("K2.safetensors")).unwrap(), b"another run's");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_11_a_closed_stdout_is_a_quiet_exit() {
    use std::io::{BufRead, BufReader};
    for args in [
        &["kernel", "check", "--preset", "w4s2", "--cases", "2"][..],
        &["kernel", "list"][..],
        &["train", "--print-config"][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_phasekv"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one line, as `| head -1` does, then close the pipe.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?} printed nothing");
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(matches!(o.status.code(), Some(0 | 141)), "{args:?}: {:?}\n{err}", o.status);
        assert!(err.trim().is_empty(), "{args:?}: not quiet:\n{err}");
    }
}

#[test]
fn failure_11_kernel_check_is_bounded_by_its_work_not_by_w_alone() {
    // W = 512 passes the window bound; with S = 1 a case is 74 times the work of S = 256 (K4's
    // 512 probes of 1029 tokens): 64 cases are refused at once, naming how many fit.
    let dir = scratch("work");
    let e = check(&dir, &["--preset", "w512s1", "--impl", "reference", "--cases", "64"]);
    assert_eq!(e.code, 2, "{}\n{}", e.out, e.err);
    assert_eq!(e.err.trim_end().lines().count(), 1, "{}", e.err);
    for n in ["invalid --cases", "64 cases per invariant on w512s1", "MAX_CHECK_WORK", "at most 6 cases fit"] {
        assert!(e.err.contains(n), "'{n}' missing: {}", e.err);
    }
    assert!(e.secs < 10.0, "took {} s", e.secs);
    // The same bound for a process's hello, which then ends with its group.
    let e =
        check(&dir, &["--external", &child(r#"hello '{"preset": "w512s1", "dtype": "f64"}'"#, &dir), "--cases", "64"]);
    assert_eq!(e.code, 2, "{}\n{}", e.out, e.err);
    assert_eq!(e.err.trim_end().lines().count(), 1, "{}", e.err);
    assert!(e.err.contains("invalid --cases") && e.err.contains("at most 6 cases fit"), "{}", e.err);
    assert_nothing_left_running(&dir);
    assert_wrote_only(&dir, &["pids"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
