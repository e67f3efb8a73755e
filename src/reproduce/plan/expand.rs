//! Reading and checking a plan, and expanding it into arms and units (with the fields no arm
//! may override).

use super::file::{Plan, Scale, FULL_PLAN, MAX_UNITS, QUICK_PLAN};
use super::sweep::{check_name, fill, fill_value, set_path, text};
use super::unit::{ModelUnit, Unit};
use crate::model::RunConfig;
use crate::{Error, Result};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

/// Config fields an arm may not set: the plan sets them (the preset or spec from the arm, the
/// seed from `seeds`), and an override would be silently replaced.
const FIXED_FIELDS: [&str; 3] = ["model.preset", "model.spec", "train.seed"];

/// Refuses an override (`path`, dotted, with `value`, possibly a section) that sets one of
/// [`FIXED_FIELDS`], naming it.
fn refuse_fixed(path: &str, value: &Value, field: &str) -> Result<()> {
    if let Value::Object(o) = value {
        return o.iter().try_for_each(|(k, x)| refuse_fixed(&format!("{path}.{k}"), x, field));
    }
    if FIXED_FIELDS.contains(&path) {
        let why = if path == "train.seed" { "the plan's `seeds` set it" } else { "the arm's preset or spec sets it" };
        return Err(Error::invalid(field, format!("'{path}' may not be overridden ({why})")));
    }
    Ok(())
}

impl Plan {
    /// A built-in plan (`Scale::Custom` has none).
    pub fn builtin(scale: Scale) -> Result<Plan> {
        match scale {
            Scale::Full => Plan::from_json(FULL_PLAN, "plans/full.json"),
            Scale::Quick => Plan::from_json(QUICK_PLAN, "plans/quick.json"),
            Scale::Custom => Err(Error::invalid("scale", "custom plans come from a file (--plan FILE)")),
        }
    }

    /// Parses and validates a plan; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Plan> {
        let plan: Plan =
            serde_json::from_str(text).map_err(|e| Error::invalid(format!("plan {origin}"), e.to_string()))?;
        plan.validate()?;
        Ok(plan)
    }

    /// Reads a plan file (JSON; a regular file of at most [`crate::limits::MAX_JSON_BYTES`]).
    pub fn from_file(path: &Path) -> Result<Plan> {
        let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
        if path.extension().is_some_and(|x| x == "toml") {
            return Err(Error::invalid(
                "--plan",
                format!("{} is TOML; plans are JSON (`phasekv reproduce --print-plan` writes one)", path.display()),
            ));
        }
        let origin = path.display().to_string();
        let mut value: Value =
            serde_json::from_str(&text).map_err(|e| Error::invalid(format!("plan {origin}"), e.to_string()))?;
        // An arm's `spec` given as a file is read into the plan, so that the plan a
        // reproduction records holds the spec itself.
        let folder = path.parent().unwrap_or(Path::new("."));
        if let Some(arms) = value.get_mut("arms").and_then(Value::as_array_mut) {
            for (i, arm) in arms.iter_mut().enumerate() {
                let Some(Value::String(file)) = arm.get("spec") else { continue };
                let file = folder.join(file);
                let spec = crate::kernel::spec::KernelSpec::from_file(&file)
                    .map_err(|e| Error::invalid(format!("plan.arms[{i}].spec"), e.to_string()))?;
                arm["spec"] = serde_json::to_value(spec).map_err(|e| Error::invalid("plan.arms", e.to_string()))?;
            }
        }
        let plan: Plan =
            serde_json::from_value(value).map_err(|e| Error::invalid(format!("plan {origin}"), e.to_string()))?;
        plan.validate()?;
        Ok(plan)
    }

    /// Checks every arm, seed and setting against the bounds of the command it feeds, and that
    /// the plan has at least one unit.
    pub fn validate(&self) -> Result<()> {
        // The theory unit runs `theory t2 --seeds t2_seeds` at the default flow.
        let flow = crate::theory::flow::FlowConfig::default();
        crate::theory::limits::check_flow(&flow.params, 0, self.t2_seeds, flow.t_max, flow.dt)
            .map_err(|e| Error::invalid("plan.t2_seeds", e.to_string()))?;
        let cases = crate::limits::MAX_CHECK_CASES;
        if !(1..=cases).contains(&self.kernel_cases) {
            return Err(Error::invalid(
                "plan.kernel_cases",
                format!("{} outside the allowed range 1..={cases} (kernel check --cases)", self.kernel_cases),
            ));
        }
        // The kernels unit checks every shipped preset with kernel_cases cases.
        if self.kernels {
            for spec in crate::kernel::spec::presets::listed_specs()? {
                crate::conformance::harness::checkable_with(&spec, self.kernel_cases, 1)
                    .map_err(|e| Error::invalid("plan.kernel_cases", e.to_string()))?;
            }
        }
        // What `eval`, `analyze knockout` and `analyze gates` accept; the products with each
        // arm's sequence length are checked per arm.
        let lab = &self.lab;
        for (field, v, max) in [
            ("plan.lab.eval_per_group", lab.eval_per_group, crate::limits::MAX_SAMPLES_PER_GROUP),
            ("plan.lab.knockout_per_group", lab.knockout_per_group, crate::limits::MAX_SAMPLES_PER_GROUP),
            ("plan.lab.knockout_reference", lab.knockout_reference, crate::limits::MAX_KNOCKOUT_REFERENCE),
            ("plan.lab.gate_samples", lab.gate_samples, crate::limits::MAX_SAMPLES_PER_GROUP),
        ] {
            crate::limits::check_range(field, v, 1, max)?;
        }
        for (field, v) in
            [("model", self.minutes.model), ("theory", self.minutes.theory), ("kernels", self.minutes.kernels)]
        {
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Err(Error::invalid(format!("plan.minutes.{field}"), format!("must be in (0, 1e6], got {v}")));
            }
        }
        check_seeds("plan.seeds", &self.seeds)?;
        for a in &self.arms {
            if let Some(seeds) = &a.seeds {
                let field = format!("plan.arms.{}.seeds", a.name);
                if seeds.is_empty() {
                    return Err(Error::invalid(
                        field,
                        "is empty; give at least one seed, or leave it out for the plan's",
                    ));
                }
                check_seeds(&field, seeds)?;
            }
        }
        // §9.2: the scored families are drawn by depth, which needs phase families (the query
        // block after the records, where a shift keeps the depth).
        if self.rules.scores_beyond_floor() {
            for (name, c) in self.arms()? {
                if c.task.query_placement != crate::task::QueryPlacement::AfterRecords {
                    return Err(Error::invalid(
                        "plan.rules",
                        format!(
                            "v3 scores families beyond the depth floor, which needs task.query_placement \
                             \"after_records\"; arm '{name}' has {:?}",
                            c.task.query_placement
                        ),
                    ));
                }
            }
        }
        if let Some(cut) = &self.cut {
            if cut.arms.is_empty() || cut.reason.trim().is_empty() {
                return Err(Error::invalid(
                    "plan.cut",
                    "needs the arms cut and a reason (both non-empty), or leave it out",
                ));
            }
            let kept: HashSet<String> = self.arms()?.into_iter().map(|(n, _)| n).collect();
            for (name, _) in self.cut_arms()? {
                if kept.contains(&name) {
                    return Err(Error::invalid("plan.cut.arms", format!("arm '{name}' is both cut and in the plan")));
                }
            }
        }
        self.run_floor()?;
        if self.units()?.is_empty() {
            return Err(Error::invalid(
                "plan",
                "has no units: give presets, arms or a sweep, or leave theory or kernels on",
            ));
        }
        Ok(())
    }

    /// The run floor `D` of `theory/phase-lab.md` §9.2 under rules that score beyond it (v3):
    /// the largest depth floor ([`crate::model::floor::depth_floor`]) of any arm of the plan
    /// (a seed does not move a floor), or the plan's `depth_floor` where it gives one at least
    /// as deep; `None` under v1 and v2, which score every depth. A `depth_floor` under other
    /// rules, or shallower than the derived floor, is an error naming the field.
    pub fn run_floor(&self) -> Result<Option<usize>> {
        if !self.rules.scores_beyond_floor() {
            return match self.depth_floor {
                None => Ok(None),
                Some(d) => Err(Error::invalid(
                    "plan.depth_floor",
                    format!("{d} is given, but only v3 rules score beyond a depth floor (rules: {:?})", self.rules),
                )),
            };
        }
        // The arms cut before the run count too: `D` is the pre-registered plan's (§9.8 cuts
        // arms, never moves the floor the remaining ones are scored beyond).
        let mut floor = 0;
        for (_, c) in self.arms()?.into_iter().chain(self.cut_arms()?) {
            floor = floor.max(crate::model::floor::depth_floor(&c.model, &c.task)?.depth);
        }
        match self.depth_floor {
            Some(d) if d < floor => Err(Error::invalid(
                "plan.depth_floor",
                format!("{d} is below the arms' own floor {floor}; allowed: {floor} or more (or leave it out)"),
            )),
            Some(d) => Ok(Some(d)),
            None => Ok(Some(floor)),
        }
    }

    /// The arms of [`Plan::cut`] as `(name, config)`, expanded as [`Plan::arms`] expands the
    /// plan's own (empty without a cut).
    pub fn cut_arms(&self) -> Result<Vec<(String, RunConfig)>> {
        let Some(cut) = &self.cut else { return Ok(Vec::new()) };
        let only = Plan { presets: Vec::new(), arms: cut.arms.clone(), sweep: None, cut: None, ..self.clone() };
        only.arms().map_err(|e| Error::invalid("plan.cut.arms", e.to_string()))
    }

    /// The seeds every arm trains with unless it names its own.
    pub fn seed_list(&self) -> Vec<u64> {
        if self.seeds.is_empty() {
            vec![self.run.train.seed]
        } else {
            self.seeds.clone()
        }
    }

    /// Every arm as `(name, config)` with its preset and overrides applied (seed not yet):
    /// presets first, then arms, then the sweep.
    pub fn arms(&self) -> Result<Vec<(String, RunConfig)>> {
        let mut out: Vec<(String, RunConfig)> = Vec::new();
        // Names seen so far: a set, so that expansion stays linear in the number of arms.
        let mut names: HashSet<String> = HashSet::new();
        let base = serde_json::to_value(&self.run).map_err(|e| Error::invalid("plan.run", e.to_string()))?;
        let lab = &self.lab;
        let mut add = |name: String,
                       preset: &str,
                       spec: Option<&crate::kernel::spec::KernelSpec>,
                       overrides: &Map<String, Value>,
                       field: &str|
         -> Result<()> {
            check_name(&name, field)?;
            if !names.insert(name.clone()) {
                return Err(Error::invalid(field, format!("arm name '{name}' appears twice")));
            }
            let mut v = base.clone();
            for (k, x) in overrides {
                refuse_fixed(k, x, &format!("{field}.overrides"))?;
                set_path(&mut v, k, x, &format!("{field}.overrides"))?;
            }
            v["model"]["preset"] = Value::String(preset.to_string());
            let mut config: RunConfig =
                serde_json::from_value(v).map_err(|e| Error::invalid(format!("{field}.overrides"), e.to_string()))?;
            if let Some(spec) = spec {
                spec.check_deserialized().map_err(|e| Error::invalid(field, format!("arm '{name}': spec: {e}")))?;
                if preset != spec.name {
                    return Err(Error::invalid(
                        field,
                        format!("arm '{name}': preset {preset:?} is not its spec's name {:?}", spec.name),
                    ));
                }
                config.model.set_kernel(spec.clone());
            }
            crate::model::validate(&config).map_err(|e| Error::invalid(field, format!("arm '{name}': {e}")))?;
            let (groups, t) = (config.task.residue_modulus, config.task.seq_len());
            for (f, per_group) in [
                ("plan.lab.eval_per_group", lab.eval_per_group),
                ("plan.lab.knockout_per_group", lab.knockout_per_group),
            ] {
                crate::lab::check_samples(f, per_group, groups, t)
                    .map_err(|e| Error::invalid(field, format!("arm '{name}': {e}")))?;
            }
            crate::limits::check_product(
                "plan.lab.gate_samples x sequence length",
                crate::limits::product(&[lab.gate_samples, t]),
                crate::limits::MAX_HELD_TOKENS,
            )
            .map_err(|e| Error::invalid(field, format!("arm '{name}': {e}")))?;
            out.push((name, config));
            Ok(())
        };
        for p in &self.presets {
            add(p.clone(), p, None, &Map::new(), "plan.presets")?;
        }
        for a in &self.arms {
            let preset = a.preset.as_deref().or(a.spec.as_ref().map(|s| s.name.as_str())).unwrap_or(&a.name);
            add(a.name.clone(), preset, a.spec.as_ref(), &a.overrides, "plan.arms")?;
        }
        if let Some(s) = &self.sweep {
            for combo in s.combinations()? {
                let name = match &s.name {
                    Some(t) => fill(t, &combo),
                    None => combo.iter().map(|(k, v)| format!("{k}{}", text(v))).collect::<Vec<_>>().join("-"),
                };
                let preset = fill(&s.preset, &combo);
                let overrides: Map<String, Value> =
                    s.overrides.iter().map(|(k, v)| (k.clone(), fill_value(v, &combo))).collect();
                add(name, &preset, None, &overrides, "plan.sweep")?;
            }
        }
        Ok(out)
    }

    /// Every model: each arm with each of its seeds (its own `plan.arms[].seeds`, or the
    /// plan's [`Plan::seed_list`]), arm-major.
    pub fn models(&self) -> Result<Vec<ModelUnit>> {
        let arms = self.arms()?;
        let own: HashMap<&str, &Vec<u64>> =
            self.arms.iter().filter_map(|a| a.seeds.as_ref().map(|s| (a.name.as_str(), s))).collect();
        let plan_seeds = self.seed_list();
        let seeds: Vec<&Vec<u64>> =
            arms.iter().map(|(arm, _)| own.get(arm.as_str()).copied().unwrap_or(&plan_seeds)).collect();
        let total = seeds.iter().fold(0usize, |n, s| n.saturating_add(s.len()));
        if total > MAX_UNITS {
            return Err(Error::invalid(
                "plan",
                format!("expands to more than {MAX_UNITS} models ({} arms, {total} arm-seeds)", arms.len()),
            ));
        }
        let mut out = Vec::new();
        for ((arm, config), seeds) in arms.into_iter().zip(seeds) {
            for &seed in seeds {
                let mut config = config.clone();
                config.train.seed = seed;
                out.push(ModelUnit { arm: arm.clone(), seed, config });
            }
        }
        Ok(out)
    }

    /// Every unit, heaviest first (models, then theory, then kernels).
    pub fn units(&self) -> Result<Vec<Unit>> {
        let mut u: Vec<Unit> = self.models()?.into_iter().map(|m| Unit::Model(Box::new(m))).collect();
        if self.theory {
            u.push(Unit::Theory);
        }
        if self.kernels {
            u.push(Unit::Kernels);
        }
        Ok(u)
    }

    /// The units named by `ids`, in plan order; an unknown id is an error.
    pub fn select(&self, ids: &[String]) -> Result<Vec<Unit>> {
        let units = self.units()?;
        let known: HashSet<String> = units.iter().map(Unit::name).collect();
        for id in ids {
            if !known.contains(id) {
                return Err(Error::invalid(
                    "--unit",
                    format!("no unit '{id}' in the plan (`phasekv reproduce --plan FILE --list-units` lists the ids)"),
                ));
            }
        }
        let ids: HashSet<&String> = ids.iter().collect();
        Ok(units.into_iter().filter(|u| ids.contains(&u.name())).collect())
    }

    /// Estimated seconds of a unit on one core (see [`Minutes`](super::file::Minutes)).
    pub fn estimate_seconds(&self, unit: &Unit) -> f64 {
        60.0 * match unit {
            Unit::Kernels => self.minutes.kernels,
            Unit::Theory => self.minutes.theory,
            Unit::Model(m) => {
                let work = |c: &RunConfig| (c.train.steps * c.train.batch_size.max(1)) as f64;
                self.minutes.model * work(&m.config) / work(&self.run).max(1.0)
            }
        }
    }
}

/// No seed twice in one list.
fn check_seeds(field: &str, seeds: &[u64]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for s in seeds {
        if !seen.insert(*s) {
            return Err(Error::invalid(field, format!("seed {s} appears twice")));
        }
    }
    Ok(())
}
