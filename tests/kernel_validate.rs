//! `phasekv kernel validate`: dumps from PyTorch (the shipped kernels, end to end through
//! `python/phasekv_dump.py`), dumps written by the reference itself, and hostile dumps (each one
//! clear line on stderr, exit status 2, never a panic).

use candle_core::DType;
use ndarray::{Array2, Array3};
use phasekv::conformance::dump::{read_safetensors, safetensors_bytes, write_npy_dir, Dump, RawTensor};
use phasekv::conformance::known::reference_dump;
use phasekv::conformance::validate::validate;
use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::python::{python_with, PyTool};

fn phasekv(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("run phasekv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-validate-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A seeded input `[B, T, d]` in `[-1, 1]`.
fn input(b: usize, t: usize, d: usize, seed: u64) -> Array3<f64> {
    let flat = phasekv::kernel::random_input(b * t, d, seed);
    flat.into_shape_with_order((b, t, d)).unwrap()
}

/// A known-good dump: the reference itself in `dtype`, with both extra runs.
fn good_dump(preset: &str, dtype: DType) -> Dump {
    let spec = KernelSpec::preset(preset).unwrap();
    let dims = KernelDims::new(5, 4).unwrap();
    let params = KernelParams::random(&spec, dims, 3);
    let x = input(2, 19, 5, 4);
    let pre: Array2<f64> = phasekv::kernel::random_input(spec.geometry.stride(), 5, 5);
    reference_dump(&spec, dims, &params, &x, dtype, Some((&pre, 8))).unwrap()
}

#[test]
fn a_dump_of_the_reference_passes_and_round_trips_through_both_formats() {
    for (preset, dtype) in
        [("w8s4", DType::F32), ("dsv4-csa", DType::F32), ("w8s6-scalar", DType::F64), ("w4s4-tied", DType::BF16)]
    {
        let d = good_dump(preset, dtype);
        let v = validate(&d).unwrap();
        assert!(v.passed, "{preset}: {:#?}", v.rows);
        assert_eq!(v.best_delta, 0, "{preset}");
        assert!(v.rows.iter().filter(|r| r.status == phasekv::conformance::validate::Status::Pass).count() >= 5);
        let dir = scratch(&format!("good-{preset}"));
        let file = dir.join("d.safetensors");
        d.save(&file).unwrap();
        assert_eq!(Dump::load(&file, None).unwrap(), d, "{preset}");
        if dtype != DType::BF16 {
            write_npy_dir(&dir.join("npy"), &d).unwrap();
            assert_eq!(Dump::load(&dir.join("npy"), None).unwrap(), d, "{preset} npy");
        }
        let (code, out, err) = phasekv(&["kernel", "validate", file.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains("verdict: PASS"));
    }
}

fn python_with_torch() -> Option<&'static str> {
    python_with(PyTool::Torch, "the PyTorch round trip")
}

#[test]
fn pytorch_kernels_round_trip_correct_ones_pass_the_off_by_one_fails_by_phase() {
    let Some(py) = python_with_torch() else { return };
    let dir = scratch("torch");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/phasekv_dump.py");
    // One python start (importing torch takes seconds): every shipped kernel, both formats.
    let args = [
        script.to_str().unwrap(),
        "--kernel",
        "w8s4,dsv4-csa,w8s4-off-by-one",
        "--npy",
        "--out",
        dir.to_str().unwrap(),
        "--tokens",
        "18",
        "--d-model",
        "6",
        "--d-head",
        "8",
        "--batch",
        "2",
    ];
    let o = Command::new(py).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dump = |kernel: &str, ext: &str| dir.join(format!("{kernel}.{ext}"));
    for kernel in ["w8s4", "dsv4-csa"] {
        let path = dump(kernel, "safetensors");
        let (code, out, err) = phasekv(&["kernel", "validate", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{kernel}:\n{out}\n{err}");
        for id in ["K1 ", "K2 ", "K3 ", "K5 ", "K13 "] {
            assert!(out.lines().any(|l| l.starts_with(id) && l.contains("PASS")), "{kernel} {id}:\n{out}");
        }
        assert!(out.lines().any(|l| l.trim_start().starts_with("0 ") && l.ends_with("<- best")), "{out}");
    }
    let npy = dump("w8s4", "npy");
    let (code, out, _) = phasekv(&["kernel", "validate", npy.to_str().unwrap(), "--dtype", "f32"]);
    assert_eq!(code, 0, "npy:\n{out}");

    let bad = dump("w8s4-off-by-one", "safetensors");
    let report = dir.join("report");
    let (code, out, err) =
        phasekv(&["kernel", "validate", bad.to_str().unwrap(), "--report", report.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("verdict: FAIL"), "{out}");
    // The phase signature: the displaced reference at delta = +1 matches, delta = 0 does not.
    assert!(out.lines().any(|l| l.trim_start().starts_with("1 ") && l.ends_with("<- best")), "{out}");
    assert!(out.contains("windows starting 1 token late"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("K2 ") && l.contains("FAIL")), "{out}");
    for f in ["validation.json", "error_by_phase.svg", "error_by_phase.png", "error_by_window.svg"] {
        assert!(report.join(f).is_file(), "{f} missing");
    }
}

/// Issue 41, item 3: the writers' default length reaches past token 256 (`phasekv_npdump.
/// default_tokens`: a complete main-run window starting there, plus 3 open tokens), so a bug from
/// token 256 on shows in the main run; validate then warns of nothing. The control: one token short
/// of that window's end, the coverage warning names token 256 and the length that reaches it.
#[test]
fn the_default_dump_reaches_past_token_256_and_one_token_short_is_warned() {
    let Some(py) = python_with_torch() else { return };
    let dir = scratch("torch-default-length");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/phasekv_dump.py");
    // w8s4 (start-aligned): the window from 256 ends at 263, so 264 tokens reach it, 267 by default.
    for (tokens, warned) in [(None, false), (Some("263"), true)] {
        let out_path = dir.join(format!("w8s4-{}.safetensors", tokens.unwrap_or("default")));
        let mut args = vec![script.to_str().unwrap(), "--kernel", "w8s4", "--out", out_path.to_str().unwrap()];
        args.extend(tokens.iter().flat_map(|t| ["--tokens", t]));
        let o = Command::new(py).args(&args).output().unwrap();
        let wrote = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{wrote}{}", String::from_utf8_lossy(&o.stderr));
        assert!(wrote.contains(&format!("2x{}x8", tokens.unwrap_or("267"))), "{wrote}");
        let (code, out, err) = phasekv(&["kernel", "validate", out_path.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}\n{err}");
        let warning = out.lines().find(|l| l.contains(crate::common::python::COVERAGE_WARNING));
        if warned {
            let w = warning.unwrap_or_else(|| panic!("263 tokens must be warned:\n{out}"));
            assert!(w.contains("token 256") && w.contains("dump at least 264 tokens"), "{w}");
        } else {
            assert!(warning.is_none(), "the default length must reach past token 256:\n{out}");
        }
    }
}

/// Issue 41: a bf16 kernel whose last window's sum is accumulated in bf16 (`python/kernels.py`'s
/// `Dsv4CsaLastWindowBf16`) errs in that one entry about twice the kernel's own level, which the
/// output's RMS dilutes over 74 entries; at DeepSeek-V4's width (`d_h = 512`) the localized-error
/// row fails it, and it alone, while the same kernel without the bug passes.
#[test]
fn a_last_window_accumulated_in_bf16_fails_the_localized_row_at_production_width() {
    let Some(py) = python_with_torch() else { return };
    let dir = scratch("torch-last-bf16");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/phasekv_dump.py");
    let args = [
        script.to_str().unwrap(),
        "--kernel",
        "dsv4-csa-f32,dsv4-csa-last-bf16",
        "--out",
        dir.to_str().unwrap(),
        "--tokens",
        "300",
        "--d-model",
        "64",
        "--d-head",
        "512",
        "--dtype",
        "bf16",
    ];
    let o = Command::new(py).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let validate = |k: &str| phasekv(&["kernel", "validate", dir.join(format!("{k}.safetensors")).to_str().unwrap()]);
    let (code, out, err) = validate("dsv4-csa-f32");
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.lines().any(|l| l.starts_with("K13  localized error: pooled keys") && l.contains("PASS")), "{out}");
    let (code, out, err) = validate("dsv4-csa-last-bf16");
    assert_eq!(code, 1, "{out}\n{err}");
    let failing: Vec<&str> = out.lines().filter(|l| l.starts_with('K') && l.contains(" FAIL ")).collect();
    assert_eq!(failing.len(), 1, "{out}");
    assert!(failing[0].starts_with("K13  localized error: pooled keys") && failing[0].contains("entry 74"), "{out}");
}

/// A PyTorch kernel on a staggered grid (`python/kernels.py`'s `W8S8Offset4`: head 1 of
/// `w8s8-stagger-heads`, spec `w8s8@o4`) round-trips through the dump script and validates; the
/// same module dumped as the unshifted `w8s8` (its offset forgotten) fails.
#[test]
fn pytorch_kernel_on_a_staggered_grid_round_trips_and_its_forgotten_offset_fails() {
    let Some(py) = python_with_torch() else { return };
    let dir = scratch("torch-stagger");
    let python_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let (good, forgot) = (dir.join("good.safetensors"), dir.join("forgot.safetensors"));
    // One python start: the kernel as shipped, and the same module claiming the unshifted spec.
    let program = format!(
        "import sys, torch; sys.path.insert(0, {py_dir:?})\n\
         from kernels import KERNELS\nfrom phasekv_dump import dump\n\
         m = KERNELS['w8s8-offset4'](6, 8, seed=3)\n\
         x = torch.rand(2, 21, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 - 1\n\
         dump(m, x, {good:?})\n\
         m.phasekv_spec = lambda: 'w8s8'\n\
         dump(m, x, {forgot:?})\n",
        py_dir = python_dir.to_str().unwrap(),
        good = good.to_str().unwrap(),
        forgot = forgot.to_str().unwrap(),
    );
    let o = Command::new(py).args(["-c", &program]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, out, err) = phasekv(&["kernel", "validate", good.to_str().unwrap()]);
    assert_eq!(code, 0, "w8s8@o4:\n{out}\n{err}");
    assert!(out.contains("verdict: PASS"), "{out}");
    for id in ["K1 ", "K2 ", "K3 ", "K5 ", "K13 "] {
        assert!(out.lines().any(|l| l.starts_with(id) && l.contains("PASS")), "{id}:\n{out}");
    }
    let (code, out, err) = phasekv(&["kernel", "validate", forgot.to_str().unwrap()]);
    assert_eq!(code, 1, "the offset forgotten must fail:\n{out}\n{err}");
    assert!(out.contains("verdict: FAIL"), "{out}");
}

fn parts(d: &Dump) -> (HashMap<String, String>, BTreeMap<String, RawTensor>) {
    d.to_parts()
}

/// Writes a hostile variant and asserts exit status 2 with one line on stderr naming `needle`.
fn assert_unusable(dir: &Path, label: &str, bytes: &[u8], needle: &str) {
    let file = dir.join(format!("{label}.safetensors"));
    std::fs::write(&file, bytes).unwrap();
    let (code, out, err) = phasekv(&["kernel", "validate", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{label}: exit {code}\n{out}\n{err}");
    assert!(!err.contains("panicked"), "{label}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{label}: not one line:\n{err}");
    assert!(err.starts_with("error: "), "{label}: {err}");
    assert!(err.contains(needle), "{label}: '{needle}' not in: {err}");
}

#[test]
fn hostile_dumps_each_give_one_clear_line_and_exit_2() {
    let dir = scratch("hostile");
    let d = good_dump("w8s4", DType::F32);
    let (meta, tensors) = parts(&d);
    let bytes = |m: &HashMap<String, String>, t: &BTreeMap<String, RawTensor>| safetensors_bytes(m, t).unwrap();
    let good = bytes(&meta, &tensors);

    let with_tensors = |f: &dyn Fn(&mut BTreeMap<String, RawTensor>)| {
        let mut t = tensors.clone();
        f(&mut t);
        bytes(&meta, &t)
    };
    let with_meta = |f: &dyn Fn(&mut HashMap<String, String>)| {
        let mut m = meta.clone();
        f(&mut m);
        bytes(&m, &tensors)
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "not a readable safetensors file"),
        ("truncated", good[..good.len() / 2].to_vec(), "not a readable safetensors file"),
        ("truncated-header", good[..20].to_vec(), "not a readable safetensors file"),
        ("garbage", (0..200u32).map(|i| (i * 37 % 251) as u8).collect(), "not a readable safetensors file"),
        (
            "corrupt-header",
            {
                let mut g = good.clone();
                g[10] = b'}';
                g
            },
            "not a readable safetensors file",
        ),
        (
            "missing-param",
            with_tensors(&|t| {
                t.remove("proj_v");
            }),
            "proj_v",
        ),
        (
            "missing-input",
            with_tensors(&|t| {
                t.remove("input");
            }),
            "tensor input is missing",
        ),
        (
            "missing-keys",
            with_tensors(&|t| {
                t.remove("keys");
            }),
            "tensor keys is missing",
        ),
        (
            "wrong-param-shape",
            with_tensors(&|t| {
                let p = t.get_mut("proj_k").unwrap();
                let n = p.data.len();
                p.shape = vec![n];
            }),
            "proj_k",
        ),
        (
            "wrong-output-width",
            with_tensors(&|t| {
                let k = t.get_mut("keys").unwrap();
                let (b, n, dh) = (k.shape[0], k.shape[1], k.shape[2]);
                k.shape = vec![b, n * dh / 2, 2];
            }),
            "keys",
        ),
        (
            "wrong-gate-shape",
            with_tensors(&|t| {
                let g = t.get_mut("gate_k").unwrap();
                let s = g.shape.clone();
                g.shape = vec![s[0], s[1], s[3], s[2]];
            }),
            "gate_k",
        ),
        ("nan-input", with_tensors(&|t| t.get_mut("input").unwrap().data[3] = f64::NAN), "tensor input contains NaN"),
        (
            "inf-param",
            with_tensors(&|t| t.get_mut("gate_k.b").unwrap().data[0] = f64::INFINITY),
            "gate_k.b contains inf",
        ),
        // (NaN in the kernel's outputs is a failed kernel, exit 1: tests/kernel_validate_mutants.rs.)
        ("mixed-dtypes", with_tensors(&|t| t.get_mut("proj_k").unwrap().dtype = DType::F16), "share one dtype"),
        (
            "dtype-contradiction",
            with_meta(&|m| {
                m.insert("dtype".into(), "f16".into());
            }),
            "metadata dtype is f16",
        ),
        (
            "bad-dtype-name",
            with_meta(&|m| {
                m.insert("dtype".into(), "int8".into());
            }),
            "metadata dtype 'int8'",
        ),
        (
            "no-format",
            with_meta(&|m| {
                m.remove("phasekv.format");
            }),
            "phasekv.format is missing",
        ),
        (
            "future-format",
            with_meta(&|m| {
                m.insert("phasekv.format".into(), "9".into());
            }),
            "version 1",
        ),
        (
            "no-spec",
            with_meta(&|m| {
                m.remove("preset");
            }),
            "preset",
        ),
        (
            "unknown-preset",
            with_meta(&|m| {
                m.insert("preset".into(), "w8s9".into());
            }),
            "metadata preset",
        ),
        (
            "wrong-preset",
            with_meta(&|m| {
                m.insert("preset".into(), "w8s4-tied".into());
            }),
            "unknown tensor gate_v",
        ),
        (
            "bad-spec-json",
            with_meta(&|m| {
                m.remove("preset");
                m.insert("spec".into(), "{\"name\": 3}".into());
            }),
            "metadata spec",
        ),
        (
            "d-model-contradiction",
            with_meta(&|m| {
                m.insert("d_model".into(), "6".into());
            }),
            "metadata d_model = 6",
        ),
        (
            "d-head-zero",
            with_meta(&|m| {
                m.insert("d_head".into(), "0".into());
            }),
            "d_head",
        ),
        (
            "perturbed-token-wrong",
            with_meta(&|m| {
                m.insert("perturbed.token".into(), "3".into());
            }),
            "perturbed.token = 3",
        ),
        (
            "perturbed-token-out-of-range",
            with_meta(&|m| {
                m.insert("perturbed.token".into(), "999".into());
            }),
            "perturbed.token = 999",
        ),
        (
            "shifted-not-the-input",
            with_tensors(&|t| t.get_mut("shifted.input").unwrap().data[100] += 1.0),
            "shifted.input",
        ),
        (
            "unknown-tensor",
            with_tensors(&|t| {
                let k = t["keys"].clone();
                t.insert("extra".into(), k);
            }),
            "unknown tensor extra",
        ),
    ];
    for (label, b, needle) in &cases {
        assert_unusable(&dir, label, b, needle);
    }
    // A missing file and a truncated .npy in a folder.
    let (code, _, err) = phasekv(&["kernel", "validate", dir.join("nope.safetensors").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let npy = dir.join("npy");
    write_npy_dir(&npy, &d).unwrap();
    let keys = npy.join("keys.npy");
    let k = std::fs::read(&keys).unwrap();
    std::fs::write(&keys, &k[..k.len() - 3]).unwrap();
    let (code, _, err) = phasekv(&["kernel", "validate", npy.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("keys") && err.contains("truncated"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1);
    let (code, _, err) =
        phasekv(&["kernel", "validate", dir.join("empty.safetensors").to_str().unwrap(), "--dtype", "q4"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn group_maps_with_huge_indices_are_errors_not_overflows() {
    // `num_groups` computes max + 1: a JSON spec with a group index of usize::MAX must be rejected
    // before anything calls it (a guard written with the loader, pinned here).
    let d = good_dump("w8s4", DType::F32);
    let (mut meta, tensors) = parts(&d);
    meta.remove("preset");
    let mut spec = serde_json::to_value(&d.spec).unwrap();
    spec["groups"] = serde_json::json!({"map": [0, 1, 2, 3, 4, 5, 6, usize::MAX]});
    meta.insert("spec".into(), spec.to_string());
    let e = Dump::from_safetensors_bytes(Path::new("x"), &safetensors_bytes(&meta, &tensors).unwrap(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("group index"), "{e}");
}

/// Byte mutations and truncations of a valid dump: the loader answers Ok or Err, never panics.
/// 48 cases by default; `PHASEKV_FUZZ_CASES=N` runs more (a fuzzer that needs no nightly).
#[test]
fn mutated_bytes_never_panic() {
    let cases: u32 = std::env::var("PHASEKV_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48);
    let mut runner =
        crate::common::runner("validate-mutated-bytes", cases, Some("proptest-regressions/kernel_validate.txt"));
    let d = good_dump("w4s4", DType::F32);
    let (meta, tensors) = parts(&d);
    let base = safetensors_bytes(&meta, &tensors).unwrap();
    let strategy = (
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        any::<prop::sample::Index>(),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(edits, cut, truncate)| {
            let mut b = base.clone();
            for (at, byte) in edits {
                let i = at.index(b.len());
                b[i] = byte;
            }
            if truncate {
                b.truncate(cut.index(b.len()));
            }
            if let Ok(d) = Dump::from_safetensors_bytes(Path::new("m"), &b, None) {
                let _ = validate(&d);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn read_safetensors_names_the_file() {
    let e = read_safetensors(Path::new("some/where.safetensors"), b"xx").unwrap_err().to_string();
    assert!(e.starts_with("some/where.safetensors: "), "{e}");
}
