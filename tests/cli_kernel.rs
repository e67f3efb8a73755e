//! `phasekv kernel ...` from the outside: verdicts, exit status, one-line errors.

use std::process::Command;

fn phasekv(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("run phasekv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn list_shows_every_preset_with_its_knobs() {
    let (code, out, _) = phasekv(&["kernel", "list"]);
    assert_eq!(code, 0);
    for name in phasekv::kernel::spec::preset_names() {
        assert!(out.lines().any(|l| l.starts_with(&format!("{name} "))), "{name} missing:\n{out}");
    }
    assert!(out.contains("pad_left") && out.contains("shared_kv"));
}

/// The preset added by following CONTRIBUTING.md ("Adding a kernel preset"): listed with its
/// description, its geometry as named (every token in W / S = 4 windows), and every invariant
/// holding on both implementations. `kernel_invariants` also runs it, as every listed preset.
#[test]
fn the_w16s4_preset_is_listed_and_meets_every_invariant() {
    let (code, out, _) = phasekv(&["kernel", "list"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with("w16s4 ")), "{out}");
    let spec = phasekv::kernel::KernelSpec::preset("w16s4").unwrap();
    assert_eq!((spec.geometry.window(), spec.geometry.stride()), (16, 4));
    let (code, out, err) = phasekv(&["kernel", "check", "--preset", "w16s4", "--cases", "16"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("verdict: every invariant holds"), "{out}");
}

/// The staggered presets (issue 30): listed, saying they keep the parameters and the entries per
/// `S` tokens of their twin; `kernel check` runs each head's grid (0 and S/2 in the default
/// model shape) and K14 passes on the shifted one; the wrong-head mutant fails there.
#[test]
fn the_staggered_presets_are_listed_and_each_heads_grid_meets_every_invariant() {
    let (code, out, _) = phasekv(&["kernel", "list"]);
    assert_eq!(code, 0);
    for (name, rule) in
        [("w8s8-stagger-heads", "heads"), ("w8s8-stagger-layers", "layers"), ("w8s4-stagger-layers", "layers")]
    {
        let row = out.lines().position(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{out}"));
        assert!(out.lines().nth(row).unwrap().contains(&format!("stagger={rule}")), "{out}");
        let about = out.lines().nth(row + 1).unwrap();
        assert!(about.contains("same parameters") && about.contains("entries per S tokens"), "{about}");
    }
    let (code, out, err) = phasekv(&["kernel", "check", "--preset", "w8s8-stagger-heads", "--cases", "8"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("offsets 0, 4"), "{out}");
    assert!(out.contains("preset w8s8-stagger-heads@o4:"), "{out}");
    // K14 applies on the shifted grid only: once per implementation there.
    assert_eq!(out.lines().filter(|l| l.starts_with("K14 ") && l.contains("PASS")).count(), 2, "{out}");
    assert!(out.contains("verdict: every invariant holds"), "{out}");
    let (code, out, _) = phasekv(&[
        "kernel",
        "check",
        "--preset",
        "w8s8-stagger-heads@o4",
        "--mutant",
        "other-head-offset",
        "--cases",
        "16",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.lines().any(|l| l.starts_with("K2 ") && l.contains(" FAIL ")), "{out}");
}

#[test]
fn check_passes_on_dsv4_csa_with_every_invariant_listed() {
    let (code, out, err) = phasekv(&["kernel", "check", "--preset", "dsv4-csa", "--cases", "16"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for id in ["K1 ", "K2 ", "K7 ", "K12 "] {
        assert_eq!(out.lines().filter(|l| l.starts_with(id) && l.contains("PASS")).count(), 2, "{id}:\n{out}");
    }
    // K13 compares an implementation with the f64 reference: a pass for candle, not applicable
    // (never a pass against itself) for the reference.
    assert_eq!(out.lines().filter(|l| l.starts_with("K13 ") && l.contains("PASS")).count(), 1, "{out}");
    assert!(out.contains("verdict: every invariant holds"));
}

#[test]
fn a_mutant_fails_and_the_catching_invariant_is_named() {
    let (code, out, _) =
        phasekv(&["kernel", "check", "--preset", "w8s4", "--mutant", "attention-look-ahead", "--cases", "32"]);
    assert_eq!(code, 1, "{out}");
    let failing: Vec<&str> = out.lines().filter(|l| l.contains(" FAIL ")).collect();
    assert!(failing.iter().any(|l| l.starts_with("K12 ")), "{out}");
    assert!(out.contains("verdict: FAILED"));
}

#[test]
fn bad_input_is_one_line_with_status_2() {
    for args in [
        vec!["kernel", "check", "--preset", "w4s8"],
        vec!["kernel", "check", "--preset", "bogus"],
        vec!["kernel", "check", "--preset", "w8s4", "--mutant", "nope"],
        vec!["kernel", "check", "--preset", "w8s0"],
    ] {
        let (code, out, err) = phasekv(&args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].starts_with("error: invalid"), "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
}

/// The layer layouts (issue 42): `kernel check` checks every layer kernel of the layout, each
/// as a kernel of its own (CSA and HCA16; V4.1's c4 and c16), and each holds every invariant;
/// a mutant fails on the layout too; a spec file with a bad layout is one line, status 2.
#[test]
fn kernel_check_holds_every_invariant_on_each_layer_of_the_layouts() {
    for (name, layers) in [("dsv4-layout", ["dsv4-csa", "dsv4-hca16"]), ("dsv41-layout", ["dsv41-c4", "dsv41-c16"])] {
        let (code, out, err) = phasekv(&["kernel", "check", "--preset", name, "--cases", "8"]);
        assert_eq!(code, 0, "{name}: {out}\n{err}");
        assert!(
            out.contains(&format!("layout {name}: layer l uses entry l mod 2 (0: {}, 1: {})", layers[0], layers[1])),
            "{out}"
        );
        for layer in layers {
            assert!(out.lines().any(|l| l.starts_with(&format!("preset {layer}: "))), "{layer} not checked:\n{out}");
        }
        // Each layer kernel runs the whole catalogue on both implementations.
        assert_eq!(out.lines().filter(|l| l.starts_with("K1 ") && l.contains("PASS")).count(), 4, "{out}");
        assert!(out.contains("verdict: every invariant holds"), "{out}");
    }
    let (code, out, _) =
        phasekv(&["kernel", "check", "--preset", "dsv4-layout", "--mutant", "attention-look-ahead", "--cases", "16"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("verdict: FAILED"), "{out}");
    let dir = std::env::temp_dir().join(format!("cli_kernel-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut spec = serde_json::to_value(phasekv::kernel::KernelSpec::preset("dsv4-layout").unwrap()).unwrap();
    for (layout, field) in [
        ("[]", "layout"),
        (r#"["dsv4-csa", "nonesuch"]"#, "layout[1]"),
        (r#"["dsv4-csa", "w8s8-stagger-heads"]"#, "layout[1].stagger"),
    ] {
        spec["layout"] = serde_json::from_str(layout).unwrap();
        let path = dir.join("bad.json");
        std::fs::write(&path, spec.to_string()).unwrap();
        let (code, out, err) = phasekv(&["kernel", "check", "--spec", path.to_str().unwrap(), "--cases", "8"]);
        assert_eq!(code, 2, "{layout}: {out} {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines.len() == 1 && lines[0].contains(field), "{layout}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
