//! Issue 41's table, in Rust (no Python): quantized records of wrong kernels at production width
//! (`d_h = 512`) fail `validate`, while the correct kernel's record passes in every shipped format.
//! A dump is the reference as a bf16 kernel computes it (`reference_dump`), with a planted bug,
//! then its keys encoded in the labelled format in every run (the kernel's stored cache); its
//! pooled entries and gates are what it computed before encoding. The rounding model that judges
//! them is `theory/dump-format.md`, "Quantized keys: the rounding model".

use candle_core::DType;
use ndarray::{s, Array3};
use phasekv::conformance::dump::{round_to, Dump, Run};
use phasekv::conformance::known::{mutant_dump, reference_dump};
use phasekv::conformance::mutants::Mutant;
use phasekv::conformance::validate::{validate, Status, Validation};
use phasekv::kernel::post::rope;
use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
use phasekv::numeric::formats::CacheFormat;

const D_MODEL: usize = 32;
const D_HEAD: usize = 512;

/// The quantized formats of the issue: (name, label).
fn formats() -> Vec<(&'static str, CacheFormat)> {
    [
        ("MXFP8 pow2/32", r#"{"element": "e4m3", "scale": "pow2", "block": 32, "channels": "all", "amax_min": 1e-4}"#),
        ("OCP MXFP8", r#"{"element": "e4m3", "scale": "e8m0", "block": 32, "channels": "all"}"#),
        ("FP4 e4m3/16", r#"{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}"#),
        ("V4 FP8 NoPE", r#"{"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope", "amax_min": 1e-4}"#),
    ]
    .into_iter()
    .map(|(n, j)| (n, CacheFormat::from_json(j).unwrap()))
    .collect()
}

fn format(name: &str) -> CacheFormat {
    formats().into_iter().find(|(n, _)| *n == name).unwrap().1
}

/// The inputs of one case: spec, dims, parameters (RMSNorm weight centred at 1, spread 0.2,
/// bf16 values), one sequence of `tokens`, the prepended tokens of the shifted run.
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
    let mut params = KernelParams::random(&spec, dims, 21);
    let spread = phasekv::kernel::random_input(D_HEAD, 1, 22);
    if let Some(g) = &mut params.gamma {
        for (v, r) in g.iter_mut().zip(spread.iter()) {
            *v = round_to(DType::BF16, 1.0 + 0.2 * r);
        }
    }
    let x = phasekv::kernel::random_input(tokens, D_MODEL, 23).into_shape_with_order((1, tokens, D_MODEL)).unwrap();
    let pre = phasekv::kernel::random_input(spec.geometry.stride(), D_MODEL, 24);
    Case { spec, dims, params, x, pre }
}

impl Case {
    /// The dump of the kernel that computes `computed` with `params` (a bug when they differ
    /// from the case's), labelled with the case's spec and parameters.
    fn dump_of(&self, computed: &KernelSpec, params: &KernelParams<f64>, mutant: Option<Mutant>) -> Dump {
        let mut d =
            mutant_dump(&self.spec, computed, mutant, self.dims, params, &self.x, DType::BF16, Some((&self.pre, 1)))
                .unwrap();
        d.params = reference_dump(&self.spec, self.dims, &self.params, &self.x, DType::BF16, None).unwrap().params;
        d
    }

    fn correct(&self) -> Dump {
        self.dump_of(&self.spec, &self.params, None)
    }
}

fn runs(d: &mut Dump) -> Vec<&mut Run> {
    [Some(&mut d.main), d.shifted.as_mut(), d.perturbed.as_mut().map(|p| &mut p.0)].into_iter().flatten().collect()
}

/// The dump as stored: every run's keys (and values) encoded in `f`, labelled `f`.
fn stored(mut d: Dump, f: &CacheFormat) -> Dump {
    let r = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(d.dims.d_head));
    let q = f.quantized_channels(d.dims.d_head, r);
    for run in runs(&mut d) {
        for a in [Some(&mut run.keys), run.values.as_mut()].into_iter().flatten() {
            for mut row in a.rows_mut() {
                let mut v = row.to_vec();
                f.round_entry(&mut v, q);
                row.assign(&ndarray::Array1::from(v));
            }
        }
    }
    d.cache_format = Some(f.clone());
    d
}

/// Applies `bug` to every key of every run before encoding (`bug(entry position, key)`),
/// rounding to bf16 after it as the kernel stores its result.
/// A bug on one key: `(entry position, key, its pooled entry)`.
type KeyBug<'a> = &'a dyn Fn(usize, &mut Vec<f64>, &[f64]);

fn keys_bug(mut d: Dump, bug: KeyBug) -> Dump {
    let spec = d.spec.clone();
    for run in runs(&mut d) {
        let pooled = run.pooled_keys.clone().unwrap();
        for k in 0..run.keys.shape()[0] {
            for j in 0..run.keys.shape()[1] {
                let mut v = run.keys.slice(s![k, j, ..]).to_vec();
                bug(spec.entry_position(j), &mut v, &pooled.slice(s![k, j, ..]).to_vec());
                let v: Vec<f64> = v.into_iter().map(|x| round_to(DType::BF16, x)).collect();
                run.keys.slice_mut(s![k, j, ..]).assign(&ndarray::Array1::from(v));
            }
        }
    }
    d
}

fn without_pooled(mut d: Dump) -> Dump {
    for run in runs(&mut d) {
        run.pooled_keys = None;
        run.pooled_values = None;
    }
    d
}

fn failing(v: &Validation) -> Vec<String> {
    v.rows.iter().filter(|r| r.status == Status::Fail).map(|r| format!("{}: {}", r.id, r.name)).collect()
}

fn assert_fails(d: &Dump, what: &str) -> Validation {
    let v = validate(d).unwrap();
    assert!(!v.passed, "{what} passes: {:#?}", v.rows);
    v
}

fn rotated(d: &Dump) -> (usize, Vec<f64>) {
    let rs = d.spec.rope.as_ref().unwrap();
    let r = rs.rotated_channels(d.dims.d_head);
    (d.dims.d_head - r, rs.inv_frequencies(r))
}

#[test]
fn the_correct_kernel_passes_in_every_format_with_and_without_pooled_entries() {
    for preset in ["dsv41-c4", "dsv4-csa"] {
        let c = case(preset, 259);
        for (name, f) in formats() {
            for d in [stored(c.correct(), &f), stored(without_pooled(c.correct()), &f)] {
                let v = validate(&d).unwrap();
                assert!(v.passed, "{preset} {name}: {:#?}", v.rows);
            }
        }
    }
}

#[test]
fn rms_norm_bugs_fail_in_mxfp8_and_fp4() {
    let c = case("dsv41-c4", 259);
    let mut off = c.params.clone();
    let g = off.gamma.as_mut().unwrap();
    let first = g[0];
    for i in 0..D_HEAD - 1 {
        g[i] = g[i + 1];
    }
    g[D_HEAD - 1] = first;
    let mut missing = c.params.clone();
    missing.gamma.as_mut().unwrap().fill(1.0);
    for (fname, pooled) in [("MXFP8 pow2/32", true), ("MXFP8 pow2/32", false), ("FP4 e4m3/16", true)] {
        let f = format(fname);
        let d = c.dump_of(&c.spec, &off, None);
        let d = if pooled { d } else { without_pooled(d) };
        assert_fails(&stored(d, &f), &format!("gamma one channel off, {fname}, pooled {pooled}"));
    }
    assert_fails(&stored(c.dump_of(&c.spec, &missing, None), &format("FP4 e4m3/16")), "gamma missing, FP4");
    // RMSNorm over 448 of 512 channels: every key times rms_512(pooled) / rms_448(pooled).
    let partial = keys_bug(c.correct(), &|_, v, p| {
        let ms = |a: &[f64]| a.iter().map(|x| x * x).sum::<f64>() / a.len() as f64;
        let factor = ((ms(p) + 1e-6) / (ms(&p[..448]) + 1e-6)).sqrt();
        v.iter_mut().for_each(|x| *x *= factor);
    });
    assert_fails(&stored(partial, &format("MXFP8 pow2/32")), "RMSNorm over 448 channels, MXFP8");
}

#[test]
fn scale_and_rope_bugs_fail_in_mxfp8_and_fp4() {
    let c = case("dsv41-c4", 259);
    let f = format("MXFP8 pow2/32");
    let scaled = keys_bug(c.correct(), &|_, v, _| v.iter_mut().for_each(|x| *x *= 1.015));
    let v = assert_fails(&stored(scaled, &f), "keys x 1.015, MXFP8");
    assert!(failing(&v).iter().any(|r| r.contains("systematic scale: keys")), "{:?}", failing(&v));
    let (first_rot, _) = rotated(&c.correct());
    let rot = keys_bug(c.correct(), &|_, v, _| v[first_rot..].iter_mut().for_each(|x| *x *= 1.1));
    assert_fails(&stored(rot, &f), "rotated channels x 1.1, MXFP8");
    // No YaRN: FP4 at ratio 4, and the V4 FP8 NoPE record (its RoPE channels bf16).
    for (preset, fname) in [("dsv41-c4", "FP4 e4m3/16"), ("dsv4-csa", "V4 FP8 NoPE")] {
        let c = case(preset, 259);
        let mut plain = c.spec.clone();
        plain.rope.as_mut().unwrap().scaling = None;
        assert_fails(
            &stored(c.dump_of(&plain, &c.params, None), &format(fname)),
            &format!("no YaRN, {preset} {fname}"),
        );
    }
}

/// The grid one token late for windows starting at token 256 and after: with 259 tokens only the
/// shifted run has such a window, so K3 (on the pooled entries, gates and stored keys, each
/// against its own bound) is what must fail.
#[test]
fn a_grid_late_from_token_256_fails_k3_in_every_format() {
    let c = case("dsv41-c4", 259);
    let good = c.correct();
    let late = c.dump_of(&c.spec, &c.params, Some(Mutant::WindowStartOffByOne));
    let g = c.spec.geometry;
    let mut bad = good.clone();
    for (run, late_run) in runs(&mut bad).into_iter().zip([Some(&late.main), late.shifted.as_ref()]) {
        let Some(l) = late_run else { continue };
        for j in 0..run.keys.shape()[1] {
            if g.start(j) < 256 {
                continue;
            }
            run.keys.slice_mut(s![.., j, ..]).assign(&l.keys.slice(s![.., j, ..]));
            let lp = l.pooled_keys.as_ref().unwrap().slice(s![.., j, ..]);
            run.pooled_keys.as_mut().unwrap().slice_mut(s![.., j, ..]).assign(&lp);
            let lg = l.gate_k.as_ref().unwrap().slice(s![.., j, .., ..]);
            run.gate_k.as_mut().unwrap().slice_mut(s![.., j, .., ..]).assign(&lg);
        }
    }
    for (name, f) in formats() {
        for d in [bad.clone(), without_pooled(bad.clone())] {
            let pooled = d.main.pooled_keys.is_some();
            let v = assert_fails(&stored(d, &f), &format!("late from 256, {name}, pooled {pooled}"));
            assert!(failing(&v).iter().any(|r| r.starts_with("K3")), "{name} pooled {pooled}: {:?}", failing(&v));
        }
    }
}

/// A RoPE table clamped at position 256 (every later entry rotated as at 256): 300 tokens, so
/// the main run holds entries past 256.
#[test]
fn a_rope_table_clamped_at_256_fails_in_every_format() {
    let c = case("dsv41-c4", 300);
    let (first_rot, freqs) = rotated(&c.correct());
    let back: Vec<f64> = freqs.iter().map(|f| -f).collect();
    let clamped = keys_bug(c.correct(), &|p, v, _| {
        if p > 256 {
            rope(&mut v[..], &back, p - 256);
        }
        let _ = first_rot;
    });
    for (name, f) in formats() {
        assert_fails(&stored(clamped.clone(), &f), &format!("RoPE clamped at 256, {name}"));
    }
}

/// A RoPE position wrapping at 256 (every entry from 256 on rotated as at `p mod 256`) at CSA
/// width (`dsv41-c4`, `W = 8`, 300 tokens): fails in every stored format, with and without
/// pooled entries (issue 41; the HCA-width twin is below).
#[test]
fn a_rope_position_wrapping_at_256_fails_at_csa_width_in_every_format() {
    let c = case("dsv41-c4", 300);
    let good = c.correct();
    let (_, freqs) = rotated(&good);
    let back: Vec<f64> = freqs.iter().map(|f| -f).collect();
    let wrapped = keys_bug(good.clone(), &|p, v, _| {
        if p >= 256 {
            rope(&mut v[..], &back, p - p % 256);
        }
    });
    for (name, f) in formats() {
        let v = validate(&stored(good.clone(), &f)).unwrap();
        assert!(v.passed, "CSA {name}: the correct record fails: {:?}", failing(&v));
        for d in [wrapped.clone(), without_pooled(wrapped.clone())] {
            let pooled = d.main.pooled_keys.is_some();
            let v = assert_fails(&stored(d, &f), &format!("CSA RoPE wrapping at 256, {name}, pooled {pooled}"));
            assert!(failing(&v).iter().any(|r| r.contains("keys")), "{name} pooled {pooled}: {:?}", failing(&v));
        }
    }
}

/// `d`'s keys encoded in `f` with its first `quantized` channels encoded (every run), labelled
/// `label`: a record stored one way and labelled another.
fn relabelled(d: &Dump, f: &CacheFormat, quantized: usize, label: &str) -> Dump {
    let mut d = d.clone();
    for run in runs(&mut d) {
        for mut row in run.keys.rows_mut() {
            let mut v = row.to_vec();
            f.round_entry(&mut v, quantized);
            row.assign(&ndarray::Array1::from(v));
        }
    }
    d.cache_format = Some(CacheFormat::from_json(label).unwrap());
    d
}

/// Issue 41, item 4: each wrong label the issue lists is refused (exit 2) naming the field,
/// through the library and the CLI, while the right label passes.
#[test]
fn labels_the_stored_record_contradicts_are_refused_naming_the_field() {
    let c = case("dsv41-c4", 259);
    let good = c.correct();
    let fmt = |j: &str| CacheFormat::from_json(j).unwrap();
    let pow2_32 = r#"{"element":"e4m3","scale":"pow2","block":32,"channels":"all"}"#;
    let e8m0_32 = r#"{"element":"e4m3","scale":"e8m0","block":32,"channels":"all"}"#;
    let nv = r#"{"element":"e2m1","scale":"e4m3","block":16,"channels":"all"}"#;
    let mx4 = r#"{"element":"e2m1","scale":"e8m0","block":32,"channels":"all"}"#;
    let cases = [
        ("OCP e8m0 labelled pow2", e8m0_32, 512, pow2_32, "cache_format.scale"),
        ("pow2 labelled e8m0", pow2_32, 512, e8m0_32, "cache_format.scale"),
        (
            // With power-of-two scales a block of 32 is also a valid pair of blocks of 16 (FP
            // elements at scale s are elements at s / 2): the data cannot tell, and the decoded
            // values agree. With E4M3 scales they cannot be both.
            "blocks of 32 labelled 16",
            r#"{"element":"e2m1","scale":"e4m3","block":32,"channels":"all"}"#,
            512,
            nv,
            "cache_format.block",
        ),
        (
            "blocks of 16 labelled 32",
            nv,
            512,
            r#"{"element":"e2m1","scale":"e4m3","block":32,"channels":"all"}"#,
            "cache_format.block",
        ),
        ("MXFP4 labelled NVFP4", mx4, 512, nv, "cache_format.scale and cache_format.block"),
        (
            "pow2 labelled f32",
            pow2_32,
            512,
            r#"{"element":"e4m3","scale":"f32","block":32,"channels":"all"}"#,
            "cache_format.scale",
        ),
        (
            "a NoPE/RoPE split at channel 464",
            r#"{"element":"e4m3","scale":"pow2","block":64,"channels":"all"}"#,
            464,
            r#"{"element":"e4m3","scale":"pow2","block":64,"channels":"nope"}"#,
            "cache_format.channels",
        ),
        (
            "an all-channel record labelled nope",
            r#"{"element":"e4m3","scale":"pow2","block":64,"channels":"all"}"#,
            512,
            r#"{"element":"e4m3","scale":"pow2","block":64,"channels":"nope"}"#,
            "cache_format.channels",
        ),
        (
            "block 1 with f32 scales (degenerate)",
            r#"{"element":"e4m3","scale":"f32","block":1,"channels":"all"}"#,
            512,
            r#"{"element":"e4m3","scale":"f32","block":1,"channels":"all"}"#,
            "cache_format.block",
        ),
    ];
    for (what, stored_as, quantized, label, field) in cases {
        let right = relabelled(&good, &fmt(stored_as), quantized, stored_as);
        if !what.contains("degenerate") && quantized == 512 {
            assert!(validate(&right).unwrap().passed, "{what}: the right label fails");
        }
        let d = relabelled(&good, &fmt(stored_as), quantized, label);
        let e = validate(&d).expect_err(what).to_string();
        assert!(e.contains(field) && e.lines().count() == 1, "{what}: {e}");
    }
    // Through the CLI: exit 2, one line naming the field.
    let dir = std::env::temp_dir().join(format!("phasekv-label-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mx4-as-nv.safetensors");
    relabelled(&good, &fmt(mx4), 512, nv).save(&file).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(["kernel", "validate"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.trim().lines().count() == 1 && err.contains("cache_format.scale"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 41, item 6: the hints speak on quantized records, judged by the rounding model of the
/// record's own format. A RoPE bug (no YaRN) in an MXFP8 record gets the RoPE hint, and an
/// RMSNorm bug (every entry its own scale: eps 0.05 for 1e-6) the RMSNorm hint; before, no hint
/// was ever given for a quantized record (its grid error failed every channel group).
#[test]
fn quantized_records_get_the_rope_and_rms_norm_hints() {
    let c = case("dsv41-c4", 259);
    let f = format("MXFP8 pow2/32");
    let mut no_yarn = c.spec.clone();
    no_yarn.rope.as_mut().unwrap().scaling = None;
    let v = assert_fails(&stored(c.dump_of(&no_yarn, &c.params, None), &f), "no YaRN, MXFP8");
    let hint = v.hints.join(" | ");
    assert!(hint.contains("only the rotated channels fail") && hint.contains("RoPE frequency"), "{hint}");
    let mut eps = c.spec.clone();
    eps.rms_norm_eps = 0.05;
    let v = assert_fails(&stored(c.dump_of(&eps, &c.params, None), &f), "eps 0.05, MXFP8");
    assert!(v.hints.iter().any(|h| h.contains("RMSNorm mismatch")), "{:?}: {:?}", v.hints, failing(&v));
    // The correct record in the same format gets no hint (it passes).
    assert!(validate(&stored(c.correct(), &f)).unwrap().hints.is_empty());
}

/// Issue 41, item 6: an RMSNorm-shaped bug (each entry times its own `1 + c_j`, `c_j` 1-2 %)
/// small enough that only the RMS half of the keys' rule fails (plain bf16) still gets the
/// RMSNorm hint: the entry-scale residual is judged by both halves, no longer by the RMS bound
/// alone as a largest error (which bf16's own rounding of the largest key exceeds).
#[test]
fn the_rms_norm_hint_is_given_when_only_the_rms_half_fails() {
    let c = case("dsv41-c4", 259);
    let d = keys_bug(c.correct(), &|p, v, _| {
        let s = 1.0 + 0.015 * (1.0 + 0.3 * (p as f64).sin());
        v.iter_mut().for_each(|x| *x *= s);
    });
    let v = assert_fails(&d, "entries scaled by 1.5 %");
    let keys = v.rows.iter().find(|r| r.name.starts_with("tolerance: keys")).unwrap();
    assert!(keys.note.contains("rms") && keys.error < keys.bound * 10.0, "{keys:?}");
    let max_half = keys.note.split("max|impl - ref64| = ").nth(1).unwrap();
    let (err, rest) = max_half.split_once(" vs ").unwrap();
    let bound = rest.split(" = ").nth(1).unwrap().split([' ', ';']).next().unwrap();
    let (err, bound): (f64, f64) = (err.parse().unwrap(), bound.parse().unwrap());
    assert!(err <= bound, "the max half must pass for this control: {keys:?}");
    assert!(v.hints.iter().any(|h| h.contains("RMSNorm mismatch")), "{:?}: {:?}", v.hints, failing(&v));
}

/// Issue 41, item 6: an OCP MXFP8 record from an encoding that does not saturate (a block's
/// largest value beyond 448 times its E8M0 scale cast to NaN, as `float8_e4m3fn` does) is
/// named as such, not blamed on RMSNorm.
#[test]
fn a_non_saturating_fp8_record_is_named_not_blamed_on_rms_norm() {
    let c = case("dsv41-c4", 259);
    let f = format("OCP MXFP8");
    let good = c.correct();
    let mut d = stored(good.clone(), &f);
    let mut nans = 0;
    for (run, src) in runs(&mut d).into_iter().zip([Some(&good.main), good.shifted.as_ref()]) {
        let Some(src) = src else { continue };
        for k in 0..run.keys.shape()[0] {
            for j in 0..run.keys.shape()[1] {
                for b in 0..D_HEAD / 32 {
                    let y: Vec<f64> = (0..32).map(|i| src.keys[[k, j, 32 * b + i]]).collect();
                    let amax = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                    if amax == 0.0 {
                        continue;
                    }
                    let scale = 2f64.powi(amax.log2().floor() as i32 - 8);
                    for (i, v) in y.iter().enumerate() {
                        if v.abs() / scale >= 464.0 {
                            run.keys[[k, j, 32 * b + i]] = f64::NAN;
                            nans += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(nans > 0);
    let v = assert_fails(&d, "non-saturating OCP MXFP8");
    assert!(v.hints.iter().any(|h| h.contains("does not saturate")), "{:?}", v.hints);
    assert!(v.hints.iter().all(|h| !h.contains("RMSNorm")), "{:?}", v.hints);
}

/// Issue 41, item 6: vLLM V4.1's MXFP8 record (pow2 scales per 32, every channel) labelled as
/// plain bf16 gets the suggestion of its own format; before, the per-64 NoPE format, tried
/// first, also held its values and was suggested. The V4 NoPE record still gets its own.
#[test]
fn an_unlabelled_quantized_record_is_suggested_its_own_cache_format() {
    let c = case("dsv41-c4", 259);
    for (name, want) in [
        ("MXFP8 pow2/32", r#""scale":"pow2","block":32,"channels":"all""#),
        ("V4 FP8 NoPE", r#""scale":"pow2","block":64,"channels":"nope""#),
    ] {
        let mut d = stored(c.correct(), &format(name));
        d.cache_format = None;
        let v = assert_fails(&d, &format!("{name} labelled bf16"));
        let hint = v.hints.iter().find(|h| h.contains("cache_format = ")).unwrap_or_else(|| panic!("{:?}", v.hints));
        assert!(hint.contains(want), "{name}: {hint}");
    }
}

/// Issue 41, item 4, at HCA width (`W = 128`, where the table's bugs apply too): over 387 tokens
/// the main run holds the window starting at token 256 (the coverage `validate` now asks for),
/// so a RoPE position wrapping at 256 (entry 2 rotated as at position 0) and the grid one token
/// late from token 256 fail in every stored format, with and without pooled entries.
#[test]
fn bugs_from_token_256_fail_at_hca_width_in_every_format() {
    let c = case("dsv4-hca", 387);
    let good = c.correct();
    assert!(good.main.keys.shape()[1] == 3 && c.spec.geometry.start(2) == 256);
    let (_, freqs) = rotated(&good);
    let back: Vec<f64> = freqs.iter().map(|f| -f).collect();
    let wrapped = keys_bug(good.clone(), &|p, v, _| {
        if p >= 256 {
            rope(&mut v[..], &back, p - p % 256);
        }
    });
    let late = c.dump_of(&c.spec, &c.params, Some(Mutant::WindowStartOffByOne));
    let g = c.spec.geometry;
    let mut late_256 = good.clone();
    for (run, late_run) in runs(&mut late_256).into_iter().zip([Some(&late.main), late.shifted.as_ref()]) {
        let Some(l) = late_run else { continue };
        for j in 0..run.keys.shape()[1] {
            if g.start(j) < 256 {
                continue;
            }
            run.keys.slice_mut(s![.., j, ..]).assign(&l.keys.slice(s![.., j, ..]));
            let lp = l.pooled_keys.as_ref().unwrap().slice(s![.., j, ..]);
            run.pooled_keys.as_mut().unwrap().slice_mut(s![.., j, ..]).assign(&lp);
            let lg = l.gate_k.as_ref().unwrap().slice(s![.., j, .., ..]);
            run.gate_k.as_mut().unwrap().slice_mut(s![.., j, .., ..]).assign(&lg);
        }
    }
    for (name, f) in formats() {
        let v = validate(&stored(good.clone(), &f)).unwrap();
        assert!(v.passed, "HCA {name}: the correct record fails: {:?}", failing(&v));
        assert!(v.warnings.iter().all(|w| !w.contains("main-run window")), "{:?}", v.warnings);
        for d in [wrapped.clone(), without_pooled(wrapped.clone())] {
            let v = assert_fails(&stored(d, &f), &format!("HCA RoPE wrapping at 256, {name}"));
            assert!(failing(&v).iter().any(|r| r.contains("tolerance: keys")), "{name}: {:?}", failing(&v));
        }
        for d in [late_256.clone(), without_pooled(late_256.clone())] {
            let pooled = d.main.pooled_keys.is_some();
            let v = assert_fails(&stored(d, &f), &format!("HCA grid late from 256, {name}, pooled {pooled}"));
            assert!(failing(&v).iter().any(|r| r.starts_with("K13")), "{name} pooled {pooled}: {:?}", failing(&v));
        }
    }
}
