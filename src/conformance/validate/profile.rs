//! The two error profiles of a dump: by window (`max |impl - ref64|` per entry) and by phase of
//! the window start (the kernel against references whose windows are displaced by `delta`),
//! and the diagnosis an off-phase best match gives.

use super::report::PhasePoint;
use crate::conformance::dump::Dump;
use crate::conformance::harness::tolerance::max_abs_diff;
use crate::kernel::reference::{entry_from_projected, project, Projected};
use crate::kernel::Compressed;
use crate::stop::Stop;
use crate::Result;
use ndarray::{s, Axis};

/// The profiles and the diagnosis.
pub(super) struct Profiles {
    pub window_errors: Vec<f64>,
    pub phase_profile: Vec<PhasePoint>,
    pub best_delta: i64,
    pub diagnosis: Option<String>,
}

/// Computes the profiles of the main run's first `n` entries; `progress(k)` after the `k`-th
/// sequence; `stop` polled per window ([`crate::Error::Interrupted`] when requested).
///
/// Memory: one sequence at a time, and within it only the projections of the tokens a window
/// from the current one on can reach (its tokens displaced by up to `S - 1` either way): the
/// cache no longer grows with `B * T` (issue 47: 5.7 GB for a 34 MB dump).
pub(super) fn profiles(
    d: &Dump,
    ref64: &[Compressed<f64>],
    n: usize,
    progress: &mut dyn FnMut(usize),
    stop: &Stop,
) -> Result<Profiles> {
    let spec = &d.spec;
    let g = spec.geometry;
    let run = &d.main;
    let (b, t_len) = (run.batch(), run.tokens());
    let mut window_errors = vec![0.0f64; n];
    for (k, r) in ref64.iter().enumerate().take(b) {
        for (j, e) in window_errors.iter_mut().enumerate() {
            let ek = max_abs_diff(&run.keys.slice(s![k, j, ..]), &r.keys.row(j));
            let ev = max_abs_diff(&run.values_or_keys().slice(s![k, j, ..]), &r.values.row(j));
            *e = e.max(ek).max(ev);
        }
    }
    let sw = g.stride() as i64;
    let groups = spec.num_groups();
    let deltas: Vec<i64> = (-(sw - 1)..sw).collect();
    let (mut errors, mut counts) = (vec![0.0f64; deltas.len()], vec![0usize; deltas.len()]);
    for k in 0..b {
        let x = run.input.index_axis(Axis(0), k);
        // Every displaced window reuses its tokens' projections: computed once per (token,
        // group) on first use, a window costs its pooling and post-processing only, so the
        // 2S - 1 displacements of an HCA dump (S = 128) are not 255 full references.
        let mut cache: Vec<Option<Projected<f64>>> = vec![None; t_len * groups];
        let mut freed = 0usize;
        for j in 0..n {
            stop.check("kernel validate (phase profile)")?;
            // Window starts grow with j: tokens below this one are reached by no later window.
            let reach = (g.start(j) - (sw - 1)).clamp(0, t_len as i64) as usize;
            for slot in &mut cache[freed * groups..reach.max(freed) * groups] {
                *slot = None;
            }
            freed = freed.max(reach);
            for (di, &delta) in deltas.iter().enumerate() {
                // Only windows whose every slot is real in both geometries (the spec's and the
                // displaced one): a pad_left window 0, or a window displaced past either end,
                // would compare a different set of slots and swamp the profile.
                let tokens: Option<Vec<usize>> = (0..g.window())
                    .map(|i| {
                        g.token_at(j, i)
                            .map(|t0| t0 as i64 + delta)
                            .filter(|&t| t >= 0 && (t as usize) < t_len)
                            .map(|t| t as usize)
                    })
                    .collect();
                let Some(tokens) = tokens else { continue };
                for (i, &t) in tokens.iter().enumerate() {
                    let at = t * groups + spec.group_of(i);
                    if cache[at].is_none() {
                        cache[at] = Some(project(spec, d.dims, &d.params, spec.group_of(i), x.row(t)));
                    }
                }
                let slots: Vec<Option<&Projected<f64>>> =
                    tokens.iter().enumerate().map(|(i, &t)| cache[t * groups + spec.group_of(i)].as_ref()).collect();
                let (key, value) = entry_from_projected(spec, d.dims, &d.params, j, &slots);
                let e = max_abs_diff(&run.keys.slice(s![k, j, ..]), &key)
                    .max(max_abs_diff(&run.values_or_keys().slice(s![k, j, ..]), &value));
                errors[di] = errors[di].max(e);
                counts[di] += 1;
            }
        }
        progress(k + 1);
    }
    let phase_profile: Vec<PhasePoint> = deltas
        .iter()
        .zip(errors.iter().zip(&counts))
        .map(|(&delta, (&error, &entries))| PhasePoint {
            delta,
            phase: (g.start(0) + delta).rem_euclid(sw) as usize,
            error,
            entries,
        })
        .collect();
    let best = phase_profile
        .iter()
        .filter(|p| p.entries > 0)
        .min_by(|a, b| a.error.total_cmp(&b.error).then(a.delta.abs().cmp(&b.delta.abs())))
        .cloned();
    let at0 = phase_profile.iter().find(|p| p.delta == 0).map(|p| p.error).unwrap_or(0.0);
    let best_delta = best.as_ref().map(|p| p.delta).unwrap_or(0);
    let diagnosis = match &best {
        Some(p) if p.delta != 0 && p.error < 0.1 * at0 => Some(format!(
            "the kernel matches the reference with windows starting {} token{} {} (error {:.3e}, against {:.3e} \
             at the spec's alignment): an indexing bug in the window start",
            p.delta.abs(),
            if p.delta.abs() == 1 { "" } else { "s" },
            if p.delta > 0 { "late" } else { "early" },
            p.error,
            at0
        )),
        _ => None,
    };
    Ok(Profiles { window_errors, phase_profile, best_delta, diagnosis })
}
