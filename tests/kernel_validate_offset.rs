//! Issue 41, item 3 (second half): YaRN checked beyond the original context through a dump's
//! position offset `p0` (metadata `position_offset`: token `t` at RoPE position `p0 + t`,
//! `theory/dump-format.md`, "Position offset"). DeepSeek-V4's YaRN (factor 16 from 65 536)
//! changes only the slow pairs, so a kernel without YaRN, or with factor 32, validates at
//! positions below 65 536 and must fail above it. Everything is built in Rust at production
//! width (`d_h = 512`, DeepSeek-V4 CSA and HCA), as `kernel_validate_tolerance` and
//! `kernel_validate_quantized` build their bugs: the reference as a bf16 or f32 kernel computes
//! it, under the wrong spec, labelled with the right one.

use crate::common::dumps::keys_rotated_by;
use crate::common::plans::phasekv;
use candle_core::DType;
use ndarray::Array3;
use phasekv::conformance::dump::Dump;
use phasekv::conformance::known::mutant_dump;
use phasekv::conformance::validate::{validate, Status, Validation};
use phasekv::kernel::post::{rope, rope_angle};
use phasekv::kernel::spec::RopeScaling;
use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
use phasekv::numeric::formats::CacheFormat;

const D_MODEL: usize = 32;
const D_HEAD: usize = 512;
/// DeepSeek-V4's YaRN original context: the offset that puts every entry past it.
const P0: usize = 65_536;

/// The inputs of one case at production width: one sequence of `tokens` and the S tokens the
/// shifted run prepends.
struct Case {
    spec: KernelSpec,
    dims: KernelDims,
    params: KernelParams<f64>,
    x: Array3<f64>,
    pre: ndarray::Array2<f64>,
}

fn case(preset: &str, tokens: usize) -> Case {
    let spec = KernelSpec::preset(preset).unwrap();
    let dims = KernelDims::new(D_MODEL, D_HEAD).unwrap();
    let params = KernelParams::random(&spec, dims, 31);
    let x = phasekv::kernel::random_input(tokens, D_MODEL, 32).into_shape_with_order((1, tokens, D_MODEL)).unwrap();
    let pre = phasekv::kernel::random_input(spec.geometry.stride(), D_MODEL, 33);
    Case { spec, dims, params, x, pre }
}

/// `spec` with YaRN replaced (`None`: no scaling; `Some(f)`: DeepSeek-V4's YaRN at factor `f`).
fn yarn(spec: &KernelSpec, factor: Option<f64>) -> KernelSpec {
    let mut s = spec.clone();
    let rope = s.rope.as_mut().unwrap();
    rope.scaling = factor.map(|f| match rope.scaling.clone() {
        Some(RopeScaling::Yarn { original_max_position, beta_fast, beta_slow, .. }) => {
            RopeScaling::Yarn { factor: f, original_max_position, beta_fast, beta_slow }
        }
        other => panic!("not YaRN: {other:?}"),
    });
    s
}

impl Case {
    /// The dump of a kernel computing `computed` at offset `p0` in `dtype`, labelled with the
    /// case's spec at the same offset (shifted and perturbed runs included).
    fn dump(&self, computed: &KernelSpec, p0: usize, dtype: DType) -> Dump {
        let longest = self.x.shape()[1] + self.spec.geometry.stride();
        let claimed = self.spec.at_position_offset(p0, longest).unwrap();
        let computed = computed.at_position_offset(p0, longest).unwrap();
        mutant_dump(&claimed, &computed, None, self.dims, &self.params, &self.x, dtype, Some((&self.pre, 1))).unwrap()
    }
}

fn yarn_warning(v: &Validation) -> Option<&String> {
    v.warnings.iter().find(|w| w.contains("YaRN"))
}

/// The file form of a dump: written, read back through the loader (metadata included).
fn through_file(d: &Dump, name: &str) -> (std::path::PathBuf, Dump) {
    let file = std::env::temp_dir().join(format!("phasekv-offset-{name}-{}.safetensors", std::process::id()));
    d.save(&file).unwrap();
    let back = Dump::load(&file, None).unwrap();
    (file, back)
}

/// The offset moves the RoPE angle and nothing else: the pooled entries, gates and unrotated
/// channels are those of the run at 0, the rotated channels are the run at 0 turned by `p0 f_i`;
/// the file round-trips it as metadata `position_offset` beside the preset's name, and a dump at
/// offset 0 writes no such key (every existing dump reads as before).
#[test]
fn the_offset_moves_only_the_rope_angle_and_round_trips() {
    let c = case("dsv4-csa", 67);
    let at0 = c.dump(&c.spec, 0, DType::F64);
    let at = c.dump(&c.spec, P0, DType::F64);
    assert_eq!(at.spec.position_offset(), P0);
    assert_eq!(at.main.pooled_keys, at0.main.pooled_keys);
    assert_eq!(at.main.gate_k, at0.main.gate_k);
    let rs = c.spec.rope.as_ref().unwrap();
    let r = rs.rotated_channels(D_HEAD);
    let freqs = rs.inv_frequencies(r);
    let mut moved = 0usize;
    for j in 0..at.main.entries() {
        let mut want = at0.main.keys.slice(ndarray::s![0, j, ..]).to_vec();
        let turn: Vec<f64> = freqs.iter().map(|&f| rope_angle(P0, f)).collect();
        rope(&mut want, &turn, 1);
        let got = at.main.keys.slice(ndarray::s![0, j, ..]).to_vec();
        assert_eq!(got[..D_HEAD - r], want[..D_HEAD - r], "entry {j}: an unrotated channel moved");
        for (g, w) in got.iter().zip(&want).skip(D_HEAD - r) {
            // Two rotations against one by the sum: f64 angles near 6.6e4 rad agree to ~1e-11.
            assert!((g - w).abs() <= 1e-9 * (1.0 + w.abs()), "entry {j}: {g} vs {w}");
        }
        moved += got.iter().zip(at0.main.keys.slice(ndarray::s![0, j, ..])).filter(|(a, b)| a != b).count();
    }
    assert!(moved > 0, "the offset changed nothing");
    let (file, back) = through_file(&at, "roundtrip");
    assert_eq!(back.spec, at.spec);
    let (meta, _) = at.to_parts();
    assert_eq!(meta.get("position_offset").map(String::as_str), Some("65536"));
    assert_eq!(meta.get("preset").map(String::as_str), Some("dsv4-csa"));
    assert!(!at0.to_parts().0.contains_key("position_offset"));
    std::fs::remove_file(file).unwrap();
}

/// A bad offset is refused in one line naming the field, the value and the allowed range (exit
/// 2): not a multiple of the stride (the grid would change phase), past the positions f32
/// holds exactly, not a number, or any offset on a spec without RoPE.
#[test]
fn bad_offsets_are_refused_naming_field_value_and_range() {
    let c = case("dsv4-hca", 259);
    let good = c.dump(&c.spec, P0, DType::BF16);
    let (meta, tensors) = good.to_parts();
    let path = std::path::Path::new("bad.safetensors");
    for (value, want) in [
        ("65537", "is 65537; allowed: a multiple of the stride S = 128 in 0..="),
        ("64", "allowed: a multiple of the stride S = 128"),
        ("16777216", "is 16777216; allowed"),
        ("-128", "is not a non-negative integer"),
        ("x", "is not a non-negative integer"),
    ] {
        let mut m = meta.clone();
        m.insert("position_offset".into(), value.into());
        let e = Dump::from_parts(path, &m, tensors.clone(), None).unwrap_err().to_string();
        assert!(e.contains("metadata position_offset") && e.contains(want), "{value}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // A spec without RoPE: no position enters, so only 0 is allowed.
    let mut plain = KernelSpec::preset("w8s8").unwrap();
    plain.rope = None;
    let e = plain.at_position_offset(8, 16).unwrap_err().to_string();
    assert!(e.contains("position_offset") && e.contains("is 8") && e.contains("only 0"), "{e}");
    assert!(plain.at_position_offset(0, 16).is_ok());
    // The CLI: exit 2, one line.
    let mut m = meta.clone();
    m.insert("position_offset".into(), "65537".into());
    let file = std::env::temp_dir().join(format!("phasekv-offset-bad-{}.safetensors", std::process::id()));
    phasekv::conformance::dump::write_safetensors(&file, &m, &tensors).unwrap();
    let (code, _, err) = phasekv(&["kernel", "validate", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("position_offset = 65537") || err.contains("position_offset is 65537"), "{err}");
    std::fs::remove_file(file).unwrap();
}

/// The negative controls of the brief at production width: at `p0 = 65 536` the correct kernel
/// passes with no YaRN warning, and a kernel without YaRN or with factor 32 fails (exit 1),
/// for the CSA and the HCA, plain bf16 and f32; at `p0 = 0` the same bugs are below the
/// original context, and the dump says so (the warning names the offset that reaches it).
#[test]
fn yarn_bugs_fail_past_the_original_context_and_warn_below_it() {
    for (preset, tokens) in [("dsv4-csa", 67), ("dsv4-hca", 259)] {
        let c = case(preset, tokens);
        for dtype in [DType::BF16, DType::F32] {
            let what = format!("{preset} {dtype:?}");
            let v = validate(&c.dump(&c.spec, P0, dtype)).unwrap();
            assert!(v.passed, "{what}: the correct kernel fails at p0 = {P0}: {:#?}", v.rows);
            assert!(yarn_warning(&v).is_none(), "{what}: {:?}", v.warnings);
            for (bug, factor) in [("no YaRN", None), ("YaRN factor 32", Some(32.0))] {
                let wrong = yarn(&c.spec, factor);
                let v = validate(&c.dump(&wrong, P0, dtype)).unwrap();
                assert!(!v.passed, "{what}: {bug} passes at p0 = {P0}: {:#?}", v.rows);
                assert!(
                    v.rows.iter().any(|r| r.status == Status::Fail && r.id == "K13" && r.name.contains("keys")),
                    "{what}: {bug} fails elsewhere than the keys: {:#?}",
                    v.rows
                );
                let v = validate(&c.dump(&wrong, 0, dtype)).unwrap();
                let w = yarn_warning(&v).unwrap_or_else(|| panic!("{what}: {bug} at 0 gives no warning"));
                assert!(w.contains("position_offset >="), "{w}");
            }
        }
    }
}

/// The same through the binary, on the HCA at W 128, d_h 512 (exit 0 for the correct kernel,
/// 1 for factor 32), and the offset the warning names is one that works: a correct dump at 0
/// warns with `position_offset >= N`, and at `N` it no longer warns.
#[test]
fn the_cli_exit_status_and_the_named_offset() {
    let c = case("dsv4-hca", 259);
    let (file, _) = through_file(&c.dump(&c.spec, P0, DType::BF16), "cli-good");
    let (code, out, err) = phasekv(&["kernel", "validate", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    std::fs::remove_file(&file).unwrap();
    let (file, _) = through_file(&c.dump(&yarn(&c.spec, Some(32.0)), P0, DType::BF16), "cli-bad");
    let (code, out, err) = phasekv(&["kernel", "validate", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}\n{err}");
    std::fs::remove_file(&file).unwrap();
    let v = validate(&c.dump(&c.spec, 0, DType::BF16)).unwrap();
    let w = yarn_warning(&v).unwrap().clone();
    let n: usize = w.split("position_offset >= ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(n.is_multiple_of(128) && n <= P0, "{w}");
    let v = validate(&c.dump(&c.spec, n, DType::BF16)).unwrap();
    assert!(yarn_warning(&v).is_none(), "at the named offset {n}: {:?}", v.warnings);
    let v = validate(&c.dump(&c.spec, n - 128, DType::BF16)).unwrap();
    assert!(yarn_warning(&v).is_some(), "one stride below the named offset {n}: {:?}", v.warnings);
}

/// A stored quantized record (MXFP8, pow2 scales per 32) at the offset: the correct kernel's
/// record passes and the record of a kernel without YaRN fails.
#[test]
fn an_mxfp8_record_without_yarn_fails_at_the_offset() {
    let f = CacheFormat::from_json(
        r#"{"element": "e4m3", "scale": "pow2", "block": 32, "channels": "all", "amax_min": 1e-4}"#,
    )
    .unwrap();
    let stored = |mut d: Dump| {
        let r = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(D_HEAD));
        let q = f.quantized_channels(D_HEAD, r);
        let mut runs = vec![&mut d.main];
        runs.extend(d.shifted.as_mut());
        runs.extend(d.perturbed.as_mut().map(|p| &mut p.0));
        for run in runs {
            for mut row in run.keys.rows_mut() {
                let mut v = row.to_vec();
                f.round_entry(&mut v, q);
                row.assign(&ndarray::Array1::from(v));
            }
        }
        d.cache_format = Some(f.clone());
        d
    };
    for (preset, tokens) in [("dsv4-csa", 67), ("dsv4-hca", 259)] {
        let c = case(preset, tokens);
        let v = validate(&stored(c.dump(&c.spec, P0, DType::BF16))).unwrap();
        assert!(v.passed, "{preset}: the correct MXFP8 record fails at p0 = {P0}: {:#?}", v.rows);
        let v = validate(&stored(c.dump(&yarn(&c.spec, None), P0, DType::BF16))).unwrap();
        assert!(!v.passed, "{preset}: no YaRN in MXFP8 passes at p0 = {P0}: {:#?}", v.rows);
    }
}

/// `d` with every run's keys rotated as a kernel forming the angle in f32 does: pair `i` of the
/// entry at absolute position `p` by `fl32(fl32(p) fl32(f_i))` instead of `p f_i`.
fn f32_angles(d: &Dump, shift: i64) -> Dump {
    keys_rotated_by(d, &|p, _, f| (((p as i64 + shift) as f32) * (f as f32)) as f64)
}

/// Item 2: the f32-angle term of the RoPE bound uses the absolute position `p0 + t`. A correct
/// f32 kernel that forms its angles in f32 at `p0 = 65 536` (an angle error near `4 u p f_i`,
/// 256 times the one at position 256) passes at CSA and HCA width, its keys moved by more than
/// the bound without the term; the same kernel one position off still fails.
#[test]
fn f32_angles_at_the_offset_pass_and_one_position_off_fails() {
    for (preset, tokens) in [("dsv4-csa", 67), ("dsv4-hca", 259)] {
        let c = case(preset, tokens);
        let good = c.dump(&c.spec, P0, DType::F32);
        let angles = f32_angles(&good, 0);
        let v = validate(&angles).unwrap();
        assert!(v.passed, "{preset}: f32 angles at p0 = {P0} fail: {:#?}", v.rows);
        let row = v.rows.iter().find(|r| r.name.starts_with("tolerance: keys")).unwrap();
        let raw = angles.main.keys.iter().zip(good.main.keys.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(raw > row.bound, "{preset}: f32 angles move the keys by {raw:e}, bound {}", row.bound);
        let v = validate(&f32_angles(&good, 1)).unwrap();
        assert!(!v.passed, "{preset}: f32 angles one position off pass at p0 = {P0}");
    }
}

/// The PyTorch writer (`python/phasekv_dump.py`, `python/kernels.py`'s `Dsv4Csa`) at `d_h = 512`
/// with `position_offset = 65 536`: the correct module passes (exit 0, no YaRN warning); the
/// same module with YaRN factor 32 fails (exit 1), and at offset 0 it gets the warning;
/// a module without a `position_offset` attribute refuses any offset. One Python start.
#[test]
fn the_pytorch_writer_takes_the_offset() {
    use crate::common::python::{python_with, PyTool};
    let Some(py) = python_with(PyTool::Torch, "the PyTorch writer's position offset") else { return };
    let dir = std::env::temp_dir().join(format!("phasekv-offset-torch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let python_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let file = |n: &str| dir.join(format!("{n}.safetensors")).to_str().unwrap().to_string();
    let program = format!(
        "import sys, torch; sys.path.insert(0, {py_dir:?})\n\
         from kernels import KERNELS, DSV4_YARN\nfrom phasekv_dump import dump\n\
         x = torch.rand(1, 67, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 - 1\n\
         m = KERNELS['dsv4-csa'](32, 512, seed=3)\n\
         dump(m, x, {good:?}, dtype=torch.bfloat16, position_offset=65536)\n\
         m.yarn = (32.0,) + DSV4_YARN[1:]\n\
         dump(m, x, {bad:?}, dtype=torch.bfloat16, position_offset=65536)\n\
         dump(m, x, {bad0:?}, dtype=torch.bfloat16)\n\
         try:\n    dump(torch.nn.Identity(), x, {bad0:?}, position_offset=4)\n\
         except ValueError as e:\n    print('refused:', e)\n",
        py_dir = python_dir.to_str().unwrap(),
        good = file("good"),
        bad = file("factor32"),
        bad0 = file("factor32-at0"),
    );
    let o = std::process::Command::new(py).args(["-c", &program]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("refused: position_offset 4") && said.contains("only 0"), "{said}");
    let (code, out, err) = phasekv(&["kernel", "validate", &file("good")]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!out.contains("YaRN's original context"), "{out}");
    let (code, out, err) = phasekv(&["kernel", "validate", &file("factor32")]);
    assert_eq!(code, 1, "factor 32 at 65 536 must fail:\n{out}\n{err}");
    let (code, out, err) = phasekv(&["kernel", "validate", &file("factor32-at0")]);
    // Below the original context the bug is (nearly) invisible; what must be there is the warning.
    assert_ne!(code, 2, "{out}\n{err}");
    assert!(out.contains("YaRN's original context") && out.contains("position_offset >="), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The measurement in `theory/dump-format.md`, "Position offset": per preset, dtype and YaRN
/// bug, the keys row at `p0 = 65 536` (error, bound) and the smallest offset (a multiple of `S`,
/// by bisection) at which `validate` fails the bug:
/// `cargo test --test suite kernel_validate_offset::smallest -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (prints the smallest offsets of theory/dump-format.md); run with --ignored --nocapture"]
fn smallest_offset_that_catches_each_yarn_bug() {
    println!(
        "{:<9} {:<5} {:<15} {:>22} {:>22} {:>10}",
        "preset", "dtype", "bug", "keys at 0 (err/bound)", "keys at 65536", "smallest p0"
    );
    for (preset, tokens) in [("dsv4-csa", 67), ("dsv4-hca", 259)] {
        let c = case(preset, tokens);
        let s = c.spec.geometry.stride();
        for dtype in [DType::BF16, DType::F32] {
            for (bug, factor) in [("no YaRN", None), ("YaRN factor 32", Some(32.0))] {
                let wrong = yarn(&c.spec, factor);
                let keys = |p0: usize| {
                    let v = validate(&c.dump(&wrong, p0, dtype)).unwrap();
                    let r = v.rows.iter().find(|r| r.name.starts_with("tolerance: keys")).unwrap().clone();
                    (v.passed, format!("{:.2e}/{:.2e}", r.error, r.bound))
                };
                let (at0_passed, at0) = keys(0);
                let (far_passed, far) = keys(P0);
                assert!(!far_passed);
                let (mut lo, mut hi) = (0usize, P0 / s);
                if !at0_passed {
                    hi = 0;
                }
                while hi > lo + 1 {
                    let mid = (lo + hi) / 2;
                    if validate(&c.dump(&wrong, mid * s, dtype)).unwrap().passed {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                println!("{preset:<9} {:<5} {bug:<15} {at0:>22} {far:>22} {:>10}", format!("{dtype:?}"), hi * s);
            }
        }
    }
}
