//! One flow state: the static gates, the optional content term (T-11), and the RK4/Euler step that allocates nothing.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas (T-6g, T-11)

use super::config::FlowConfig;
use super::config::FlowKernel;
use super::config::Integrator;
use crate::theory::fast::FastStatic;
use crate::theory::task::population_loss_grad;
use crate::theory::task::sample_context;
use crate::theory::task::softmax_into;
use crate::theory::task::softmax_pullback;
use crate::theory::task::static_loss_grad;
use crate::theory::task::OracleGates;
use crate::theory::task::StaticWorkspace;
use crate::theory::task::TaskParams;
use crate::Error;
use crate::Result;
use ndarray_rand::rand_distr::{Distribution, StandardNormal};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The fixed context sample of the content term: contexts closed under cyclic relabelling.
#[derive(Debug, Clone)]
struct ContentSample {
    contexts: Vec<Vec<usize>>,
}

impl ContentSample {
    fn new(p: &TaskParams, base: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC0FF_EE00);
        let mut contexts = Vec::with_capacity(base * p.vocab);
        for _ in 0..base {
            let ctx = sample_context(p, &mut rng);
            for shift in 0..p.vocab {
                contexts.push(ctx.iter().map(|&t| (t + shift) % p.vocab).collect());
            }
        }
        ContentSample { contexts }
    }
}

/// State of one gradient-flow run, with every buffer the step needs.
#[derive(Debug, Clone)]
pub struct FlowState {
    cfg: FlowConfig,
    /// `[thetaK (H*S), thetaV (H*S), bK (H*N), bV (H*N)]` (content part only with a content term).
    pub(super) theta: Vec<f64>,
    /// Current time.
    pub t: f64,
    k: [Vec<f64>; 4],
    tmp: Vec<f64>,
    pk: Vec<f64>,
    pv: Vec<f64>,
    gk: Vec<f64>,
    gv: Vec<f64>,
    ws: StaticWorkspace,
    fast: FastStatic,
    kernel: FlowKernel,
    sample: Option<ContentSample>,
}

impl FlowState {
    /// Initial state: `theta ~ N(0, sigma^2)` (content biases `N(0, init_scale^2)`), seeded.
    pub fn new(cfg: &FlowConfig, seed: u64) -> Result<Self> {
        Self::with_kernel(cfg, seed, FlowKernel::Fast)
    }

    /// [`FlowState::new`] with a chosen static-gate kernel.
    pub fn with_kernel(cfg: &FlowConfig, seed: u64, kernel: FlowKernel) -> Result<Self> {
        cfg.validate()?;
        let p = &cfg.params;
        let hs = p.heads * p.stride;
        let n = 2 * hs + if cfg.content.is_some() { 2 * p.heads * p.vocab } else { 0 };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut theta = vec![0.0; n];
        for (i, t) in theta.iter_mut().enumerate() {
            let z: f64 = StandardNormal.sample(&mut rng);
            let scale = if i < 2 * hs { cfg.sigma } else { cfg.content.map_or(0.0, |c| c.init_scale) };
            *t = scale * z;
        }
        let sample = cfg.content.map(|c| ContentSample::new(p, c.base_contexts, seed));
        Ok(FlowState {
            cfg: *cfg,
            theta,
            t: 0.0,
            k: [vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]],
            tmp: vec![0.0; n],
            pk: vec![0.0; hs],
            pv: vec![0.0; hs],
            gk: vec![0.0; hs],
            gv: vec![0.0; hs],
            ws: StaticWorkspace::new(p.heads, p.stride),
            fast: FastStatic::new(p.heads, p.stride),
            kernel,
            sample,
        })
    }

    /// Current logits `[thetaK, thetaV, (bK, bV)]`.
    pub fn theta(&self) -> &[f64] {
        &self.theta
    }

    /// Replace the logits (same length), e.g. to evaluate the gradient at a chosen point.
    pub fn set_theta(&mut self, theta: &[f64]) -> Result<()> {
        if theta.len() != self.theta.len() {
            return Err(Error::shape("flow logits", format!("{}", self.theta.len()), format!("{}", theta.len())));
        }
        self.theta.copy_from_slice(theta);
        Ok(())
    }

    /// Static gates `(pK, pV)`, `H x S` each, from the current logits.
    pub fn gates(&self) -> (Vec<f64>, Vec<f64>) {
        let p = &self.cfg.params;
        let s = p.stride;
        let hs = p.heads * s;
        let mut pk = vec![0.0; hs];
        let mut pv = vec![0.0; hs];
        for h in 0..p.heads {
            softmax_into(&self.theta[h * s..(h + 1) * s], &mut pk[h * s..(h + 1) * s]);
            softmax_into(&self.theta[hs + h * s..hs + (h + 1) * s], &mut pv[h * s..(h + 1) * s]);
        }
        (pk, pv)
    }

    /// Euclidean norm of the content weights (0 without a content term).
    pub fn content_norm(&self) -> f64 {
        let hs = self.cfg.params.heads * self.cfg.params.stride;
        self.theta[2 * hs..].iter().map(|x| x * x).sum::<f64>().sqrt()
    }

    /// Loss and gradient `grad F` with respect to the logits at `theta` into `out`
    /// (static: T-6, T-6g, T-8; with content: T-11).
    pub fn loss_grad_at(&mut self, theta: &[f64], out: &mut [f64]) -> f64 {
        let p = self.cfg.params;
        let s = p.stride;
        let hs = p.heads * s;
        if let Some(sample) = &self.sample {
            content_loss_grad(&p, theta, sample, out)
        } else if self.kernel == FlowKernel::Fast {
            self.fast.eval(&p, &theta[..2 * hs], &mut out[..2 * hs])
        } else {
            for h in 0..p.heads {
                softmax_into(&theta[h * s..(h + 1) * s], &mut self.pk[h * s..(h + 1) * s]);
                softmax_into(&theta[hs + h * s..hs + (h + 1) * s], &mut self.pv[h * s..(h + 1) * s]);
            }
            let f = static_loss_grad(&p, &self.pk, &self.pv, &mut self.ws, Some((&mut self.gk, &mut self.gv)));
            for h in 0..p.heads {
                let r = h * s..(h + 1) * s;
                softmax_pullback(&self.pk[r.clone()], &mut self.gk[r.clone()]);
                softmax_pullback(&self.pv[r.clone()], &mut self.gv[r.clone()]);
            }
            out[..hs].copy_from_slice(&self.gk);
            out[hs..2 * hs].copy_from_slice(&self.gv);
            f
        }
    }

    /// One integrator step of size `dt` (allocation-free for static gates).
    pub fn step(&mut self) {
        let dt = self.cfg.dt;
        let n = self.theta.len();
        let theta = std::mem::take(&mut self.theta);
        let mut k = std::mem::take(&mut self.k);
        let mut tmp = std::mem::take(&mut self.tmp);
        match self.cfg.integrator {
            Integrator::Euler => {
                self.loss_grad_at(&theta, &mut k[0]);
                self.theta = theta;
                for i in 0..n {
                    self.theta[i] -= dt * k[0][i];
                }
            }
            Integrator::Rk4 => {
                let [k1, k2, k3, k4] = &mut k;
                self.loss_grad_at(&theta, k1);
                for i in 0..n {
                    tmp[i] = theta[i] - 0.5 * dt * k1[i];
                }
                self.loss_grad_at(&tmp, k2);
                for i in 0..n {
                    tmp[i] = theta[i] - 0.5 * dt * k2[i];
                }
                self.loss_grad_at(&tmp, k3);
                for i in 0..n {
                    tmp[i] = theta[i] - dt * k3[i];
                }
                self.loss_grad_at(&tmp, k4);
                self.theta = theta;
                for i in 0..n {
                    self.theta[i] -= dt / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
                }
            }
        }
        self.k = k;
        self.tmp = tmp;
        self.t += dt;
    }

    /// Per head: `Some(r_h)` (0-based key offset) when `pK_h(r_h) > threshold` and
    /// `pV_h(r_h + 1) > threshold`, else `None`. Allocation-free.
    pub(super) fn converged_heads(&mut self, out: &mut [Option<usize>]) -> bool {
        let p = self.cfg.params;
        let s = p.stride;
        let hs = p.heads * s;
        let mut all = true;
        for h in 0..p.heads {
            softmax_into(&self.theta[h * s..(h + 1) * s], &mut self.pk[h * s..(h + 1) * s]);
            softmax_into(&self.theta[hs + h * s..hs + (h + 1) * s], &mut self.pv[h * s..(h + 1) * s]);
            let (r, c) = concentration(&self.pk[h * s..(h + 1) * s], &self.pv[h * s..(h + 1) * s]);
            out[h] = (c > self.cfg.threshold).then_some(r);
            all &= out[h].is_some();
        }
        all
    }
}

/// A head's concentration, Theorem 2's convergence criterion as a number: over key offsets
/// `r` (0-based, `0..S-1`), the largest `min(pK(r), pV(r + 1))`, with the offset that attains
/// it (the first on a tie). The head has converged when it exceeds the threshold (`> 0.5`, so
/// at most one `r` can, each gate being a distribution): exactly when `pK(r) > threshold` and
/// `pV(r + 1) > threshold` for some `r`. `pk` and `pv` are one head's gates, length `S >= 2`.
pub fn concentration(pk: &[f64], pv: &[f64]) -> (usize, f64) {
    let mut best = (0, f64::NEG_INFINITY);
    for r in 0..pk.len().saturating_sub(1) {
        let c = pk[r].min(pv[r + 1]);
        if c > best.1 {
            best = (r, c);
        }
    }
    best
}

/// Content-term loss and gradient (T-11): average over the sample of the oracle closed form
/// (T-4, T-5) with per-context gates `pK_{h,l}(r) = softmax_r(thetaK_h(r) + bK_h(x_{l,r}))`.
fn content_loss_grad(p: &TaskParams, theta: &[f64], sample: &ContentSample, out: &mut [f64]) -> f64 {
    let (hh, ll, ss, nn) = (p.heads, p.chunks, p.stride, p.vocab);
    let hs = hh * ss;
    out.iter_mut().for_each(|x| *x = 0.0);
    let mut g = OracleGates::uniform(p);
    let mut logits = vec![0.0; ss];
    let mut total = 0.0;
    for ctx in &sample.contexts {
        for (branch, theta_off, bias_off) in [(0usize, 0usize, 2 * hs), (1, hs, 2 * hs + hh * nn)] {
            for h in 0..hh {
                for l in 0..ll {
                    for r in 0..ss {
                        logits[r] = theta[theta_off + h * ss + r] + theta[bias_off + h * nn + ctx[l * ss + r]];
                    }
                    let i = g.idx(h, l, 0);
                    let dst = if branch == 0 { &mut g.key[i..i + ss] } else { &mut g.value[i..i + ss] };
                    softmax_into(&logits, dst);
                }
            }
        }
        let Ok((f, mut gk, mut gv)) = population_loss_grad(p, &g) else {
            return f64::NAN;
        };
        total += f;
        for h in 0..hh {
            for l in 0..ll {
                let i = g.idx(h, l, 0);
                softmax_pullback(&g.key[i..i + ss], &mut gk[i..i + ss]);
                softmax_pullback(&g.value[i..i + ss], &mut gv[i..i + ss]);
                for r in 0..ss {
                    let tok = ctx[l * ss + r];
                    out[h * ss + r] += gk[i + r];
                    out[hs + h * ss + r] += gv[i + r];
                    out[2 * hs + h * nn + tok] += gk[i + r];
                    out[2 * hs + hh * nn + h * nn + tok] += gv[i + r];
                }
            }
        }
    }
    let m = sample.contexts.len() as f64;
    out.iter_mut().for_each(|x| *x /= m);
    total / m
}
