//! The progress display of `phasekv reproduce`: one bar (or timed line off a terminal) per
//! stage, training steps and evaluations included.

use crate::cli::progress::Progress as Bar;
use phasekv::model::train::Observer;
use phasekv::model::{EvalReport, StepReport};
use phasekv::reproduce::Progress;
use std::ops::ControlFlow;

pub(crate) struct Bars {
    pub(crate) bar: Option<Bar>,
    pub(crate) stage: String,
}

impl Bars {
    fn bar(&mut self, stage: &str, total: usize) -> &Bar {
        if self.stage != stage || self.bar.is_none() {
            if let Some(b) = self.bar.take() {
                b.finish();
            }
            self.stage = stage.to_string();
        }
        self.bar.get_or_insert_with(|| Bar::new(total as u64, stage))
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
        let line = format!("  eval step {:>5}: exact match {:.1} %", e.step, 100.0 * e.accuracy);
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Progress for Bars {
    fn message(&mut self, msg: &str) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
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
