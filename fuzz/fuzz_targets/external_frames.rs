//! Fuzz target: the `kernel check --external` frame reader and reply decoder must return an
//! error, never panic or allocate what a length field announces, on any bytes a process writes
//! to its stdout.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phasekv::conformance::harness::external::{decode_reply, read_frame};

fuzz_target!(|data: &[u8]| {
    let mut r = std::io::Cursor::new(data);
    for id in 1..=8u64 {
        match read_frame(&mut r) {
            Ok(Some(buf)) => {
                let _ = decode_reply(&buf, id);
            }
            _ => break,
        }
    }
});
