//! Fuzz target: the `kernel check --external` frame reader, reply decoder and output check must
//! return an error, never panic or allocate what a length field announces, on any bytes a
//! process writes to its stdout. A decoded reply's tensors go through the same check of shapes
//! against the geometry (preset w4s2) that a compress reply gets, for an input shape taken from
//! the first bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phasekv::conformance::harness::external::{decode_reply, read_frame, reply_outputs};
use phasekv::kernel::KernelSpec;

fuzz_target!(|data: &[u8]| {
    let spec = KernelSpec::preset("w4s2").expect("a shipped preset");
    let shape = |i: usize, m: u8| data.get(i).map_or(1, |&b| (b % m) as usize);
    let x = ndarray::Array3::<f64>::zeros((1 + shape(0, 3), shape(1, 16), 1 + shape(2, 4)));
    let d_head = 1 + shape(3, 8);
    let mut r = std::io::Cursor::new(data);
    for id in 1..=8u64 {
        match read_frame(&mut r) {
            Ok(Some(buf)) => {
                if let Ok((_, tensors)) = decode_reply(&buf, id) {
                    let _ = reply_outputs(&spec, d_head, &x, tensors);
                }
            }
            _ => break,
        }
    }
});
