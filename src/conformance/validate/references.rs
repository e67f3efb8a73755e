//! The f64 references of a dump's run, and whether the dump carries gates.

use crate::conformance::dump::{Dump, Run};
use crate::kernel::reference;
use crate::kernel::Compressed;
use crate::stop::Stop;
use crate::Result;
use ndarray::Axis;

/// Per-sequence f64 reference of a run, without the gate weights when the dump has none to
/// compare (`[n, W, c]` per sequence: `W` times the entries, most of the memory otherwise).
pub(super) fn references(d: &Dump, run: &Run, stop: &Stop) -> Result<Vec<Compressed<f64>>> {
    (0..run.batch())
        .map(|b| {
            stop.check("kernel validate (references)")?;
            let mut r = reference::compress(&d.spec, d.dims, &d.params, run.input.index_axis(Axis(0), b))?;
            if !has_gates(d) {
                drop_gates(&mut r);
            }
            Ok(r)
        })
        .collect()
}

/// Whether the dump's main run carries gate weights.
pub(super) fn has_gates(d: &Dump) -> bool {
    d.main.gate_k.is_some() || d.main.gate_v.is_some()
}

/// Frees the gate weights of a reference nothing compares them with.
pub(super) fn drop_gates(c: &mut Compressed<f64>) {
    c.gate_k = ndarray::Array3::zeros((0, 0, 0));
    c.gate_v = ndarray::Array3::zeros((0, 0, 0));
}
