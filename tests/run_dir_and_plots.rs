//! Run directories never overwrite a finished run; plot helpers write both SVG and PNG.

use phasekv::figures::plot::{category_grid, line_chart, scatter, CategoryGrid, Panel, Series};
use phasekv::run_dir::RunDir;
use phasekv::Error;
use proptest::prelude::*;

fn tmp(name: &str, salt: u64) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("phasekv-test-{name}-{}-{salt}", std::process::id()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

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

#[test]
fn plots_write_svg_and_png() {
    let dir = tmp("plots", 0);
    let _ = std::fs::remove_dir_all(&dir);
    let panel = Panel {
        title: "test chart".into(),
        x_label: "x".into(),
        y_label: "y".into(),
        y_range: None,
        series: vec![
            Series::line("a", (0..20).map(|i| (i as f64, (i as f64).sin())).collect(), 0),
            Series::markers("b", vec![(1.0, 0.5), (3.0, -0.5)], 1),
        ],
    };
    let mut written = line_chart(&dir.join("line"), &panel).unwrap();
    written.extend(scatter(&dir.join("scatter"), &panel).unwrap());
    let grid = CategoryGrid {
        title: "grid".into(),
        x_label: "gamma".into(),
        y_label: "beta".into(),
        columns: vec!["1".into(), "2".into()],
        rows: vec!["a".into()],
        cells: vec![vec![0, 1]],
        cell_text: None,
        categories: vec![("zero".into(), (0, 200, 0)), ("one".into(), (200, 0, 0))],
    };
    written.extend(category_grid(&dir.join("grid"), &grid).unwrap());
    assert_eq!(written.len(), 6);
    for f in &written {
        let bytes = std::fs::read(f).unwrap();
        assert!(bytes.len() > 1000, "{} too small", f.display());
        if f.extension().unwrap() == "png" {
            assert_eq!(&bytes[1..4], b"PNG");
        } else {
            let text = String::from_utf8(bytes).unwrap();
            assert!(text.contains("<svg") && text.contains("test chart") || text.contains("grid"));
        }
    }
    let bad = CategoryGrid { cells: vec![vec![0]], ..grid };
    assert!(category_grid(&dir.join("bad"), &bad).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
