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

/// Gate preferences of every (layer, KV head, branch) of a compressed `model` over the windows
/// of `samples` (empty for `full`; the value branch only when it has a gate of its own).
pub fn gate_stats(model: &Decoder, samples: &[Sample]) -> Result<Vec<GateStats>> {
    if model.config().is_full() || samples.is_empty() {
        return Ok(Vec::new());
    }
    let device = Device::Cpu;
    let t = samples[0].tokens.len();
    let flat: Vec<u32> = samples.iter().flat_map(|s| s.tokens.iter().copied()).collect();
    let toks = Tensor::from_vec(flat, (samples.len(), t), &device)?;
    let fwd = model.forward_probe(&toks, &Probe { capture: true, replace: None })?;
    let spec = model.spec();
    let g = &spec.geometry;
    let full_windows: Vec<usize> = (0..g.num_windows(t)).filter(|&j| g.valid_slots(j) == g.window()).collect();
    let mut out = Vec::new();
    for (l, cap) in fwd.captures.iter().enumerate() {
        let mut branches = vec![(Branch::Key, cap.gate_k.as_ref())];
        if spec.has_value_gate() {
            branches.push((Branch::Value, cap.gate_v.as_ref()));
        }
        for (branch, gate) in branches {
            let Some(gate) = gate else { continue };
            // [B, H, n, W, c] -> per head: windows x channels x W
            let (b, h, n, w, c) = gate.dims5()?;
            let data: Vec<f64> = gate.to_dtype(candle_core::DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
            for head in 0..h {
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
                out.push(GateStats {
                    layer: l,
                    head,
                    branch,
                    static_concentration: s,
                    input_concentration: i,
                    profile,
                    windows: wins.len(),
                });
            }
        }
    }
    Ok(out)
}

/// The gate preferences at one training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateSnapshot {
    /// Steps completed at the snapshot.
    pub step: usize,
    /// Every gate.
    pub gates: Vec<GateStats>,
}
