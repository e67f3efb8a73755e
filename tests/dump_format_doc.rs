//! The JSON specs in `theory/dump-format.md` are the code's: each block marked
//! `<!-- spec: PRESET -->` equals that preset's serde form, and the one marked `custom` parses
//! and validates, so the page a kernel engineer writes specs from cannot rot.

use phasekv::kernel::KernelSpec;

fn blocks() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/theory/dump-format.md")).unwrap();
    let mut out = Vec::new();
    let mut rest = doc.as_str();
    while let Some(i) = rest.find("<!-- spec: ") {
        let after = &rest[i + "<!-- spec: ".len()..];
        let name = after[..after.find(" -->").unwrap()].to_string();
        let open = after.find("```json\n").unwrap() + "```json\n".len();
        let close = after[open..].find("```").unwrap();
        out.push((name, after[open..open + close].to_string()));
        rest = &after[open + close..];
    }
    out
}

#[test]
fn every_spec_in_the_dump_format_doc_is_the_code_s() {
    let blocks = blocks();
    assert_eq!(blocks.iter().map(|b| b.0.as_str()).collect::<Vec<_>>(), ["dsv4-csa", "w8s4", "dsv41-c4", "custom"]);
    for (name, json) in &blocks {
        let spec = KernelSpec::from_json(json).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name != "custom" {
            let doc: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(doc, serde_json::to_value(KernelSpec::preset(name).unwrap()).unwrap(), "{name}");
        } else {
            spec.validate_for(64).unwrap();
            assert_eq!(spec.rope.as_ref().unwrap().rotated_channels(64), 24);
        }
    }
}

/// The documented `custom` spec (24 rotated channels, an explicit frequency list) holds every
/// invariant on the f64 reference: the harness draws head widths the spec can hold (`d_h >= 24`,
/// 12 pairs), where it used to draw `d_h` in 1..=4 and fail on the spec's own validation.
#[test]
fn the_custom_spec_holds_k1_to_k13_on_the_reference() {
    use phasekv::conformance::harness::subjects::ReferenceSubject;
    use phasekv::conformance::harness::{run_all, InvariantStatus};
    let (_, json) = blocks().into_iter().find(|b| b.0 == "custom").unwrap();
    let spec = KernelSpec::from_json(&json).unwrap();
    let widths = phasekv::conformance::harness::strategies::head_widths(&spec, 1);
    assert_eq!(widths, [24, 25, 26, 27], "24 rotated channels need d_h >= 24");
    let reports = run_all(&ReferenceSubject::new(&spec), 16, 7);
    for r in &reports {
        assert_ne!(r.status, InvariantStatus::Fail, "{r:#?}");
    }
    assert!(reports.iter().filter(|r| r.cases_passed > 0).count() >= 10, "{reports:#?}");
}

/// A typo in a spec is refused naming the field, never dropped: `"scalling"` used to remove
/// YaRN without a word.
#[test]
fn an_unknown_spec_field_is_refused_by_name() {
    let json = serde_json::to_string(&KernelSpec::preset("dsv4-csa").unwrap()).unwrap();
    for (from, to) in [("\"scaling\"", "\"scalling\""), ("\"tied\"", "\"tide\""), ("\"stride\"", "\"strid\"")] {
        let bad = json.replace(from, to);
        let e = KernelSpec::from_json(&bad).unwrap_err().to_string();
        assert!(e.contains(&to[1..to.len() - 1]), "{to}: {e}");
    }
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["rope"]["scaling"]["yarn"]["betafast"] = serde_json::json!(3.0);
    let e = KernelSpec::from_json(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("betafast"), "{e}");
}

/// Every metadata key the loader accepts has its row in the doc's "Metadata" table (issue 41:
/// `position_offset` is documented where a writer looks), and the table names no other key.
#[test]
fn every_metadata_key_has_its_row() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/theory/dump-format.md")).unwrap();
    let table = doc.split("\n## Metadata\n").nth(1).unwrap().split("\n## ").next().unwrap();
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
    let mut named: Vec<String> = Vec::new();
    for row in &rows {
        let first = row.split(" | ").next().unwrap();
        named.extend(first.split('`').skip(1).step_by(2).map(String::from));
    }
    for key in phasekv::conformance::dump::METADATA_KEYS {
        assert!(named.iter().any(|n| n == key), "metadata key {key} has no row in theory/dump-format.md");
    }
    for n in &named {
        assert!(
            phasekv::conformance::dump::METADATA_KEYS.contains(&n.as_str()),
            "the doc names {n}, the loader does not"
        );
    }
}
