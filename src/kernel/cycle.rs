//! Gate cycling (the paper's Appendix H; `theory/gate-cycling.md`): a head's per-offset
//! parameters moved cyclically across the window's offsets by `k`, so that the head computes at
//! offset `i + k` what it computed at offset `i`.
//!
//! The map, in its one place: every piece indexed by offset moves, `P'[i] = P[(i - k) mod W]`.
//! The biases `b` are always per offset; the content weights `Z` and the projections `C` are per
//! offset only with `per_offset` groups (`G = W`). With `shared` groups (`G = 1`) they are the
//! same at every offset, so moving `b` alone is the whole map. A group map (DeepSeek-V4's CSA:
//! `prev` and `cur`) does not commute with a cycle, and is refused.

use super::params::{GateParams, KernelParams};
use super::spec::{GateKind, KernelSpec, ParamGroups};
use crate::{Error, Result};
use ndarray::{Array2, Array3, Axis};

/// Whether the pieces of `spec` indexed by group (`Z`, `C`) move under a cycle: `true` with
/// per-offset groups, `false` with one shared group; an error naming `groups` for a group map,
/// and naming `gate` for uniform gates (no gate parameters: nothing to cycle).
pub fn groups_move(spec: &KernelSpec) -> Result<bool> {
    if spec.gate == GateKind::Uniform {
        return Err(Error::invalid("gate", "uniform gates have no parameters to cycle"));
    }
    match &spec.groups {
        ParamGroups::PerOffset => Ok(true),
        ParamGroups::Shared => Ok(false),
        ParamGroups::Map(_) => Err(Error::invalid(
            "groups",
            "a group map (e.g. dsv4-csa's prev/cur) does not commute with a cycle of offsets; cycling needs per_offset or shared groups",
        )),
    }
}

/// The offset whose parameters slot `i` takes under a cycle by `k` in a window of `w`:
/// `(i - k) mod w` (`k` may exceed `w`; `k = 0` and `k = w` are the identity).
pub fn source_offset(i: usize, k: usize, w: usize) -> usize {
    (i + w - k % w) % w
}

/// The rows of `a` (leading axis: offsets, `w` of them) cycled by `k`.
fn cycle_rows3(a: &Array3<f64>, k: usize) -> Array3<f64> {
    let w = a.len_of(Axis(0));
    let order: Vec<usize> = (0..w).map(|i| source_offset(i, k, w)).collect();
    a.select(Axis(0), &order)
}

fn cycle_rows2(a: &Array2<f64>, k: usize) -> Array2<f64> {
    let w = a.len_of(Axis(0));
    let order: Vec<usize> = (0..w).map(|i| source_offset(i, k, w)).collect();
    a.select(Axis(0), &order)
}

/// One head's parameters cycled by `k` (the reference layout of [`KernelParams`]); errors as
/// [`groups_move`].
pub fn cycle_params(spec: &KernelSpec, p: &KernelParams<f64>, k: usize) -> Result<KernelParams<f64>> {
    let groups = groups_move(spec)?;
    let z = |z: &Array3<f64>| if groups { cycle_rows3(z, k) } else { z.clone() };
    let gate = |g: &GateParams<f64>| GateParams { z: z(&g.z), b: cycle_rows2(&g.b, k), bias: g.bias };
    Ok(KernelParams {
        gate_k: p.gate_k.as_ref().map(gate),
        gate_v: p.gate_v.as_ref().map(gate),
        proj_k: z(&p.proj_k),
        proj_v: p.proj_v.as_ref().map(z),
        gamma: p.gamma.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::{source_offset, KernelSpec};

    #[test]
    fn the_source_offset_is_a_cyclic_shift() {
        assert_eq!((0..8).map(|i| source_offset(i, 3, 8)).collect::<Vec<_>>(), [5, 6, 7, 0, 1, 2, 3, 4]);
        assert_eq!((0..8).map(|i| source_offset(i, 11, 8)).collect::<Vec<_>>(), [5, 6, 7, 0, 1, 2, 3, 4]);
        for k in [0, 8, 16] {
            assert!((0..8).all(|i| source_offset(i, k, 8) == i));
        }
        assert!(super::groups_move(&KernelSpec::preset("dsv4-csa").unwrap()).is_err());
        assert!(super::groups_move(&KernelSpec::preset("w8s4-uniform").unwrap()).is_err());
        assert!(super::groups_move(&KernelSpec::preset("w8s4").unwrap()).unwrap());
    }
}
