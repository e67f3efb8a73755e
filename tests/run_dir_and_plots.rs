//! Run directories never overwrite a finished run; plot helpers write both SVG and PNG.

use crate::common;

use phasekv::figures::grid::{category_grid, CategoryGrid};
use phasekv::figures::plot::{line_chart, scatter, Panel, Series};
use phasekv::run_dir::RunDir;
use phasekv::Error;
use proptest::prelude::*;

fn tmp(name: &str, salt: u64) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("phasekv-test-{name}-{}-{salt}", std::process::id()))
}

proptest! {
    #![proptest_config(common::macro_config("run-dir", 4, "proptest-regressions/run_dir_and_plots.txt"))]

    /// config/results/environment are written; after `finish` the directory is refused.
    #[test]
    fn finished_run_is_never_overwritten(seed in any::<u64>(), value in any::<i32>()) {
        let path = tmp("run", seed);
        let _ = std::fs::remove_dir_all(&path);
        let dir = RunDir::create(&path, seed, "test").unwrap();
        dir.write_config(&serde_json::json!({ "value": value })).unwrap();
        dir.write_json("results.json", &vec![value; 3]).unwrap();
        // An unfinished run can be reopened (resume).
        let dir = RunDir::create(&path, seed, "test").unwrap();
        dir.finish().unwrap();
        let env: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path.join("environment.json")).unwrap()).unwrap();
        prop_assert_eq!(env["seed"].as_u64(), Some(seed));
        prop_assert!(env["git_hash"].as_str().is_some_and(|s| !s.is_empty()));
        let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path.join("config.json")).unwrap()).unwrap();
        prop_assert_eq!(cfg["value"].as_i64(), Some(value as i64));
        let before = std::fs::read(path.join("results.json")).unwrap();
        let refused = matches!(RunDir::create(&path, seed, "again"), Err(Error::FinishedRun { .. }));
        prop_assert!(refused, "a finished run was reopened");
        prop_assert_eq!(std::fs::read(path.join("results.json")).unwrap(), before);
        // no temporary files left behind
        prop_assert!(std::fs::read_dir(&path).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
        std::fs::remove_dir_all(&path).unwrap();
    }
}

/// A run records the commit its binary was built from: `build.rs` reruns on a commit, a checkout
/// or an edit of the sources, so right after cargo built this test the recorded hash is HEAD's,
/// `-dirty` exactly when the sources that go into the binary differ from it. (Asked at run time,
/// it named the working tree instead, and edits made during a long run relabelled its results.)
#[test]
fn the_recorded_commit_is_the_one_the_crate_was_built_from() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let expected = match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let status = git(&["status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock", "build.rs"]).unwrap();
            if status.is_empty() {
                head
            } else {
                format!("{head}-dirty")
            }
        }
        None => "unknown".to_string(),
    };
    assert_eq!(phasekv::run_dir::git_hash(), expected);
}

/// One element of an SVG file: its name, attributes and the text directly inside it.
#[derive(Debug)]
struct Elem {
    name: String,
    attrs: std::collections::BTreeMap<String, String>,
    text: String,
}

impl Elem {
    fn attr(&self, k: &str) -> &str {
        self.attrs.get(k).map(String::as_str).unwrap_or("")
    }
    /// The number of points of a polyline.
    fn points(&self) -> usize {
        self.attr("points").split_whitespace().count()
    }
}

/// Parses an SVG (the XML subset plotters writes: elements with quoted attributes, text
/// content, no CDATA) into its elements in document order; panics on a malformed tag.
fn parse_svg(text: &str) -> Vec<Elem> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        if rest.starts_with('/') || rest.starts_with('?') || rest.starts_with('!') {
            continue;
        }
        let end = rest.find('>').expect("unclosed tag");
        let tag = rest[..end].trim_end_matches('/');
        let (name, mut attrs_text) = tag.split_once(char::is_whitespace).unwrap_or((tag, ""));
        let mut attrs = std::collections::BTreeMap::new();
        while let Some(eq) = attrs_text.find("=\"") {
            let key = attrs_text[..eq].trim().to_string();
            let after = &attrs_text[eq + 2..];
            let close = after.find('"').expect("unclosed attribute value");
            attrs.insert(key, after[..close].to_string());
            attrs_text = &after[close + 1..];
        }
        assert!(attrs_text.trim().is_empty(), "trailing text in tag <{tag}>");
        rest = &rest[end + 1..];
        let text = rest[..rest.find('<').unwrap_or(rest.len())].trim().to_string();
        out.push(Elem { name: name.to_string(), attrs, text });
    }
    out
}

/// `#RRGGBB` of palette colour `i`.
fn hex(i: usize) -> String {
    let (r, g, b) = phasekv::figures::plot::PALETTE[i];
    format!("#{r:02X}{g:02X}{b:02X}")
}

fn texts(e: &[Elem]) -> Vec<&str> {
    e.iter().filter(|x| x.name == "text").map(|x| x.text.as_str()).collect()
}

fn count(e: &[Elem], f: impl Fn(&Elem) -> bool) -> usize {
    e.iter().filter(|x| f(x)).count()
}

/// The SVGs have the structure their data asks for: one polyline per line series with one
/// vertex per point, one marker per point (plus one in the legend), the title, axis labels and
/// legend entries as text, one rectangle per grid cell and legend swatch.
#[test]
fn plots_write_svg_and_png() {
    let dir = tmp("plots", 0);
    let _ = std::fs::remove_dir_all(&dir);
    let panel = Panel {
        title: "test chart".into(),
        x_label: "x label".into(),
        y_label: "y label".into(),
        y_range: None,
        series: vec![
            Series::line("series a", (0..20).map(|i| (i as f64, (i as f64).sin())).collect(), 0),
            Series::markers("series b", vec![(1.0, 0.5), (3.0, -0.5), (5.0, 0.0)], 1),
        ],
        ..Panel::default()
    };
    let mut written = line_chart(&dir.join("line"), &panel).unwrap();
    written.extend(scatter(&dir.join("scatter"), &panel).unwrap());
    let grid = CategoryGrid {
        title: "grid title".into(),
        x_label: "gamma".into(),
        y_label: "beta".into(),
        columns: vec!["c1".into(), "c2".into(), "c3".into()],
        rows: vec!["r1".into(), "r2".into()],
        cells: vec![vec![0, 1, 1], vec![1, 1, 1]],
        cell_text: None,
        categories: vec![("zero".into(), (0, 200, 0)), ("one".into(), (200, 0, 0))],
        note: vec!["a note line".into()],
        muted: vec![],
        outlined: vec![],
    };
    written.extend(category_grid(&dir.join("grid"), &grid).unwrap());
    assert_eq!(written.len(), 6);
    for f in written.iter().filter(|f| f.extension().unwrap() == "png") {
        let bytes = std::fs::read(f).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
    }
    let svg = |name: &str| parse_svg(&std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap());

    let line = svg("line");
    assert_eq!(line[0].name, "svg");
    assert_eq!((line[0].attr("width"), line[0].attr("height")), ("900", "560"));
    let t = texts(&line);
    for label in ["test chart", "x label", "y label", "series a", "series b"] {
        assert_eq!(t.iter().filter(|x| **x == label).count(), 1, "text {label:?} once in {t:?}");
    }
    // Series a: one 20-vertex polyline in its colour (the legend sample is a short line).
    let a = |e: &Elem| e.name == "polyline" && e.attr("stroke") == hex(0);
    assert_eq!(count(&line, |e| a(e) && e.points() == 20), 1);
    // Series b: three markers and one legend marker, no line.
    assert_eq!(count(&line, |e| e.name == "circle" && e.attr("fill") == hex(1)), 4);
    assert_eq!(count(&line, |e| e.name == "polyline" && e.attr("stroke") == hex(1) && e.points() > 2), 0);

    // A scatter draws every series as markers: 20 + 3 data points and two legend markers.
    let sc = svg("scatter");
    assert_eq!(count(&sc, |e| e.name == "polyline" && e.points() == 20), 0);
    assert_eq!(count(&sc, |e| e.name == "circle" && e.attr("fill") == hex(0)), 21);
    assert_eq!(count(&sc, |e| e.name == "circle" && e.attr("fill") == hex(1)), 4);

    // The grid: one rectangle per cell of each category plus its legend swatch.
    let g = svg("grid");
    let t = texts(&g);
    for label in ["grid title", "gamma", "beta", "c1", "c2", "c3", "r1", "r2", "zero", "one"] {
        assert!(t.contains(&label), "text {label:?} in {t:?}");
    }
    assert_eq!(count(&g, |e| e.name == "rect" && e.attr("fill") == "#00C800"), 1 + 1);
    assert_eq!(count(&g, |e| e.name == "rect" && e.attr("fill") == "#C80000"), 5 + 1);

    let bad = CategoryGrid { cells: vec![vec![0]], ..grid };
    assert!(category_grid(&dir.join("bad"), &bad).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
