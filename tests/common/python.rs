//! The Python the tests drive: the PyTorch dump script, the Triton kernels and the adapters for
//! the shipped DeepSeek-V4 / V4.1 compressors (Hugging Face, mlx-lm, vLLM, SGLang; `python/`). Whether `python3` can import each tool's packages is probed
//! once per test process, by one Python process for all of them: importing torch takes seconds,
//! and the suite used to pay it once per test (six probes, about 16 CPU-s; the one takes 3.6).
//!
//! vLLM and SGLang are not installed but read from their downloaded wheels (`pip download
//! --no-deps` into `$PHASEKV_WHEELS`, else `target/wheels`; `python/shipped_wheels.py`): for them
//! the wheel file must be there too.
//!
//! A tool that is missing skips its tests with a loud message, unless its `PHASEKV_REQUIRE_*`
//! variable is `1` (CI sets all of them in `.ci/run`): then the test fails, naming the import
//! or wheel that is missing, so CI can never pass by skipping.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The interpreter every Python test runs.
pub const PYTHON: &str = "python3";

/// An optional Python tool, by the packages its tests import.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PyTool {
    /// `python/phasekv_dump.py`: torch, numpy, safetensors.
    Torch,
    /// `python/triton_kernels.py` and the live Triton kernels: torch, safetensors, triton.
    Triton,
    /// `python/hf_deepseek_v4.py`: torch, safetensors, transformers' `deepseek_v4`.
    Transformers,
    /// `python/mlx_deepseek_v41.py`: numpy, safetensors, MLX and mlx-lm's `deepseek_v41` (no torch).
    Mlx,
    /// `python/vllm_deepseek_v4.py`: torch, safetensors, triton and the vLLM 0.33.0 wheel.
    Vllm,
    /// `python/sglang_deepseek_v41.py`: torch, safetensors and the SGLang 0.5.23 wheel.
    Sglang,
}

impl PyTool {
    const ALL: [PyTool; 6] =
        [PyTool::Torch, PyTool::Triton, PyTool::Transformers, PyTool::Mlx, PyTool::Vllm, PyTool::Sglang];

    /// The modules the tool's tests import.
    pub fn modules(self) -> &'static [&'static str] {
        match self {
            PyTool::Torch => &["torch", "numpy", "safetensors"],
            PyTool::Triton => &["torch", "safetensors", "triton"],
            PyTool::Transformers => &["torch", "safetensors", "transformers.models.deepseek_v4"],
            PyTool::Mlx => &["numpy", "safetensors", "mlx.core", "mlx_lm.models.deepseek_v41"],
            PyTool::Vllm => &["torch", "numpy", "safetensors", "triton"],
            PyTool::Sglang => &["torch", "numpy", "safetensors"],
        }
    }

    /// The downloaded wheel the tool reads its package from: (file name prefix), if any.
    pub fn wheel(self) -> Option<&'static str> {
        match self {
            PyTool::Vllm => Some("vllm-0.33.0-"),
            PyTool::Sglang => Some("sglang-0.5.23-"),
            _ => None,
        }
    }

    /// The variable that turns a skip into a failure.
    pub fn require_var(self) -> &'static str {
        match self {
            PyTool::Torch => "PHASEKV_REQUIRE_TORCH",
            PyTool::Triton => "PHASEKV_REQUIRE_TRITON",
            PyTool::Transformers => "PHASEKV_REQUIRE_TRANSFORMERS",
            PyTool::Mlx => "PHASEKV_REQUIRE_MLX",
            PyTool::Vllm => "PHASEKV_REQUIRE_VLLM",
            PyTool::Sglang => "PHASEKV_REQUIRE_SGLANG",
        }
    }
}

/// Where the adapters find downloaded wheels: `$PHASEKV_WHEELS`, else `target/wheels`.
pub fn wheel_dir() -> PathBuf {
    match std::env::var_os("PHASEKV_WHEELS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target").join("wheels"),
    }
}

/// `Ok(())` when `tool` needs no wheel or its wheel is in `wheel_dir()`, else why not.
fn wheel_present(tool: PyTool) -> Result<(), String> {
    let Some(prefix) = tool.wheel() else { return Ok(()) };
    let dir = wheel_dir();
    let found = std::fs::read_dir(&dir).ok().into_iter().flatten().flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with(prefix) && name.ends_with(".whl")
    });
    if found {
        Ok(())
    } else {
        Err(format!("no {prefix}*.whl in {} (pip download --no-deps into it, or set PHASEKV_WHEELS)", dir.display()))
    }
}

/// One line per tool, in `PyTool::ALL` order: `ok`, or `missing <exception>: <message>`.
fn probe_script() -> String {
    let groups: Vec<String> = PyTool::ALL
        .iter()
        .map(|t| format!("[{}]", t.modules().iter().map(|m| format!("'{m}'")).collect::<Vec<_>>().join(", ")))
        .collect();
    let groups = groups.join(", ");
    format!(
        r#"import importlib
for mods in [{groups}]:
    try:
        for m in mods:
            importlib.import_module(m)
        print("ok", flush=True)
    except Exception as e:
        print("missing", type(e).__name__ + ":", " ".join(str(e).split()), flush=True)
"#
    )
}

/// For each tool: `Ok(())` when its modules import, else why not. Probed once per process.
fn probed() -> &'static [Result<(), String>] {
    static PROBE: OnceLock<Vec<Result<(), String>>> = OnceLock::new();
    PROBE.get_or_init(|| {
        let out = Command::new(PYTHON).args(["-c", &probe_script()]).output();
        let lines: Vec<String> = match &out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect(),
            Ok(o) => vec![format!("{PYTHON} exited with {}: {}", o.status, String::from_utf8_lossy(&o.stderr).trim())],
            Err(e) => vec![format!("cannot start {PYTHON}: {e}")],
        };
        (0..PyTool::ALL.len())
            .map(|i| match lines.get(i).map(String::as_str) {
                Some("ok") => Ok(()),
                Some(why) => Err(why.trim_start_matches("missing ").to_owned()),
                None => Err(lines.first().cloned().unwrap_or_else(|| format!("{PYTHON} printed nothing"))),
            })
            .collect()
    })
}

/// `python3` when it imports `tool`'s packages. Otherwise a panic under the tool's
/// `PHASEKV_REQUIRE_*=1`, or `None` with a loud message naming `what` is skipped.
pub fn python_with(tool: PyTool, what: &str) -> Option<&'static str> {
    let idx = PyTool::ALL.iter().position(|&t| t == tool).expect("every tool is listed");
    let why = match probed()[idx].clone().and_then(|()| wheel_present(tool)) {
        Ok(()) => return Some(PYTHON),
        Err(why) => why,
    };
    let modules = tool.modules().join(", ");
    if std::env::var(tool.require_var()).is_ok_and(|v| v == "1") {
        panic!("{}=1 but {PYTHON} cannot import {modules} ({why})", tool.require_var());
    }
    eprintln!("\n!!!!!! SKIPPING {what}: {PYTHON} cannot import {modules} ({why}) !!!!!!\n");
    None
}

/// A fresh scratch folder for one adapter test: `<tmp>/phasekv-<label>-<pid>`.
pub fn adapter_scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `python/<script>` with `--out <out> --validate <phasekv> <extra...>`: (exit code,
/// stdout + stderr). With `no_torch` (mlx-lm's adapter, under its documented install `pip
/// install --no-deps mlx-lm`), `torch`, `huggingface_hub` and `transformers` cannot be imported
/// in that process.
pub fn run_adapter(py: &str, script: &str, out: &std::path::Path, extra: &[&str], no_torch: bool) -> (i32, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python").join(script);
    let mut cmd = Command::new(py);
    if no_torch {
        cmd.args(["-c", "import runpy, sys; sys.modules.update(dict.fromkeys(['torch', 'huggingface_hub', 'transformers'])); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"]);
    }
    let o = cmd
        .arg(&script)
        .arg("--out")
        .arg(out)
        .args(["--validate", env!("CARGO_BIN_EXE_phasekv")])
        .args(extra)
        .output()
        .expect("start python3");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

/// The start of `validate`'s warning that no complete main-run window starts at or after some
/// power of two below the dump's length (`conformance::validate::coverage`).
pub const COVERAGE_WARNING: &str = "no complete main-run window starts at or after token";

/// The start of `validate`'s warning that every entry position lies below YaRN's original
/// context (a wrong YaRN is invisible there).
pub const YARN_WARNING: &str = "lies below YaRN's original context";

/// Runs adapter `script` of `tool` (`--validate`, extra options `extra`) in a scratch folder and
/// asserts it passes against `preset`, naming a cache format that mentions `format`. At the
/// adapter's default length (no `--tokens` in `extra`) it also asserts that validation saw a
/// complete window past token 256 (no coverage warning). Returns its output, or `None` when the
/// tool is missing (skipped, unless required).
pub fn adapter_passes(
    tool: PyTool,
    script: &str,
    label: &str,
    extra: &[&str],
    preset: &str,
    format: &str,
) -> Option<String> {
    let py = python_with(tool, script)?;
    let dir = adapter_scratch(&format!("adapter-{label}"));
    let (code, text) = run_adapter(py, script, &dir.join("d.safetensors"), extra, tool == PyTool::Mlx);
    assert_eq!(code, 0, "{label}:\n{text}");
    assert!(text.contains(&format!("as {preset},")) && text.contains("verdict: PASS"), "{label}:\n{text}");
    assert!(text.contains("cache format: ") && text.contains(format), "{label}: the format checked is named:\n{text}");
    if !extra.contains(&"--tokens") {
        // The adapter's default length reaches past token 256 (`phasekv_npdump.default_tokens`).
        assert!(!text.contains(COVERAGE_WARNING), "{label}: the default dump must reach past token 256:\n{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    Some(text)
}

/// As `adapter_passes`, for a negative control: validation must fail (exit 1, not refused).
pub fn adapter_fails(tool: PyTool, script: &str, label: &str, extra: &[&str]) -> Option<String> {
    let py = python_with(tool, script)?;
    let dir = adapter_scratch(&format!("adapter-{label}"));
    let (code, text) = run_adapter(py, script, &dir.join("d.safetensors"), extra, tool == PyTool::Mlx);
    assert_eq!(code, 1, "{label} must fail:\n{text}");
    assert!(text.contains("verdict: FAIL"), "{label}:\n{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    Some(text)
}
