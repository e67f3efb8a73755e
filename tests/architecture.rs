//! The layering of `src/`, drawn from the code's own imports: every `crate::<module>` path in a
//! top-level module (and every `phasekv::<module>` path in the binary's `cli/`) must name a
//! module on a strictly lower floor, so no folder imports one above it and the folders form no
//! cycle. Adding a module means giving it a floor here (`FLOORS`), which is where a reviewer sees
//! the one direction data flows (the crate map in `src/lib.rs` says the same in words).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floors from the bottom: a module may import only modules on floors below its own.
const FLOORS: &[&[&str]] = &[
    &["error", "numeric", "limits", "geometry", "stop"],
    &["run_dir", "task", "theory"],
    &["kernel"],
    &["conformance", "model"],
    &["analysis"],
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

// ---- no import cycle between the files of a folder ----

/// Module path of a source file: `model/fast/mod.rs` is `model::fast`, `lib.rs` and `main.rs`
/// are the root.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().to_string()).collect();
    if let Some(last) = parts.last_mut() {
        *last = last.strip_suffix(".rs").unwrap_or(last).to_string();
    }
    if parts.last().is_some_and(|l| l == "mod" || l == "lib" || l == "main") {
        parts.pop();
    }
    parts
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The path starting at byte `i` of `s` (`a::b::{c, d::e}` gives `[a, b, c]` and `[a, b, d,
/// e]`; `a::*` gives `[a]`) and the byte after it.
fn read_path(s: &str, mut i: usize) -> (Vec<Vec<String>>, usize) {
    let b = s.as_bytes();
    let mut prefix = Vec::new();
    loop {
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(s[start..i].to_string());
        if !s[i..].starts_with("::") {
            return (vec![prefix], i);
        }
        i += 2;
        if s[i..].starts_with('{') {
            // a group: one path per top-level item
            let (mut depth, mut item, mut out) = (0usize, i + 1, Vec::new());
            let mut k = i + 1;
            while k < b.len() {
                match b[k] {
                    b'{' => depth += 1,
                    b'}' if depth > 0 => depth -= 1,
                    b',' | b'}' if depth == 0 => {
                        let text = &s[item..k];
                        let lead = text.len() - text.trim_start().len();
                        for p in read_path(s, item + lead).0 {
                            out.push(prefix.iter().cloned().chain(p).collect());
                        }
                        item = k + 1;
                        if b[k] == b'}' {
                            return (out, k + 1);
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
            return (out, k);
        }
    }
}

/// The source without its `#[cfg(test)]` modules (`mod name { .. }` blocks; braces in string and
/// char literals are passed over). A test module's `super` is its file, not the file's parent.
fn without_test_modules(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(i) = rest.find("#[cfg(test)]") {
        let after = rest[i + "#[cfg(test)]".len()..].trim_start();
        let Some(body) = after.strip_prefix("mod ").and_then(|m| m.find('{').map(|k| &m[k..])) else {
            out.push_str(&rest[..i + 1]);
            rest = &rest[i + 1..];
            continue;
        };
        out.push_str(&rest[..i]);
        let b = body.as_bytes();
        let (mut depth, mut k) = (0usize, 0usize);
        while k < b.len() {
            match b[k] {
                b'"' => {
                    k += 1;
                    while k < b.len() && b[k] != b'"' {
                        k += if b[k] == b'\\' { 2 } else { 1 };
                    }
                }
                b'\'' if k + 2 < b.len() && b[k + 2] == b'\'' => k += 2,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        rest = &body[(k + 1).min(body.len())..];
    }
    out.push_str(rest);
    out
}

/// The files (as `a::b` module paths) that glob-import a `super` path (`use super::*;`,
/// `use super::x::*;`) outside test modules, but for files of the folders in `exempt`: code
/// imports by name, so a reader sees where each name comes from and the cycle rule sees the edge.
fn super_globs(files: &[(Vec<String>, String)], exempt: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (module, text) in files {
        let folder = module[..module.len().saturating_sub(1)].join("::");
        let src = without_test_modules(&without_comments(text));
        let glob = src.split(';').map(str::trim).any(|s| {
            let s = s.strip_prefix("pub(super) ").or_else(|| s.strip_prefix("pub ")).unwrap_or(s);
            s.starts_with("use super::") && s.ends_with("::*")
        });
        if glob && !exempt.contains(&folder.as_str()) {
            out.push(module.join("::"));
        }
    }
    out
}

/// Import edges between modules of one top-level module: every path a file names that starts
/// at `crate`, `super`, `self` or a child module it declares, resolved to the deepest module
/// file it reaches.
fn module_edges(files: &[(Vec<String>, String)]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<&Vec<String>> = files.iter().map(|(m, _)| m).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, text) in files {
        let src = without_test_modules(&without_comments(text));
        let children: BTreeSet<String> = src
            .split("mod ")
            .skip(1)
            .filter_map(|rest| {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                rest[name.len()..].trim_start().starts_with(';').then_some(name)
            })
            .collect();
        let b = src.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if !(is_ident(b[i]) && (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b':'))) {
                i += 1;
                continue;
            }
            if src[..i].ends_with("pub(in ") {
                // a visibility (`pub(in crate::a)`), not an import
                i += 1;
                continue;
            }
            let (paths, end) = read_path(&src, i);
            // `a::*` reads as `[a]`, as does a bare `a` (`pub(super)`): only the first is a glob
            let glob = src[end..].starts_with('*');
            i = end.max(i + 1);
            for path in paths {
                let Some(first) = path.first() else { continue };
                let (mut at, rest): (Vec<String>, &[String]) = match first.as_str() {
                    // `super::*` (read as `[super]`): an import of the whole parent
                    "super" if path.len() == 1 && glob => (module[..module.len().saturating_sub(1)].to_vec(), &[]),
                    // `pub use child::*`: the whole child
                    c if path.len() == 1 && glob && children.contains(c) => (module.clone(), &path[..]),
                    _ if path.len() < 2 => continue,
                    "crate" => (Vec::new(), &path[1..]),
                    "self" => (module.clone(), &path[1..]),
                    "super" => {
                        let ups = path.iter().take_while(|s| *s == "super").count();
                        (module[..module.len().saturating_sub(ups)].to_vec(), &path[ups..])
                    }
                    c if children.contains(c) => (module.clone(), &path[..]),
                    _ => continue,
                };
                for seg in rest {
                    at.push(seg.clone());
                    if !modules.contains(&at) {
                        at.pop();
                        break;
                    }
                }
                if at != *module && !at.is_empty() && !module.is_empty() && at[0] == module[0] {
                    edges.entry(module.clone()).or_default().insert(at);
                }
            }
        }
    }
    edges
}

/// The import cycles between the files of a folder: each edge `a -> b` becomes an edge between
/// the two entries of their deepest common folder that hold them (a file, a sub-folder as one
/// node, or the folder's front door, `mod.rs`, as the node `folder::mod`), so a file that
/// imports an item of its folder's `mod.rs` while that `mod.rs` imports from it (a re-export
/// counts) is a cycle; edges between a file and the front door of a folder in `exempt` are not
/// counted (only the negative controls pass one: `src/` runs with none, issue 39). Each cycle is the set of entries of one strongly connected component, as `a::b`
/// strings.
fn folder_cycles(files: &[(Vec<String>, String)], exempt: &[&str]) -> BTreeSet<Vec<String>> {
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, targets) in module_edges(files) {
        for to in targets {
            let n = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if (n == from.len() || n == to.len()) && exempt.contains(&from[..n].join("::").as_str()) {
                continue;
            }
            // the entry of the common folder that holds `p`: its front door when `p` is the folder
            let entry = |p: &Vec<String>| match p.get(n) {
                Some(_) => p[..=n].to_vec(),
                None => p.iter().cloned().chain(["mod".to_string()]).collect(),
            };
            graph.entry(entry(&from)).or_default().insert(entry(&to));
        }
    }
    let reach = |start: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(v) = stack.pop() {
            for w in graph.get(&v).into_iter().flatten() {
                if seen.insert(w.clone()) {
                    stack.push(w.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> = graph.keys().map(|v| (v, reach(v))).collect();
    let mut cycles = BTreeSet::new();
    for (v, r) in &reachable {
        if !r.contains(*v) {
            continue;
        }
        let scc: Vec<String> =
            r.iter().filter(|w| reachable.get(w).is_some_and(|rw| rw.contains(*v))).map(|w| w.join("::")).collect();
        cycles.insert(scc);
    }
    cycles
}

/// No folder of `src/` is exempt (issue 39): every front door only declares and re-exports, and
/// every file imports its siblings by name.
#[test]
fn no_import_cycle_between_the_files_of_a_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(Vec<String>, String)> = paths
        .iter()
        .map(|p| (module_path(p.strip_prefix(&src).unwrap()), std::fs::read_to_string(p).unwrap()))
        .collect();
    let cycles = folder_cycles(&files, &[]);
    assert!(cycles.is_empty(), "import cycles between the files of a folder: {cycles:?}");
    let globs = super_globs(&files, &[]);
    assert!(globs.is_empty(), "non-test `use super::*` (import by name): {globs:?}");
    // the scan resolved imports (a parser that found nothing would pass vacuously)
    let edges = module_edges(&files);
    let model = |m: &str| m.split("::").map(String::from).collect::<Vec<_>>();
    assert!(edges.get(&model("model::train")).is_some_and(|t| t.contains(&model("model::engine"))), "{edges:?}");
}

/// Negative controls of the cycle rule: two sibling files that import each other (through a
/// `super::` path, a `crate::` path and a group), a cycle through a sub-folder, and a file that
/// imports from its folder's `mod.rs` while the `mod.rs` re-exports from it, are found (the last
/// not for a folder on the exempt list); a chain through the front door and a test module's
/// imports are not cycles. A non-test `use super::*` is found; one in a test module is not.
#[test]
fn the_cycle_rule_finds_cycles_and_only_cycles() {
    let f = |m: &str, src: &str| (m.split("::").map(String::from).collect::<Vec<_>>(), src.to_string());
    let files = vec![
        f("m", "pub mod a;\npub mod b;\npub mod c;\npub mod sub;\npub use a::A;"),
        f("m::a", "use super::{b::B, sub::S as X};"),
        f("m::b", "use crate::m::a::A; // a comment naming crate::m::c::C"),
        f("m::c", "use super::b::B;\nuse super::A;"),
        f("m::sub", "mod inner;\nuse inner::I;"),
        f("m::sub::inner", "use crate::m::d::D;"),
        f("m::d", "fn g() { super::sub::inner::f() }"),
        f("n", "mod w;\nmod x;\nmod y;\nmod z;\npub use w::w;\npub use x::*;\npub use y::Y;\npub fn front() {}"),
        f("n::x", "use super::front;"),
        f("n::y", "pub struct Y;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { let _ = ('}', \"}\"); super::front() }\n}"),
        f("n::z", "pub(super) struct Z;\nuse super::*;"),
        f("n::w", "pub(super) fn w() {}\npub(in crate::n) fn v() {}"),
    ];
    let set = |cs: &[&[&str]]| -> BTreeSet<Vec<String>> {
        cs.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect()
    };
    assert_eq!(folder_cycles(&files, &[]), set(&[&["m::a", "m::b"], &["m::d", "m::sub"], &["n::mod", "n::x"]]));
    assert_eq!(folder_cycles(&files, &["n"]), set(&[&["m::a", "m::b"], &["m::d", "m::sub"]]));
    assert_eq!(super_globs(&files, &[]), ["n::z"]);
    assert!(super_globs(&files, &["n"]).is_empty());
    // the test module is cut whole, its quoted braces passed over
    let y = without_test_modules(&files[9].1);
    assert_eq!(y.trim(), "pub struct Y;");
}

/// The training engines share one trait, in one file (`src/model/engine.rs`): a second trait
/// named for an engine is refused.
#[test]
fn one_engine_trait_in_one_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut traits = Vec::new();
    for p in &paths {
        let text = without_comments(&std::fs::read_to_string(p).unwrap());
        for rest in text.split("trait ").skip(1) {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if name.contains("Engine") {
                traits.push(format!("{name} ({})", p.strip_prefix(&src).unwrap().display()));
            }
        }
    }
    assert_eq!(traits, ["TrainEngine (model/engine.rs)"]);
}

/// The test files `tests/suite.rs` does not list: each `#[path = "F.rs"] mod F;` pair names
/// one file of `tests/` (the binary has `autotests = false`, so an unlisted file never runs).
fn unlisted_test_files(suite: &str, files: &[String]) -> Vec<String> {
    let listed: BTreeSet<String> = suite
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#[path = \"")?.strip_suffix("\"]").map(str::to_string))
        .collect();
    let mods: BTreeSet<String> = suite
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';').map(|m| format!("{m}.rs")))
        .collect();
    files.iter().filter(|f| !(listed.contains(*f) && mods.contains(*f))).cloned().collect()
}

/// Every `tests/*.rs` but `suite.rs` is a module of the one test binary (issue 39); a file added
/// and not listed would silently never run. Negative controls: a suite without one file's line,
/// or with its path but no module, is caught.
#[test]
fn the_suite_lists_every_test_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let suite = std::fs::read_to_string(dir.join("suite.rs")).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rs") && n != "suite.rs")
        .collect();
    files.sort();
    assert!(files.len() >= 50, "{files:?}");
    assert_eq!(unlisted_test_files(&suite, &files), Vec::<String>::new());
    let without = suite.replace("#[path = \"train_spec.rs\"]\n", "");
    assert_eq!(unlisted_test_files(&without, &files), ["train_spec.rs"]);
    let no_mod = suite.replace("mod kernel_study;\n", "");
    assert_eq!(unlisted_test_files(&no_mod, &files), ["kernel_study.rs"]);
}
