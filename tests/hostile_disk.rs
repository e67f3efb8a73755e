//! Issue 28, failure 11: a full disk. Each command writes into a small tmpfs of its own (a
//! mount namespace from `unshare -rm`, so nothing is mounted outside the test and the mount goes
//! with it) at sizes from one page to more than enough. Every run either writes its complete
//! output, or ends with exit status 2 and one line naming a path under the mount, and leaves
//! the mount empty: no `.PID-N.tmp.*` file, no half-written directory.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-hostile-disk-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    dir
}

/// What one run on a full disk did.
struct OnTmpfs {
    code: i32,
    err: String,
    /// Every path under the mount afterwards, relative to it, sorted.
    left: Vec<String>,
}

/// Runs phasekv with `args` (where `MNT` stands for the mount point) in a mount namespace with a
/// tmpfs of `size` on `dir/mnt`, and lists what is under the mount when it ends.
fn on_tmpfs(dir: &Path, size: &str, args: &[&str]) -> OnTmpfs {
    let mnt = dir.join("mnt");
    let err = dir.join("stderr");
    let script = r#"mount -t tmpfs -o "size=$1" tmpfs "$2" || exit 90
cd "$2" || exit 91
err=$3; shift 3
"$@" >/dev/null 2>"$err"
echo "status $?"
find . -mindepth 1 | sort"#;
    let args: Vec<String> = args.iter().map(|a| a.replace("MNT", mnt.to_str().unwrap())).collect();
    let o = Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh", size, mnt.to_str().unwrap(), err.to_str().unwrap()])
        .arg(env!("CARGO_BIN_EXE_phasekv"))
        .args(&args)
        .output()
        .expect("unshare (util-linux) runs");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && out.starts_with("status "),
        "a tmpfs in a mount namespace is needed (unshare -rm, mount -t tmpfs): {:?}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let mut lines = out.lines();
    let code = lines.next().unwrap()["status ".len()..].parse().unwrap();
    let left = lines.map(|l| l.trim_start_matches("./").to_string()).collect();
    OnTmpfs { code, err: std::fs::read_to_string(&err).unwrap_or_default(), left }
}

/// Over `sizes`, from too small to enough: each run is complete (exactly `complete` under the
/// mount) or refused with one line naming the mount and the full disk, leaving nothing.
/// Returns how many runs were refused.
fn full_or_nothing(dir: &Path, sizes: &[&str], args: &[&str], complete: &[&str]) -> usize {
    let mnt = dir.join("mnt");
    let mut refused = 0;
    for size in sizes {
        let r = on_tmpfs(dir, size, args);
        if r.code == 0 {
            assert_eq!(r.left, complete, "{size}: {args:?} wrote an incomplete output:\n{}", r.err);
            continue;
        }
        refused += 1;
        assert_eq!(r.code, 2, "{size}: {args:?}\n{}", r.err);
        assert_eq!(r.err.trim_end().lines().count(), 1, "{size}: not one line:\n{}", r.err);
        assert!(r.err.starts_with("error: "), "{size}: {}", r.err);
        assert!(r.err.contains(mnt.to_str().unwrap()), "{size}: names no path under the mount: {}", r.err);
        assert!(r.err.contains("No space left on device"), "{size}: {}", r.err);
        assert!(r.left.is_empty(), "{size}: {args:?} left {:?} behind ({})", r.left, r.err.trim());
    }
    refused
}

#[test]
fn failure_11_a_full_disk_leaves_no_temporary_file_and_no_half_written_directory() {
    let dir = scratch("audit");
    // 24 groups of honest-looking results (no positions: a profile, no statistics).
    let results = dir.join("results.jsonl");
    let lines: String = (0..96).map(|i| format!("{{\"group\": {}, \"correct\": {}}}\n", i % 24, i % 3 == 0)).collect();
    std::fs::write(&results, lines).unwrap();
    // audit analyze: a directory of four files, the figures the largest.
    let sizes = ["4k", "8k", "16k", "32k", "64k", "128k", "16m"];
    let args = ["audit", "analyze", results.to_str().unwrap(), "--out", "MNT/report"];
    let complete = ["report", "report/groups.csv", "report/phase.png", "report/phase.svg", "report/profile.json"];
    let refused = full_or_nothing(&dir, &sizes, &args, &complete);
    assert!((1..sizes.len()).contains(&refused), "the sizes must straddle the output: {refused} refused");
    // audit export: one file, never replacing another (a temporary file hard-linked in place).
    let args = ["audit", "export", "--samples", "4", "--out", "MNT/prompts.jsonl"];
    let refused = full_or_nothing(&dir, &["4k", "16k", "16m"], &args, &["prompts.jsonl"]);
    assert!((1..3).contains(&refused), "the sizes must straddle the output: {refused} refused");
    // Nothing was written outside the mount but the test's own files.
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["mnt", "results.jsonl", "stderr"]);
    assert_eq!(std::fs::read_dir(dir.join("mnt")).unwrap().count(), 0, "the mount point outside the namespace");
    std::fs::remove_dir_all(&dir).unwrap();
}
