//! The Python the tests drive: the PyTorch dump script, the Triton kernels and the Hugging Face
//! DeepSeek-V4 adapter (`python/`). Whether `python3` can import each tool's packages is probed
//! once per test process, by one Python process for all of them: importing torch takes seconds,
//! and the suite used to pay it once per test (six probes, about 16 CPU-s; the one takes 3.6).
//!
//! A tool that is missing skips its tests with a loud message, unless its `PHASEKV_REQUIRE_*`
//! variable is `1` (CI sets all of them in `.ci/run`): then the test fails, naming the import
//! that failed, so CI can never pass by skipping.

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
}

impl PyTool {
    const ALL: [PyTool; 3] = [PyTool::Torch, PyTool::Triton, PyTool::Transformers];

    /// The modules the tool's tests import.
    pub fn modules(self) -> &'static [&'static str] {
        match self {
            PyTool::Torch => &["torch", "numpy", "safetensors"],
            PyTool::Triton => &["torch", "safetensors", "triton"],
            PyTool::Transformers => &["torch", "safetensors", "transformers.models.deepseek_v4"],
        }
    }

    /// The variable that turns a skip into a failure.
    pub fn require_var(self) -> &'static str {
        match self {
            PyTool::Torch => "PHASEKV_REQUIRE_TORCH",
            PyTool::Triton => "PHASEKV_REQUIRE_TRITON",
            PyTool::Transformers => "PHASEKV_REQUIRE_TRANSFORMERS",
        }
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
    let why = match &probed()[idx] {
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
