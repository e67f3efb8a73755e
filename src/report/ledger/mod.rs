//! `phasekv report`: the claims ledger and every figure, rebuilt from run data only (never
//! training, never evaluating a model). Reads one or more reproduction outputs (shards merge:
//! each unit's directory is taken from the first output that has it), computes each claim's
//! verdict from the data with the criterion stated beside it, and writes into `out`:
//! `README.md` (ledger, models, figures with captions, configuration and environment),
//! `ledger.json` ([`Ledger`]: the banner and the claims with every number structured, no timings:
//! identical for identical data; the ledger part of `README.md` renders from it alone) and
//! `figures/` (SVG + PNG, each with its data as CSV or JSON beside it).
//!
//! | module | does |
//! |---|---|
//! | `collect` | reads and merges the outputs ([`collect`], [`Collected`]) |
//! | `claims` | one module per claim, registered in [`LEDGER`] ([`LedgerClaim`]) |
//! | `figures` | the figures of the whole report and their data |
//! | `banner` | what a reader must know before any number ([`Ledger::banner`]) |
//! | `markdown` | `README.md` |
//! | `runs_doc` | `runs/README.md`: every run, file and column of the data |

mod banner;
mod claims;
mod collect;
mod figures;
mod markdown;
mod runs_doc;

pub use runs_doc::OUTCOME_COLUMNS;

pub use banner::{banner, BannerEntry, Ledger, FAILED_ACCURACY, SUCCESS_ACCURACY};
pub use claims::{
    claims, power_table, ArmVerdict, Claim, Interval, LedgerClaim, Measure, PowerRow, PowerTable, SeedLine, SeedTest,
    TestRecord, Verdict, ALPHA, LEDGER, POWER_ROUNDS,
};
pub use collect::{arm_of, arms, collect, Arm, Collected, RunData};
pub use markdown::{render_ledger, symbol};

use crate::run_dir::{atomic_write, write_json_atomic};
use crate::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

fn write(out: &Path, rel: &str, text: &str) -> Result<()> {
    let path = out.join(rel);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    atomic_write(&path, text.as_bytes())
}

/// Writes `value` as JSON at `rel` under `out`, creating its directory.
fn write_json(out: &Path, rel: &str, value: &impl Serialize) -> Result<()> {
    let path = out.join(rel);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    write_json_atomic(&path, value)
}

/// Rebuilds the report in `out` from the outputs `from`; returns the claims.
pub fn build_report(from: &[PathBuf], out: &Path) -> Result<Vec<Claim>> {
    let c = collect(from)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    // Theory and kernel data travel with the report.
    if let Some(t) = &c.theory {
        write_json(out, "theory/theory.json", t)?;
    }
    if let Some(k) = &c.kernels {
        write_json(out, "kernels/kernels.json", k)?;
    }
    let mut caps = figures::build_figures(&c, out)?;
    caps.extend(claims::draw_claim_figures(&c, out)?);
    let claims = claims(&c);
    let ledger = Ledger { banner: banner(&c, &claims), claims };
    write_json(out, "ledger.json", &ledger)?;
    write(out, "README.md", &markdown::render(&c, &ledger, &caps)?)?;
    if !c.runs.is_empty() {
        write(out, "runs/README.md", &runs_doc::runs_readme(&c))?;
    }
    Ok(ledger.claims)
}
