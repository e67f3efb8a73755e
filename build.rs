//! Records the commit the crate is built from, so that a run's `environment.json` names the code
//! that produced it. Asking git at run time named the working tree instead: an edit made while a
//! long run was going relabelled the rest of its results `-dirty` although the binary was clean,
//! and a binary started outside the repository named whatever repository it was started in.

use std::path::Path;
use std::process::Command;

/// What goes into the binary: a change anywhere else (docs, reports, tests) does not make it dirty.
const SOURCES: &[&str] = &["src", "Cargo.toml", "Cargo.lock", "build.rs"];

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Reruns this script when `path` changes; only for existing paths (cargo reruns a script on
/// every build for a path that does not exist).
fn watch(path: &str) {
    if Path::new(path).exists() {
        println!("cargo:rerun-if-changed={path}");
    }
}

fn main() {
    for s in SOURCES {
        watch(s);
    }
    let hash = match git(&["rev-parse", "HEAD"]) {
        Some(h) if !h.is_empty() => {
            // A commit or a checkout moves HEAD, the branch it names, or the packed refs.
            for name in ["HEAD", "packed-refs"] {
                if let Some(p) = git(&["rev-parse", "--git-path", name]) {
                    watch(&p);
                }
            }
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
                    watch(&p);
                }
            }
            let mut status = vec!["status", "--porcelain", "--"];
            status.extend_from_slice(SOURCES);
            let dirty = git(&status).is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{h}-dirty")
            } else {
                h
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=PHASEKV_GIT_HASH={hash}");
}
