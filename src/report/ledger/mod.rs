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
//! | `changes` | every change made after seeing data, with its time ([`CHANGES`]) |
//! | `markdown` | `README.md` |
//! | `near` | a v3 report's near-query accuracy by (depth, phase), reported, never a verdict (§9.2) |
//! | `check` | checks on the rendered `README.md` ([`check_rendered`]) |
//! | `screen` | its first screen: abstract, headline numbers beside the paper's, banner lines, flags, setup and deviations tables, cells cut to fit |
//! | `paper` | the paper's numbers and setup, in one place |
//! | `runs_doc` | `runs/README.md`: every run, file and column of the data |
//! | `publish` | locks, input checks, and the swap that puts a report in place whole |

mod banner;
mod build;
mod changes;
mod check;
mod claims;
mod collect;
mod figures;
mod markdown;
mod near;
mod paper;
mod publish;
mod runs_doc;
mod screen;
mod write;

pub use changes::{changes_for, Change, Touches, CHANGES};
pub use runs_doc::OUTCOME_COLUMNS;

pub use banner::{banner, BannerEntry, Ledger, FAILED_ACCURACY, SUCCESS_ACCURACY};
pub use build::{build_report, build_report_with, ReportOptions, ReportOutcome};
pub use check::{check_rendered, RenderProblem};
pub use claims::{
    claims, ledger_for, power_table, section_of, ArmVerdict, Claim, Interval, LedgerClaim, Measure, PowerRow,
    PowerTable, SeedLine, SeedTest, TestRecord, Verdict, ALPHA, LEDGER, POWER_ROUNDS,
};
pub use collect::{arm_of, arms, collect, verify_provenance, Arm, Collected, RunData};
pub use markdown::{render_ledger, symbol};
pub use near::{near_query_cells, near_query_section, NEAR_QUERY_WORDS};
pub use paper::{paper_baseline, paper_value, PaperKind, PaperValue, PAPER_SETUP, PAPER_VALUES};
pub use publish::OUTPUTS;
pub use screen::{abstract_lines, cell, headline, CELL_LIMIT, FOREST_FIGURE};
