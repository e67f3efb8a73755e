//! Issue 47, rows 1, 2, 4, 5, 10 and 11, as a hostile or careless user meets them: degenerate
//! cache-format labels and all-zero outputs, `kernel validate`'s memory, the lab's work bounds,
//! the first signal stopping every long command, strict grid suffixes, and one spec check for
//! `kernel check --spec` and `kernel validate`. Each case spawns the binary and checks the exit
//! status, the one line, and that nothing is left behind.

use crate::common;

use candle_core::DType;
use common::plans::scratch;
use phasekv::conformance::dump::{write_npy_dir, Dump};
use phasekv::conformance::known::reference_dump;
use phasekv::kernel::spec::{RopeChannels, RopeScaling};
use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Exit {
    code: i32,
    out: String,
    err: String,
    secs: f64,
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run phasekv")
}

/// Waits for `child` with a hard deadline (a hang is a failure, not a stuck test).
fn finish(mut child: Child, started: Instant, limit: f64) -> Exit {
    while child.try_wait().unwrap().is_none() {
        if started.elapsed().as_secs_f64() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = started.elapsed().as_secs_f64();
    let o = child.wait_with_output().unwrap();
    Exit {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into(),
        err: String::from_utf8_lossy(&o.stderr).into(),
        secs,
    }
}

fn run(args: &[&str]) -> Exit {
    finish(spawn(args), Instant::now(), 60.0)
}

/// Exit status 2, one line on stderr starting `error: `, containing every needle.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let e = run(args);
    assert_eq!(e.code, 2, "{args:?}: exit {}\n{}{}", e.code, e.out, e.err);
    assert_eq!(e.err.trim().lines().count(), 1, "{args:?}: not one line:\n{}", e.err);
    assert!(e.err.starts_with("error: "), "{args:?}: {}", e.err);
    for n in needles {
        assert!(e.err.contains(n), "{args:?}: {:?} lacks {n:?}", e.err);
    }
    e.err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The reference's own dump of `preset` on `b` sequences of `t` tokens (a correct kernel).
fn dump(preset: &str, dims: KernelDims, b: usize, t: usize, dtype: DType) -> Dump {
    let spec = KernelSpec::preset(preset).unwrap();
    let params = KernelParams::random(&spec, dims, 3);
    let x = phasekv::kernel::random_input(b * t, dims.d_model, 4).into_shape_with_order((b, t, dims.d_model)).unwrap();
    reference_dump(&spec, dims, &params, &x, dtype, None).unwrap()
}

/// Writes `d` as a `.npy` folder with `edit` applied to its `metadata.json` map.
fn write_with_meta(d: &Dump, dir: &Path, edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>)) {
    write_npy_dir(dir, d).unwrap();
    let path = dir.join("metadata.json");
    let mut meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(meta.as_object_mut().unwrap());
    std::fs::write(&path, serde_json::to_string(&meta).unwrap()).unwrap();
}

fn zero_outputs(d: &mut Dump) {
    let r = &mut d.main;
    r.keys.fill(0.0);
    for a in [r.values.as_mut(), r.pooled_keys.as_mut(), r.pooled_values.as_mut()].into_iter().flatten() {
        a.fill(0.0);
    }
}

/// Peak resident memory of `phasekv args` in KiB, read by GNU time (`.ci/run` installs it; a
/// machine without it fails here, never skips).
fn max_rss_kib(args: &[&str]) -> (i32, u64) {
    assert!(
        Path::new("/usr/bin/time").exists(),
        "GNU time (/usr/bin/time, Debian package `time`) is needed to measure peak memory"
    );
    let o = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let kib = err
        .lines()
        .find(|l| l.contains("Maximum resident set size"))
        .and_then(|l| l.rsplit(':').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in GNU time's output:\n{err}"));
    (o.status.code().unwrap_or(-1), kib)
}

#[test]
fn row_1_degenerate_scale_labels_are_refused_and_all_zero_outputs_fail() {
    let dir = scratch("bounds-zero");
    let dims = KernelDims::new(4, 16).unwrap();
    let good = dump("w4s2", dims, 1, 24, DType::F32);
    let mut zero = good.clone();
    zero_outputs(&mut zero);
    // Degenerate labels are refused whatever the data (here all zero), naming field and range.
    for (i, (field, value, range)) in [
        ("global_scale", 5e-324, "1.1754943508222875e-38..=3.4028234663852886e38"),
        ("amax_min", 1e300, "..=1e-3"),
        ("global_scale", 1e39, "..=3.4028234663852886e38"),
        ("amax_min", 8.0, "..=1e-3"),
    ]
    .into_iter()
    .enumerate()
    {
        let npy = dir.join(format!("label-{i}"));
        write_with_meta(&zero, &npy, |m| {
            let f = format!(
                r#"{{"element": "e4m3", "scale": "pow2", "block": 4, "channels": "all", "{field}": {value:e}}}"#
            );
            m.insert("cache_format".into(), f.into());
        });
        refused(&["kernel", "validate", s(&npy)], &["cache_format", field, range]);
    }
    // An all-zero output fails (exit 1) whatever its label: plain f32, and a sane cache format
    // (vLLM's floor) ...
    let plain = dir.join("plain");
    write_with_meta(&zero, &plain, |_| {});
    let vllm = dir.join("vllm");
    write_with_meta(&zero, &vllm, |m| {
        m.insert(
            "cache_format".into(),
            r#"{"element": "e4m3", "scale": "pow2", "block": 4, "channels": "all", "amax_min": 1e-4}"#.into(),
        );
    });
    for npy in [&plain, &vllm] {
        let e = run(&["kernel", "validate", s(npy)]);
        assert_eq!(e.code, 1, "{}{}", e.out, e.err);
        let row = e.out.lines().find(|l| l.contains("outputs not all zero")).expect("the row is printed");
        assert!(row.contains("FAIL") && row.contains("every keys entry is 0"), "{row}");
    }
    // ... while the correct kernel's dump passes it (the row is no blanket failure).
    let ok = dir.join("ok");
    write_with_meta(&good, &ok, |_| {});
    let e = run(&["kernel", "validate", s(&ok)]);
    assert_eq!(e.code, 0, "{}{}", e.out, e.err);
    assert!(e.out.lines().any(|l| l.contains("outputs not all zero") && l.contains("PASS")), "{}", e.out);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn row_2_validate_memory_is_bounded_and_a_dump_beyond_the_bound_is_refused_saying_what_fits() {
    let dir = scratch("bounds-memory");
    // Issue 47's shape (d = 8, d_h = 512, w8s4, all-zero outputs, keys and values only) at 2
    // sequences of 512 tokens. Before, the phase profile cached every token's projections of
    // every sequence (B T G (2 d_h + 2 c) f64, 134 MB here) and the references kept their gates:
    // 390 / 748 / 1455 MB peak for 2 / 4 / 8 sequences of 1024 tokens, 93 / 128 / 191 MB now.
    let dims = KernelDims::new(8, 512).unwrap();
    let mut d = dump("w8s4", dims, 2, 512, DType::BF16);
    zero_outputs(&mut d);
    let r = &mut d.main;
    (r.pooled_keys, r.pooled_values, r.gate_k, r.gate_v) = (None, None, None, None);
    let file = dir.join("zero.safetensors");
    d.save(&file).unwrap();
    let est = phasekv::conformance::validate::memory_estimate(&d).unwrap();
    let old_cache = 2 * 512 * 8 * 2 * (512 + 512) * 8;
    {
        let (code, kib) = max_rss_kib(&["kernel", "validate", s(&file)]);
        assert_eq!(code, 1);
        // Within the estimate plus the binary's own (24 MB measured), and below what the
        // old profile cache alone held.
        let rss = kib * 1024;
        assert!(rss < est + (40 << 20), "peak {rss} B, estimate {est} B");
        assert!(rss < old_cache, "peak {rss} B, the old cache alone {old_cache} B");
    }
    // Refused before any work, naming the bound and what fits.
    let w = 1usize << 17;
    let spec = KernelSpec::preset(&format!("w{w}s{w}")).unwrap();
    let dims = KernelDims::new(1, 1).unwrap();
    let params = KernelParams::random(&spec, dims, 1);
    let x = phasekv::kernel::random_input(w, 1, 2).into_shape_with_order((1, w, 1)).unwrap();
    let bomb = reference_dump(&spec, dims, &params, &x, DType::F32, None).unwrap();
    let file = dir.join("bomb.safetensors");
    bomb.save(&file).unwrap();
    refused(&["kernel", "validate", s(&file)], &["work of validation", "MAX_VALIDATION_WORK", "not even one sequence"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn row_2_the_memory_bound_says_how_many_sequences_fit() {
    let d = dump("w4s2", KernelDims::new(2, 8).unwrap(), 3, 16, DType::F32);
    let est = phasekv::conformance::validate::memory_estimate(&d).unwrap();
    let one = phasekv::conformance::validate::memory_estimate(&dump(
        "w4s2",
        KernelDims::new(2, 8).unwrap(),
        1,
        16,
        DType::F32,
    ))
    .unwrap();
    assert!(est > one && est <= 3 * one, "{est} vs {one}");
    let bound = phasekv::conformance::validate::bound_error;
    let e = bound("x", Some(est), est - 1, 3, 16, "above {max}").unwrap_err().to_string();
    let fit = (est - 1) / (est / 3);
    let want =
        format!("invalid x: {est} for 3 sequence(s) is above {}; at most {fit} sequence(s) of 16 tokens fit", est - 1);
    assert_eq!(e, want);
    let e = bound("x", Some(est), 1, 3, 16, "above {max}").unwrap_err().to_string();
    assert!(e.contains("not even one sequence of 16 tokens fits"), "{e}");
    let e = bound("x", None, 1, 3, 16, "above {max}").unwrap_err().to_string();
    assert!(e.contains("more than 2^64"), "{e}");
    assert!(bound("x", Some(est), est, 3, 16, "above {max}").is_ok());
}

#[test]
fn row_10_grid_suffixes_are_parsed_strictly() {
    for bad in ["w8s8@o4@o2", "w8s8@o+4", "w8s8@o"] {
        refused(&["kernel", "check", "--preset", bad, "--cases", "1"], &["invalid preset", bad, "one suffix @o{k}"]);
        refused(&["kernel", "list", "--json", bad], &["invalid preset", bad]);
    }
    // The one suffix, in digits, is accepted and names its offset.
    let e = run(&["kernel", "list", "--json", "w8s8@o4"]);
    assert_eq!(e.code, 0, "{}", e.err);
    let spec = KernelSpec::from_json(&e.out).unwrap();
    assert_eq!(spec.geometry.offset(), 4);
}

#[test]
fn row_11_check_spec_refuses_what_validate_refuses_through_one_check() {
    let dir = scratch("bounds-spec");
    let mut count = KernelSpec::preset("w4s2").unwrap();
    count.rope.as_mut().unwrap().channels = RopeChannels::Count(1 << 63);
    let mut wrong_list = KernelSpec::preset("w4s2").unwrap();
    let rope = wrong_list.rope.as_mut().unwrap();
    rope.channels = RopeChannels::Count(8);
    rope.scaling = Some(RopeScaling::Frequencies(vec![1.0, 0.5, 0.25]));
    let mut huge_list = wrong_list.clone();
    huge_list.rope.as_mut().unwrap().scaling = Some(RopeScaling::Frequencies(vec![0.5; 1_000_000]));
    let dims = KernelDims::new(2, 8).unwrap();
    let base = dump("w4s2", dims, 1, 12, DType::F32);
    for (name, spec, field) in [
        ("count", &count, "rope.channels.count"),
        ("list", &wrong_list, "rope.scaling.frequencies"),
        ("huge", &huge_list, "rope.scaling.frequencies"),
    ] {
        let json = serde_json::to_string(spec).unwrap();
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, &json).unwrap();
        let started = Instant::now();
        refused(&["kernel", "check", "--spec", s(&file), "--cases", "1"], &["invalid", field]);
        assert!(started.elapsed() < Duration::from_secs(20), "{name}: {:?}", started.elapsed());
        // `kernel validate` refuses the same spec on a dump, naming the same field.
        let npy = dir.join(format!("{name}-dump"));
        write_with_meta(&base, &npy, |m| {
            m.remove("preset");
            m.insert("spec".into(), json.clone().into());
        });
        refused(&["kernel", "validate", s(&npy)], &[field]);
    }
    // The check itself: a spec some width holds passes it with those widths (the positive
    // control), one no width holds is refused, and a long list costs no scan of 4096 widths.
    let mut fits = wrong_list.clone();
    fits.rope.as_mut().unwrap().scaling = Some(RopeScaling::Frequencies(vec![1.0, 0.5, 0.25, 0.125]));
    assert_eq!(fits.head_widths(1, 4).unwrap(), vec![8, 9, 10, 11]);
    assert!(wrong_list.head_widths(1, 4).unwrap_err().to_string().contains("one frequency per rotated pair"));
    let started = Instant::now();
    assert!(huge_list.head_widths(1, 4).is_err());
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every file under `dir`, relative, sorted (what a stopped command must not have changed).
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Starts `phasekv args`, sends `signal` once `ready()` holds and `lead` seconds more have
/// passed, and checks that it stops within `within` seconds of the signal with `code` and one
/// line naming the signal.
fn stops_on(args: &[&str], ready: &dyn Fn() -> bool, lead: f64, signal: &str, code: i32, within: f64) -> Exit {
    let child = spawn(args);
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(60), "{args:?}: never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs_f64(lead));
    let pid = child.id().to_string();
    let sent = Instant::now();
    assert!(Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
    let e = finish(child, started, 120.0);
    let after = sent.elapsed().as_secs_f64();
    assert_eq!(e.code, code, "{args:?} on SIG{signal}: exit {}\n{}{}", e.code, e.out, e.err);
    assert!(after < within, "{args:?}: stopped {after:.1} s after SIG{signal} (of {:.1} s)", e.secs);
    e
}

/// The stopped command's one line (after any progress output) names the signal and what stopped.
fn names_signal(e: &Exit, signal: &str, what: &str) {
    let last = e.err.trim_end().lines().last().unwrap_or("");
    let want = format!("interrupted by SIG{signal}: stopped during {what}");
    assert!(last.starts_with(&want) && last.ends_with("nothing was written"), "{want:?}: {}", e.err);
}

/// A tiny run on longer sequences (so that evaluating many prompts takes seconds), trained.
fn trained(dir: &Path) -> std::path::PathBuf {
    let mut c = common::configs::tiny_config("w8s4");
    c.task.residue_modulus = 4;
    c.task.max_prefix = 160;
    c.model.d_model = 32;
    c.train.steps = 2;
    c.train.batch_size = 2;
    c.train.warmup_steps = 1;
    c.train.eval_every = 2;
    c.train.eval_samples = 4;
    c.train.checkpoint_every = 2;
    let cfg = dir.join("tiny.json");
    std::fs::write(&cfg, serde_json::to_string_pretty(&c).unwrap()).unwrap();
    let run = dir.join("run");
    let e = run_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--quiet"]);
    assert!(e.contains("exact-match"), "{e}");
    run
}

fn run_ok(args: &[&str]) -> String {
    let e = run(args);
    assert_eq!(e.code, 0, "{args:?}\n{}{}", e.out, e.err);
    e.out
}

#[test]
fn row_5_the_first_signal_stops_eval_and_analyze_leaving_nothing() {
    let dir = scratch("bounds-signals-lab");
    let run = trained(&dir);
    let before = listing(&run);
    let always = || true;
    // Each would run for many seconds (a minute or more for eval); each stops within two.
    let e = stops_on(&["eval", s(&run), "--samples", "20000"], &always, 1.5, "INT", 130, 2.5);
    names_signal(&e, "INT", "eval");
    assert_eq!(listing(&run), before, "eval left files");
    let args = ["analyze", "knockout", s(&run), "--samples", "2000", "--reference", "64"];
    names_signal(&stops_on(&args, &always, 1.5, "HUP", 129, 2.5), "HUP", "knockout");
    assert_eq!(listing(&run), before, "knockout left files");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn row_5_the_first_signal_stops_validate_and_audit_analyze_leaving_nothing() {
    let dir = scratch("bounds-signals-kernel");
    let dims = KernelDims::new(8, 512).unwrap();
    let d = dump("w8s4", dims, 2, 8192, DType::BF16);
    let file = dir.join("d.safetensors");
    d.save(&file).unwrap();
    let report = dir.join("report");
    let e = stops_on(&["kernel", "validate", s(&file), "--report", s(&report)], &|| true, 2.0, "TERM", 143, 2.5);
    names_signal(&e, "TERM", "kernel validate");
    assert!(!report.exists(), "a report was written");
    // Results of an external model: 400 000 lines, read for many seconds.
    let results = dir.join("results.jsonl");
    let text: String =
        (0..400_000).map(|i| format!("{{\"id\": {i}, \"group\": {}, \"correct\": {}}}\n", i % 8, i % 3 == 0)).collect();
    std::fs::write(&results, text).unwrap();
    let out = dir.join("audit");
    let args = ["audit", "analyze", s(&results), "--modulus", "8", "--out", s(&out)];
    names_signal(&stops_on(&args, &|| true, 0.5, "HUP", 129, 2.5), "HUP", "audit analyze");
    assert!(!out.exists(), "an audit was written");
    assert_eq!(listing(&dir), vec!["d.safetensors".to_string(), "results.jsonl".to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn row_5_reproduce_stops_inside_a_units_analyses() {
    let dir = scratch("bounds-signals-reproduce");
    let mut plan = common::plans::tiny_sweep(2);
    plan.sweep.as_mut().unwrap().axes[1].values.truncate(1);
    plan.seeds.truncate(1);
    plan.run.task.max_prefix = 160;
    plan.lab.eval_per_group = 20000;
    let file = dir.join("plan.json");
    common::plans::write_plan(&file, &plan);
    let out = dir.join("out");
    let unit = plan.units().unwrap().into_iter().find(|u| u.name().starts_with("model:")).unwrap();
    let Some(model_dir) = (match &unit {
        phasekv::reproduce::Unit::Model(m) => Some(out.join(m.dir())),
        _ => None,
    }) else {
        unreachable!()
    };
    // Once the model is trained, its analyses run (the evaluation of 20000 prompts per group
    // for a minute or more); the signal comes inside them.
    let metrics = model_dir.join("metrics.json");
    let e = stops_on(&["reproduce", "--plan", s(&file), "--out", s(&out)], &|| metrics.exists(), 1.0, "TERM", 143, 2.5);
    assert!(e.err.contains("interrupted: finished units and checkpoints are kept"), "{}", e.err);
    assert!(!model_dir.join("unit.json").exists());
    let stray: Vec<String> =
        listing(&model_dir).into_iter().filter(|f| f.starts_with("eval-") || f.contains(".tmp")).collect();
    assert!(stray.is_empty(), "{stray:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn row_4_lab_work_is_bounded_up_front_and_knockout_memory_does_not_grow_with_reference() {
    let dir = scratch("bounds-lab");
    // The committed reproduction's model shape (w8s4 on the recommended task), one step.
    let rec = dir.join("rec");
    run_ok(&["train", "--preset", "w8s4", "--steps", "1", "--out", s(&rec), "--quiet"]);
    let before = listing(&rec);
    let started = Instant::now();
    refused(&["eval", s(&rec), "--samples", "40000"], &["--samples", "MAX_LAB_WORK", "prompts per group fit"]);
    refused(
        &["analyze", "knockout", s(&rec), "--reference", "1024"],
        &["--samples x --reference", "MAX_LAB_WORK", "prompts per group at this --reference fit"],
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    assert_eq!(listing(&rec), before);
    // What the refusal says fits is accepted (the bound is no blanket refusal).
    let config = phasekv::model::RunConfig::from_file(&rec.join("config.json")).unwrap();
    let one = phasekv::lab::forward_work(&config).unwrap();
    let fit = phasekv::limits::MAX_LAB_WORK / (one * 24);
    assert!(phasekv::lab::check_lab_work("--samples", &config, Some(fit * 24), 24, "x").is_ok());
    assert!(phasekv::lab::check_lab_work("--samples", &config, Some((fit + 1) * 24), 24, "x").is_err());
    assert!((240..40_000).contains(&fit), "{fit}");
    // A knockout's references go through the model 32 at a time: 256 of them hold about the
    // memory of 32 (before, at 1024: 6.6 GB against 0.28 GB at 32 on this run).
    let run = trained(&dir);
    let rss = |reference: &str| {
        for stem in ["json", "csv", "svg", "png"] {
            let _ = std::fs::remove_file(run.join(format!("knockout-in-sequence.{stem}")));
        }
        max_rss_kib(&["analyze", "knockout", s(&run), "--samples", "1", "--reference", reference])
    };
    {
        let ((c32, m32), (c256, m256)) = (rss("32"), rss("256"));
        assert_eq!((c32, c256), (0, 0));
        assert!(m256 < m32 + 64 * 1024, "{m256} KiB with 256 references, {m32} KiB with 32");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Row 3: `audit analyze` holds the outcomes, never the text, and sizes them once from the line
/// count it takes first. Short external result lines (about 60 B) become 208 B outcomes, so
/// the floor is about 3.5 times the file; a vector grown by doubling peaks near twice that
/// just above a power of two, which is where this file's line count sits (2^17 + 1 000 lines,
/// about 8 MB: 63 MB over the binary's own before, 33 MB now, measured with the release binaries of
/// 2b7a573 and its successor). The binary's own
/// memory is measured on an eight-line file.
#[test]
fn row_3_audit_analyze_memory_is_a_small_multiple_of_its_results_file() {
    let dir = scratch("bounds-audit-memory");
    let line = |i: usize| {
        let correct = i % 3 == 0;
        let prob = if correct { 0.75 } else { 0.25 };
        format!("{{\"id\": {i}, \"group\": {}, \"correct\": {correct}, \"prob\": {prob:.4}}}\n", i % 8)
    };
    let small = dir.join("one.jsonl");
    std::fs::write(&small, (0..8).map(line).collect::<String>()).unwrap();
    let big = dir.join("results.jsonl");
    let text: String = (0..(1 << 17) + 1000).map(line).collect();
    std::fs::write(&big, &text).unwrap();
    let audit = |f: &Path, out: &str| {
        let out = dir.join(out);
        let (code, kib) = max_rss_kib(&["audit", "analyze", s(f), "--modulus", "8", "--out", s(&out)]);
        assert_eq!(code, 0, "audit analyze {f:?}");
        assert!(out.join("profile.json").exists());
        kib * 1024
    };
    let base = audit(&small, "a-small");
    let peak = audit(&big, "a-big");
    let file = text.len() as u64;
    assert!(
        peak.saturating_sub(base) <= 5 * file,
        "audit analyze peaked {} MB above its own {} MB on a {} MB file (bound: 5 x the file)",
        peak.saturating_sub(base) >> 20,
        base >> 20,
        file >> 20
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 47's leftover: `Dump::load` checks a safetensors header's declared sizes against the
/// file's length and the limits before reading or widening anything. A hostile header declaring
/// a huge tensor is refused at once (exit 2, one line naming the tensor), in small memory.
#[test]
fn a_hostile_safetensors_header_is_refused_before_anything_is_read() {
    let dir = scratch("hostile-header");
    let write = |name: &str, header: &str, data: usize| {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data));
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let cases = [
        // A tensor of 10^15 elements, offsets claiming 4e15 bytes, 16 bytes of data in the file.
        (
            write(
                "huge.safetensors",
                r#"{"keys":{"dtype":"F32","shape":[1,1000000000,1000000],"data_offsets":[0,4000000000000000]}}"#,
                16,
            ),
            vec!["keys", "data_offsets"],
        ),
        // Offsets that fit the file, a shape that does not (2^40 elements in 16 bytes).
        (
            write(
                "shape.safetensors",
                r#"{"keys":{"dtype":"BF16","shape":[1048576,1048576],"data_offsets":[0,16]}}"#,
                16,
            ),
            vec!["keys", "shape"],
        ),
        // A header length beyond the file.
        (write("len.safetensors", "", 0).with_extension("safetensors"), vec!["header length"]),
    ];
    // The third file: an 8-byte length of 2^40 and nothing after it.
    std::fs::write(&cases[2].0, (1u64 << 40).to_le_bytes()).unwrap();
    for (path, needles) in &cases {
        let started = Instant::now();
        refused(&["kernel", "validate", s(path)], needles);
        assert!(started.elapsed().as_secs_f64() < 10.0, "{path:?}: slow refusal");
        let (code, kib) = max_rss_kib(&["kernel", "validate", s(path)]);
        assert_eq!(code, 2);
        assert!(kib < 200 * 1024, "{path:?}: {kib} KiB to refuse a header");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
