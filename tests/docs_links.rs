//! The documents a newcomer reads link to files that exist: every relative link in the README,
//! CONTRIBUTING.md, `theory/*.md` and `benches/results/*.md` resolves from the linking file's
//! folder (issue 39, item 6 moved about 320 lines out of the README; a moved page must not leave
//! a dead link behind). The README opens with its two commands, and `.ci/run` ends with the
//! README's test command.

use std::path::{Path, PathBuf};

/// The relative link targets of a markdown text (`[text](target)`, the `#fragment` dropped;
/// web addresses and in-page anchors are not files).
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split('#').next().unwrap_or("").trim();
        if !(target.is_empty() || target.contains("://") || target.starts_with("mailto:") || target.contains(' ')) {
            out.push(target.to_string());
        }
        rest = &after[end..];
    }
    out
}

/// The links of `text`, read as a file in `dir`, that name no file or folder.
fn broken_links(text: &str, dir: &Path) -> Vec<String> {
    relative_links(text).into_iter().filter(|t| !dir.join(t).exists()).collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docs() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("CONTRIBUTING.md")];
    for dir in ["theory", "benches/results"] {
        let mut more: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        more.sort();
        files.extend(more);
    }
    files
}

#[test]
fn the_link_reader_finds_a_dead_link_and_passes_a_live_one() {
    let dir = root();
    let text =
        "see [the page](theory/kernels.md#k3), [gone](theory/no-such-page.md), [web](https://x.org/a) and [here](#top)";
    assert_eq!(relative_links(text), ["theory/kernels.md", "theory/no-such-page.md"]);
    assert_eq!(broken_links(text, &dir), ["theory/no-such-page.md"]);
    // the same link read from another folder is dead: links resolve from the linking file
    assert_eq!(broken_links("[k](theory/kernels.md)", &dir.join("theory")), ["theory/kernels.md"]);
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut dead = Vec::new();
    let mut links = 0;
    for file in docs() {
        let text = std::fs::read_to_string(&file).unwrap();
        links += relative_links(&text).len();
        for t in broken_links(&text, file.parent().unwrap()) {
            dead.push(format!("{}: {t}", file.strip_prefix(root()).unwrap().display()));
        }
    }
    assert!(links >= 40, "only {links} links read: the reader found nothing");
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn the_readme_opens_with_its_two_commands_and_ci_runs_the_second() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block = readme.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
    let commands: Vec<&str> = block.lines().map(|l| l.split('#').next().unwrap().trim()).collect();
    assert_eq!(commands, ["cargo run --release -- reproduce --quick", "cargo test"], "{block}");
    // the first code block comes before any section
    assert!(readme.find("```sh").unwrap() < readme.find("\n## ").unwrap());
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(last.trim(), commands[1], ".ci/run must end with the README's test command");
}
