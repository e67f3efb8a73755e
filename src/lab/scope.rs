//! [`Scope`]: which phase families a lab step draws (`theory/phase-lab.md` §9.2) and, for an
//! evaluation, the stem of its files.

use crate::analysis::protocol::{Depths, Protocol};
use crate::{Error, Result};
use std::path::Path;

/// The families of one lab step: every depth (the v1 and v2 runs), the scored families at or
/// beyond the run's depth floor (v3), or the near-query families in front of an arm's own
/// floor (v3's near-query measurement, evaluation only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every depth: [`crate::analysis::protocol::generate`]'s families; the result records no
    /// depth band, so v1 and v2 files stay byte-identical.
    All,
    /// The scored families, depth at least the run floor `D` ([`Depths::beyond`]).
    Beyond(usize),
    /// The near-query families, depth below the arm's own floor ([`Depths::before`]); written
    /// as `near-<protocol>.*`, never scored.
    Near(usize),
}

/// The near-query families per residue group and protocol (§9.2's `NEAR_QUERY_PER_GROUP`).
pub const NEAR_QUERY_PER_GROUP: usize = 24;

impl Scope {
    /// The depths kept.
    pub fn depths(self) -> Depths {
        match self {
            Scope::All => Depths::ALL,
            Scope::Beyond(d) => Depths::beyond(d),
            Scope::Near(d) => Depths::before(d),
        }
    }

    /// The band a result file records: `None` for [`Scope::All`].
    pub fn recorded(self) -> Option<Depths> {
        (self != Scope::All).then(|| self.depths())
    }

    /// The stem of an evaluation's files: `eval-<protocol>`, or `near-<protocol>` for the
    /// near-query families.
    pub fn eval_stem(self, protocol: Protocol) -> String {
        match self {
            Scope::Near(_) => format!("near-{}", protocol.name()),
            _ => format!("eval-{}", protocol.name()),
        }
    }

    /// Refuses the near-query scope for a step that only runs on scored families (knockouts,
    /// cycling), naming the step.
    pub fn scored_only(self, step: &str) -> Result<Self> {
        match self {
            Scope::Near(_) => Err(Error::invalid(
                "scope",
                format!(
                    "{step} runs on the scored families only; the near-query region is evaluated, never knocked out"
                ),
            )),
            s => Ok(s),
        }
    }

    /// The scope a command line asks for on the run in `run`: every depth (`beyond` none and
    /// not `near`), the families at depth `beyond` or deeper, which must not lie in front of
    /// the run's own depth floor (§9.2: shallower prompts reach the query through tokens no
    /// closed entry holds), or the near-query families in front of that floor (`near`).
    pub fn from_args(run: &Path, beyond: Option<usize>, near: bool) -> Result<Self> {
        if beyond.is_none() && !near {
            return Ok(Scope::All);
        }
        super::cache::check_run(run)?;
        let config = crate::model::RunConfig::from_file(&run.join(crate::run_dir::CONFIG_FILE))?;
        let floor = crate::model::floor::depth_floor(&config.model, &config.task)?.depth;
        match (beyond, near) {
            (Some(_), true) => Err(Error::invalid("--near", "goes with no --beyond: the near-query families lie in front of the floor")),
            (Some(d), false) if d < floor => Err(Error::invalid(
                "--beyond",
                format!(
                    "{d} is in front of this run's depth floor {floor} ({}, theory/phase-lab.md §9.2); allowed {floor} or more",
                    config.model.preset
                ),
            )),
            (Some(d), false) => Ok(Scope::Beyond(d)),
            _ => Ok(Scope::Near(floor)),
        }
    }

    /// A near-query scope with no depth in front of the floor (full attention's floor is 0)
    /// has no families: the reason, or `None` where there are some.
    pub fn empty_reason(self) -> Option<String> {
        match self {
            Scope::Near(0) => Some("depth floor 0 (full attention): no depth lies in front of it".into()),
            _ => None,
        }
    }
}
