//! Fuzz target: the dump loader must return an error, never panic, on any bytes (safetensors
//! and .npy parsers, metadata, shapes, contradictions), and validation of whatever loads must
//! not panic either.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = phasekv::conformance::dump::Dump::from_safetensors_bytes(Path::new("fuzz.safetensors"), data, None) {
        // Keep validation cheap: only small dumps.
        if d.main.input.len() <= 4096 && d.spec.geometry.window() <= 64 {
            let _ = phasekv::conformance::validate::validate(&d);
        }
    }
    let _ = phasekv::conformance::dump::parse_npy("fuzz", data);
});
