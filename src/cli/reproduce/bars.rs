//! The progress display of `phasekv reproduce`: one bar (or timed line off a terminal) per
//! stage, training steps and evaluations included.

use crate::cli::progress::Progress as Bar;
use phasekv::model::train::Observer;
use phasekv::model::{EvalReport, StepReport};
use phasekv::reproduce::Progress;
use std::ops::ControlFlow;

pub(crate) struct Bars {
    bar: Option<Bar>,
    stage: String,
    /// The unit's name when units run side by side: stages and evaluation lines carry it, and
    /// progress is timed lines (two bars on one terminal would overwrite each other).
    unit: Option<String>,
}

impl Bars {
    /// The display of a run whose units go one at a time.
    pub(crate) fn new() -> Self {
        Bars { bar: None, stage: String::new(), unit: None }
    }

    /// The display of one unit among several running at once.
    pub(crate) fn for_unit(unit: &str) -> Self {
        Bars { bar: None, stage: String::new(), unit: Some(unit.to_string()) }
    }

    /// Ends the current stage's display.
    pub(crate) fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }

    fn bar(&mut self, stage: &str, total: usize) -> &Bar {
        if self.stage != stage || self.bar.is_none() {
            if let Some(b) = self.bar.take() {
                b.finish();
            }
            self.stage = stage.to_string();
        }
        let unit = &self.unit;
        self.bar.get_or_insert_with(|| match unit {
            Some(u) => Bar::lines(total as u64, &format!("{u} {stage}")),
            None => Bar::new(total as u64, stage),
        })
    }
}

impl Observer for Bars {
    fn on_start(&mut self, start: usize, total: usize) {
        self.bar("training", total).set_position(start as u64);
    }
    fn on_step(&mut self, r: &StepReport) -> ControlFlow<()> {
        let b = self.bar("training", r.total);
        b.set_position(r.step as u64);
        if crate::cli::signals::interrupted() {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
    fn on_eval(&mut self, e: &EvalReport) {
        let who = self.unit.as_deref().map(|u| format!(" ({u})")).unwrap_or_default();
        let line = format!("  eval step {:>5}{who}: exact match {:.1} %", e.step, 100.0 * e.accuracy);
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Progress for Bars {
    fn message(&mut self, msg: &str) {
        self.finish();
        eprintln!("{msg}");
    }
    fn trainer(&mut self) -> &mut dyn Observer {
        self
    }
    fn stop(&self) -> phasekv::stop::Stop {
        crate::cli::signals::stop()
    }

    fn step(&mut self, stage: &str, done: usize, total: usize) {
        self.bar(stage, total).set_position(done as u64);
    }
}
