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
    assert_eq!(blocks.iter().map(|b| b.0.as_str()).collect::<Vec<_>>(), ["dsv4-csa", "w8s4", "custom"]);
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
