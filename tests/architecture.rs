//! The layering of `src/`, drawn from the code's own imports: every `crate::<module>` path in a
//! top-level module (and every `phasekv::<module>` path in the binary's `cli/`) must name a
//! module on a strictly lower floor, so no folder imports one above it and the folders form no
//! cycle. Adding a module means giving it a floor here (`FLOORS`), which is where a reviewer sees
//! the one direction data flows (the crate map in `src/lib.rs` says the same in words).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floors from the bottom: a module may import only modules on floors below its own.
const FLOORS: &[&[&str]] = &[
    &["error", "numeric", "limits", "geometry"],
    &["run_dir", "task"],
    &["kernel"],
    &["conformance", "model"],
    &["analysis"],
    &["theory"],
    &["figures"],
    &["lab"],
    &["reproduce"],
    &["report"],
    &["cli"],
];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source with `//` comments removed (doc links are not imports).
fn without_comments(src: &str) -> String {
    src.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Every top-level module named right after `prefix::`: `prefix::a::b` gives `a`,
/// `prefix::{a::x, b}` gives `a` and `b` (the first segment of each item in the group).
fn imported(src: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let needle = format!("{prefix}::");
    let mut rest = src;
    while let Some(i) = rest.find(&needle) {
        // not the tail of a longer path such as `my_crate::`
        let before = rest[..i].chars().last();
        rest = &rest[i + needle.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // a group: split its top level on commas, passing over nested groups
            let (mut depth, mut item_start, mut end) = (0usize, 0usize, group.len());
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = k;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(group[item_start..k].trim_start()));
                        item_start = k + 1;
                    }
                    _ => {}
                }
            }
            found.insert(ident(group[item_start..end].trim_start()));
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn the_parser_reads_paths_and_groups() {
    let src = "use crate::kernel::spec::KernelSpec;\nuse crate::{analysis::stats, model::{a, b}, Error};\nx = my_crate::lab::f();";
    let got: Vec<String> = imported(src, "crate").into_iter().collect();
    assert_eq!(got, ["Error", "analysis", "kernel", "model"]);
}

#[test]
fn every_import_runs_down_a_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unplaced = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        if floor_of(&module).is_none() {
            unplaced.insert(module.clone());
        }
        let text = without_comments(&std::fs::read_to_string(file).unwrap());
        let prefix = if module == "cli" { "phasekv" } else { "crate" };
        for target in imported(&text, prefix) {
            if target != module && floor_of(&target).is_some() {
                edges.entry(module.clone()).or_default().insert(format!("{target} ({})", rel.display()));
            }
        }
    }
    assert!(unplaced.is_empty(), "modules with no floor in FLOORS: {unplaced:?}");
    let mut upward = Vec::new();
    for (module, targets) in &edges {
        for t in targets {
            let target = t.split(' ').next().unwrap();
            if floor_of(target) >= floor_of(module) {
                upward.push(format!("{module} imports {t}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports that run up or across a floor:\n{}", upward.join("\n"));
    // the scan saw the layering it guards (a parser that found nothing would pass vacuously)
    assert!(edges.get("report").is_some_and(|t| t.iter().any(|e| e.starts_with("reproduce "))));
    assert!(edges.get("cli").is_some_and(|t| t.len() > 5));
}

/// Every `proptest-regressions` path a test names (as a string literal in `tests/`) is a file
/// that exists, so the runner pointed at it replays the committed failures; every committed
/// regression file is named by some test (one left behind by a renamed runner is never
/// replayed); and none lies beside the tests (where the macro's default put them before every
/// runner took the shared config).
#[test]
fn every_named_regression_file_exists_and_every_committed_one_is_replayed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    let mut named = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, _) in text.match_indices("\"proptest-regressions/") {
            let lit = &text[i + 1..];
            let path = &lit[..lit.find('"').unwrap()];
            // a file name, not this test's own prefix or a format string
            if !path.ends_with('/') && !path.contains('{') {
                named.insert(path.to_string());
            }
        }
    }
    // the scan saw the runners it guards (a parser that found nothing would pass vacuously)
    assert!(named.len() >= 10 && named.contains("proptest-regressions/theorem1.txt"), "{named:?}");
    let missing: Vec<_> = named.iter().filter(|p| !root.join(p).is_file()).collect();
    assert!(missing.is_empty(), "regression files named by tests but missing: {missing:?}");
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(root.join("proptest-regressions")).unwrap() {
        let name = format!("proptest-regressions/{}", entry.unwrap().file_name().to_string_lossy());
        if !named.contains(&name) {
            orphans.push(name);
        }
    }
    for entry in std::fs::read_dir(root.join("tests")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.ends_with(".proptest-regressions") {
            orphans.push(format!("tests/{name}"));
        }
    }
    assert!(orphans.is_empty(), "regression files no runner replays: {orphans:?}");
}

