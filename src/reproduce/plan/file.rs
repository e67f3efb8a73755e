//! The plan file: its arms, sweep, seeds, settings and time estimates as JSON, and the
//! built-in plans.

use crate::analysis::verdict::Rules;
use crate::lab::LabSettings;
use crate::model::RunConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The built-in full plan (`phasekv reproduce`).
pub const FULL_PLAN: &str = include_str!("../../../plans/full.json");
/// The built-in quick plan (`phasekv reproduce --quick`).
pub const QUICK_PLAN: &str = include_str!("../../../plans/quick.json");

/// Seeds of the v3 run's arms whose magnitudes need them (`theory/phase-lab.md` §9.5's
/// `V3_SEEDS_LARGE`): `full`, `w8s8`, the three staggered arms and `w8s4-kv1`.
pub const V3_SEEDS_LARGE: usize = 8;
/// Seeds of every other arm of the v3 run (§9.5's `V3_SEEDS`, the first of the large arms').
pub const V3_SEEDS: usize = 4;

/// At most this many units in one plan (a sweep that expands further is almost surely a typo).
pub const MAX_UNITS: usize = 100_000;

/// Which kind of plan: the two built-in scales, or a plan of one's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Every claim at the scale of the committed report (about an hour on 2 cores).
    Full,
    /// Two models, fewer steps and prompts: a smoke run in a few minutes.
    Quick,
    /// Any other plan (the default of a plan file).
    #[default]
    Custom,
}

/// A model arm given by hand: a preset and config overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    /// The arm's name (its run directories are `runs/<name>-seed<k>`).
    pub name: String,
    /// Kernel preset or spec name (default: the name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// A kernel spec that is no preset ([`crate::model::ModelConfig::spec`]): inline, or in a
    /// plan file the path of a spec file (what `kernel check --spec` reads), relative to the
    /// plan's folder, which [`Plan::from_file`] reads into the plan. The arm's preset, if
    /// given, must be the spec's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<crate::kernel::spec::KernelSpec>,
    /// Config overrides over `run`: keys are dotted paths (`"model.n_kv_head": 1`) or nested
    /// sections (`"model": {"n_kv_head": 1}`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub overrides: Map<String, Value>,
    /// The arm's own training seeds, in place of the plan's `seeds` (`theory/phase-lab.md`
    /// §9.5: 8 seeds for the arms whose magnitudes need them, 4 for the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<u64>>,
}

/// One named axis of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    /// Name, used as `{name}` in the templates and in `require`.
    pub name: String,
    /// Values (numbers or strings).
    pub values: Vec<Value>,
}

/// A sweep: one arm per combination of axis values that satisfies every `require`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The axes, outermost first.
    pub axes: Vec<Axis>,
    /// Conditions `a OP b` (OP one of `<`, `<=`, `==`, `!=`, `>=`, `>`; a and b axis names or
    /// numbers), e.g. `"s <= w"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require: Vec<String>,
    /// Arm name template (default: each axis name followed by its value, joined by `-`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Preset template, e.g. `"w{w}s{s}"`.
    pub preset: String,
    /// Override templates: a string that is exactly `"{axis}"` becomes the axis value (a
    /// number stays a number); other strings have `{axis}` replaced by the value as text.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub overrides: Map<String, Value>,
}

/// Estimated minutes of one unit on one core, used for Slurm time requests where no measured
/// time exists. `model` is for a model with the plan's `run` config; other models scale by
/// steps x batch size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Minutes {
    /// One model (training and analyses).
    pub model: f64,
    /// The theory unit.
    pub theory: f64,
    /// The kernels unit.
    pub kernels: f64,
}

impl Default for Minutes {
    /// The committed full reproduction: 5.8 to 9.0 min a model, theory and kernels under 10 s
    /// (`reports/README.md`, configuration section), rounded up.
    fn default() -> Self {
        Minutes { model: 9.0, theory: 0.5, kernels: 0.5 }
    }
}

fn yes() -> bool {
    true
}
fn default_t2_seeds() -> u64 {
    16
}
fn default_kernel_cases() -> u32 {
    8
}
fn is_true(b: &bool) -> bool {
    *b
}
fn is_default_minutes(m: &Minutes) -> bool {
    m == &Minutes::default()
}

/// Everything a reproduction runs (written to `plan.json` at the top of the output).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Scale name (`custom` for a plan file of one's own).
    #[serde(default)]
    pub scale: Scale,
    /// Kernel presets to train with the base config, one arm each (`full` is the baseline).
    #[serde(default)]
    pub presets: Vec<String>,
    /// Arms with their own preset and overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arms: Vec<Arm>,
    /// A sweep over named axes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Sweep>,
    /// Training seeds of every arm (empty: the one in `run.train.seed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seeds: Vec<u64>,
    /// Base training config of every model (sections and fields left out take defaults).
    #[serde(default)]
    pub run: RunConfig,
    /// Phase-lab settings.
    #[serde(default)]
    pub lab: LabSettings,
    /// Whether the theory unit runs.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub theory: bool,
    /// Whether the kernels unit runs.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub kernels: bool,
    /// Theorem 2 seeds.
    #[serde(default = "default_t2_seeds")]
    pub t2_seeds: u64,
    /// Proptest cases per invariant, preset and implementation.
    #[serde(default = "default_kernel_cases")]
    pub kernel_cases: u32,
    /// Unit time estimates for Slurm time requests (left out where they are the defaults, so
    /// that plans written before them read and print the same).
    #[serde(default, skip_serializing_if = "is_default_minutes")]
    pub minutes: Minutes,
    /// The pre-registration whose rules judge the plan's run in the ledger (`v1` when left
    /// out, as in every plan written before `theory/phase-lab.md` §8; `v2` for the second
    /// pre-registered run).
    #[serde(default, skip_serializing_if = "Rules::is_v1")]
    pub rules: Rules,
    /// Under v3 only: the run floor `D` given explicitly instead of derived from the plan's own
    /// arms, for a plan that must score at another plan's floor (the §9.3 probes score beyond
    /// the v3 run's `D` = 16 with arms whose own floor is 12). Never below the derived floor,
    /// which would score prompts near the query ([`Plan::run_floor`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth_floor: Option<usize>,
    /// Arms cut from the plan before its run because the measured plan did not fit its time
    /// limit (`theory/phase-lab.md` §9.8: from the end of the pre-registered list, never
    /// seeds). Never run; kept so that the ledger says which arms and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

/// Arms cut before the run ([`Plan::cut`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    /// The arms as the pre-registered plan had them, in its order.
    pub arms: Vec<Arm>,
    /// Why, with the measured cost it rests on and where that measurement is recorded.
    pub reason: String,
}
