//! Gate preferences (`theory/phase-lab.md` §5).
//!
//! A compressed layer's gate gives, for window `j` and gate channel `c`, a distribution
//! `a_{j,c}` over the `W` offsets. With `H` the Shannon entropy (natural log) and `exp(H)` the
//! effective number of offsets:
//!
//! - **static concentration** `exp(H(E_j[a_{j,c}]))`, averaged over channels `c`: how
//!   concentrated the *average* gate is (1 = always the same offset, `W` = uniform on average);
//! - **input-dependent concentration** `E_{j,c}[exp(H(a_{j,c}))]`: how concentrated each gate
//!   is on its own input.
//!
//! "Concentration" here is always an effective number of offsets: *lower* means more
//! concentrated. The theory's measure of a gate block (`crate::theory::oracle::Structure`) is
//! its largest probability, named `min_peak` there (higher = more concentrated).
//!
//! A gate with small static concentration attends to fixed offsets whatever the input, the
//! regime of Theorem 2. Only windows without empty slots count; expectations run over the
//! windows of every given sequence. Gates without parameters (`-uniform`) give `W` for both.

use crate::model::decoder::Probe;
use crate::model::Decoder;
use crate::stop::Stop;
use crate::task::Sample;
use crate::Result;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

/// Shannon entropy (natural log) of a distribution; zero entries contribute nothing.
pub fn entropy(a: &[f64]) -> f64 {
    a.iter().filter(|&&p| p > 0.0).map(|&p| -p * p.ln()).sum()
}

/// The effective number of offsets `exp(H(a))`: 1 for one-hot, `W` for uniform over `W`.
pub fn effective_offsets(a: &[f64]) -> f64 {
    entropy(a).exp()
}

/// Which branch a gate weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Branch {
    /// The key gate.
    Key,
    /// The value gate.
    Value,
}

/// One gate's preferences.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateStats {
    /// Layer.
    pub layer: usize,
    /// KV head.
    pub head: usize,
    /// Branch.
    pub branch: Branch,
    /// `exp(H(E[a]))`, averaged over channels.
    pub static_concentration: f64,
    /// `E[exp(H(a))]`.
    pub input_concentration: f64,
    /// The average gate over offsets `0..W` (averaged over windows and channels).
    pub profile: Vec<f64>,
    /// Windows averaged over.
    pub windows: usize,
    /// What the head reads from each offset (E7's instrument); `None` in results written
    /// before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<Reads>,
}

/// What a head reads from each window offset: per window `j` and channel `e`, the share
/// `rho_{j,e}(i) = a_{j,i,c(e)} |v_{j,i,e}| / sum_i' a_{j,i',c(e)} |v_{j,i',e}|` of offset `i` in
/// the pooled entry, where `a` is the gate (channel `c(e) = e` for vector gates, the one channel
/// otherwise) and `v_{j,i} = C_{g(i)} h_{t(j,i)}` the projected key or value of the slot. Unlike
/// the gate alone it counts an offset whose projection is near zero as not read
/// (`theory/phase-lab.md` §7.5, E7). The same summaries as the gate's ([`concentrations`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reads {
    /// `exp(H(E_j[rho_{j,e}]))`, averaged over channels: the static effective number of read
    /// offsets.
    pub static_offsets: f64,
    /// `E_{j,e}[exp(H(rho_{j,e}))]`.
    pub input_offsets: f64,
    /// The average share of each offset `0..W` (over windows and channels).
    pub profile: Vec<f64>,
}

/// Static and input-dependent concentration of gate weights `gates: [n_windows][channels][W]`.
pub fn concentrations(gates: &[Vec<Vec<f64>>]) -> (f64, f64, Vec<f64>) {
    let nw = gates.len();
    let nc = gates.first().map(|g| g.len()).unwrap_or(0);
    let w = gates.first().and_then(|g| g.first()).map(|a| a.len()).unwrap_or(0);
    if nw == 0 || nc == 0 || w == 0 {
        return (f64::NAN, f64::NAN, Vec::new());
    }
    let mut input = 0.0;
    let mut mean = vec![vec![0.0; w]; nc];
    for win in gates {
        for (c, a) in win.iter().enumerate() {
            input += effective_offsets(a);
            for (m, x) in mean[c].iter_mut().zip(a) {
                *m += x / nw as f64;
            }
        }
    }
    let static_c = mean.iter().map(|a| effective_offsets(a)).sum::<f64>() / nc as f64;
    let profile = (0..w).map(|i| mean.iter().map(|a| a[i]).sum::<f64>() / nc as f64).collect();
    (static_c, input / (nw * nc) as f64, profile)
}

/// Sequences per forward pass of [`gate_stats`]: `stop` is polled between such batches, and
/// only the gates and inputs of the batches are kept, not every capture of all sequences.
pub const GATE_BATCH: usize = 8;

/// What [`gate_stats`] reads of one layer over every sequence: the gates and the compressor's
/// input of [`crate::model::decoder::LayerCapture`], the batches concatenated in order.
struct Gathered {
    gate_k: Option<Tensor>,
    gate_v: Option<Tensor>,
    input: Option<Tensor>,
}

/// The gates and inputs of every layer over `samples`, forwarded `batch` sequences at a time
/// (each sequence's forward pass is its own, so the batches change no number); `stop` polled
/// before each batch.
fn gather(model: &Decoder, samples: &[Sample], batch: usize, stop: &Stop) -> Result<Vec<Gathered>> {
    let t = samples[0].tokens.len();
    let mut parts: Vec<[Vec<Tensor>; 3]> = Vec::new();
    for chunk in samples.chunks(batch.max(1)) {
        stop.check("gates")?;
        let flat: Vec<u32> = chunk.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let toks = Tensor::from_vec(flat, (chunk.len(), t), &Device::Cpu)?;
        let fwd = model.forward_probe(&toks, &Probe { capture: true, ..Probe::default() })?;
        parts.resize_with(fwd.captures.len(), Default::default);
        for (part, cap) in parts.iter_mut().zip(fwd.captures) {
            for (into, x) in part.iter_mut().zip([cap.gate_k, cap.gate_v, cap.input]) {
                into.extend(x);
            }
        }
    }
    let cat =
        |v: &[Tensor]| -> Result<Option<Tensor>> { Ok(if v.is_empty() { None } else { Some(Tensor::cat(v, 0)?) }) };
    parts.iter().map(|[k, v, x]| Ok(Gathered { gate_k: cat(k)?, gate_v: cat(v)?, input: cat(x)? })).collect()
}

/// Gate preferences of every (layer, KV head, branch) of a compressed `model` over the windows
/// of `samples` (empty for `full`; the value branch only when it has a gate of its own),
/// forwarded [`GATE_BATCH`] sequences at a time with `stop` polled between batches.
pub fn gate_stats(model: &Decoder, samples: &[Sample], stop: &Stop) -> Result<Vec<GateStats>> {
    gate_stats_batched(model, samples, GATE_BATCH, stop)
}

/// [`gate_stats`] with `batch` sequences per forward pass (the batch size changes no number:
/// `tests/phase_lab.rs` checks 1 against all at once).
pub fn gate_stats_batched(model: &Decoder, samples: &[Sample], batch: usize, stop: &Stop) -> Result<Vec<GateStats>> {
    if model.config().is_full() || samples.is_empty() {
        return Ok(Vec::new());
    }
    let t = samples[0].tokens.len();
    let captures = gather(model, samples, batch, stop)?;
    let spec = model.spec();
    let mut out = Vec::new();
    for (l, cap) in captures.iter().enumerate() {
        let mut branches = vec![(Branch::Key, cap.gate_k.as_ref())];
        if spec.layer(l).has_value_gate() {
            branches.push((Branch::Value, cap.gate_v.as_ref()));
        }
        for (branch, gate) in branches {
            let Some(gate) = gate else { continue };
            // [B, H, n, W, c] -> per head: windows x channels x W
            let (b, h, n, w, c) = gate.dims5()?;
            let data: Vec<f64> = gate.to_dtype(candle_core::DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
            for head in 0..h {
                // Each head on its own grid (staggered presets): its full windows.
                let g = &model.head_spec(l, head).geometry;
                let full_windows: Vec<usize> =
                    (0..g.num_windows(t)).filter(|&j| g.valid_slots(j) == g.window()).collect();
                let mut wins = Vec::with_capacity(b * full_windows.len());
                for bb in 0..b {
                    for &j in full_windows.iter().filter(|&&j| j < n) {
                        let base = (((bb * h + head) * n + j) * w) * c;
                        let chans: Vec<Vec<f64>> =
                            (0..c).map(|ch| (0..w).map(|i| data[base + i * c + ch]).collect()).collect();
                        wins.push(chans);
                    }
                }
                let (s, i, profile) = concentrations(&wins);
                let reads = match (&cap.input, model.compressor(l)) {
                    (Some(x), Some(params)) => {
                        let proj = match (branch, &params.proj_v) {
                            (Branch::Value, Some(pv)) => pv,
                            _ => &params.proj_k,
                        };
                        let sets = ReadSets { x, proj, gate: &data, dims: (b, h, n, w, c), head, layer: l };
                        Some(reads_of(model, &sets, &full_windows)?)
                    }
                    _ => None,
                };
                out.push(GateStats {
                    layer: l,
                    head,
                    branch,
                    static_concentration: s,
                    input_concentration: i,
                    profile,
                    windows: wins.len(),
                    reads,
                });
            }
        }
    }
    Ok(out)
}

/// The inputs of [`reads_of`] for one head and branch.
struct ReadSets<'a> {
    /// Compressor input `[B, T, d]`.
    x: &'a Tensor,
    /// Projection `[G, d, H*d_h]`.
    proj: &'a Tensor,
    /// Gate weights `[B, H, n, W, c]`, flattened.
    gate: &'a [f64],
    /// `(B, H, n, W, c)`.
    dims: (usize, usize, usize, usize, usize),
    head: usize,
    /// The layer (with `head`: whose grid the windows are on).
    layer: usize,
}

/// [`Reads`] of one head and branch over the full windows of the batch.
fn reads_of(model: &Decoder, r: &ReadSets, full_windows: &[usize]) -> Result<Reads> {
    let (b, h, n, w, c) = r.dims;
    let (_, t, d) = r.x.dims3()?;
    let dh = model.config().d_head;
    let x: Vec<f64> = r.x.to_dtype(candle_core::DType::F64)?.flatten_all()?.to_vec1()?;
    let p: Vec<f64> = r.proj.to_dtype(candle_core::DType::F64)?.flatten_all()?.to_vec1()?;
    let spec = model.head_spec(r.layer, r.head);
    let g = &spec.geometry;
    let mut wins = Vec::with_capacity(b * full_windows.len());
    let mut v = vec![0f64; w * dh];
    for bb in 0..b {
        for &j in full_windows.iter().filter(|&&j| j < n) {
            for i in 0..w {
                let Some(tok) = g.token_at(j, i).filter(|&tok| tok < t) else { continue };
                let (xr, gi) = (&x[(bb * t + tok) * d..(bb * t + tok + 1) * d], spec.group_of(i));
                for (e, ve) in v[i * dh..(i + 1) * dh].iter_mut().enumerate() {
                    let col = r.head * dh + e;
                    *ve = (0..d).map(|k| xr[k] * p[(gi * d + k) * h * dh + col]).sum::<f64>().abs();
                }
            }
            let base = ((bb * h + r.head) * n + j) * w * c;
            let chans: Vec<Vec<f64>> = (0..dh)
                .map(|e| {
                    let ch = if c == dh { e } else { 0 };
                    let raw: Vec<f64> = (0..w).map(|i| r.gate[base + i * c + ch] * v[i * dh + e]).collect();
                    let total: f64 = raw.iter().sum();
                    raw.iter().map(|x| if total > 0.0 { x / total } else { 1.0 / w as f64 }).collect()
                })
                .collect();
            wins.push(chans);
        }
    }
    let (static_offsets, input_offsets, profile) = concentrations(&wins);
    Ok(Reads { static_offsets, input_offsets, profile })
}

/// The gate preferences at one training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateSnapshot {
    /// Steps completed at the snapshot.
    pub step: usize,
    /// Every gate.
    pub gates: Vec<GateStats>,
}

/// E7's per-head reading of a gate trajectory (`theory/phase-lab.md` §7.5): how far the static
/// effective number of read offsets ([`Reads::static_offsets`]) fell from the first snapshot to
/// the last (the larger fall of the head's branches), and the peak read offset of each branch
/// at the last snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadDrift {
    /// Layer.
    pub layer: usize,
    /// KV head.
    pub head: usize,
    /// First minus last static effective read offsets (positive: more concentrated).
    pub drift: f64,
    /// Peak read offset of the key branch at the last snapshot.
    pub key_peak: usize,
    /// Peak read offset of the value branch (`None` without a value gate of its own).
    pub value_peak: Option<usize>,
}

/// [`HeadDrift`] of every (layer, head) whose reads are recorded at the first and last
/// snapshots (empty for runs measured before reads were).
pub fn head_drifts(snapshots: &[GateSnapshot]) -> Vec<HeadDrift> {
    let (Some(first), Some(last)) = (snapshots.first(), snapshots.last()) else { return Vec::new() };
    let find = |s: &GateSnapshot, l: usize, h: usize, b: Branch| {
        s.gates.iter().find(|g| (g.layer, g.head, g.branch) == (l, h, b)).and_then(|g| g.reads.clone())
    };
    let peak = |r: &Reads| r.profile.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |p| p.0);
    let mut out = Vec::new();
    for g in last.gates.iter().filter(|g| g.branch == Branch::Key) {
        let (l, h) = (g.layer, g.head);
        let (Some(k0), Some(k1)) = (find(first, l, h, Branch::Key), find(last, l, h, Branch::Key)) else { continue };
        let value = (find(first, l, h, Branch::Value), find(last, l, h, Branch::Value));
        let mut drift = k0.static_offsets - k1.static_offsets;
        if let (Some(v0), Some(v1)) = &value {
            drift = drift.max(v0.static_offsets - v1.static_offsets);
        }
        out.push(HeadDrift { layer: l, head: h, drift, key_peak: peak(&k1), value_peak: value.1.as_ref().map(peak) });
    }
    out
}
