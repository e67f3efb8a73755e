//! Fuzz target: the plan parser must return an error, never panic, hang or abort on memory, on
//! any bytes: JSON, every field's bounds, sweeps, `require`, overrides, names, expansion.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(plan) = phasekv::reproduce::Plan::from_json(text, "fuzz") {
            let _ = plan.units();
        }
    }
});
