//! AdamW with decoupled weight decay and global gradient-norm clipping, with its state exposed
//! so that checkpoints can save and restore it exactly (candle-nn's `AdamW` keeps its moments
//! private, which would make a resumed run differ from an uninterrupted one).

use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use std::collections::HashMap;

/// One parameter with its moments.
#[derive(Debug)]
struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
    decay: bool,
}

/// AdamW over named variables.
#[derive(Debug)]
pub struct AdamW {
    slots: Vec<Slot>,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    step: usize,
}

/// Whether a parameter gets weight decay: matrices and embeddings do; norms, biases and
/// kernel RMSNorm weights (anything of rank < 2 or named like a bias) do not.
fn decays(name: &str, var: &Var) -> bool {
    var.rank() >= 2 && !name.ends_with(".b")
}

impl AdamW {
    /// An optimiser over `vars` (name, variable), moments zero.
    pub fn new(vars: Vec<(String, Var)>, beta1: f64, beta2: f64, weight_decay: f64) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                let z = var.as_tensor().zeros_like()?;
                Ok(Slot { decay: decays(&name, &var), name, m: z.clone(), v: z, var })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AdamW { slots, beta1, beta2, eps: 1e-8, weight_decay, step: 0 })
    }

    /// Optimiser steps taken so far.
    pub fn steps_taken(&self) -> usize {
        self.step
    }

    /// Global L2 norm of the gradients of every parameter (missing gradients count as zero).
    pub fn grad_norm(&self, grads: &GradStore) -> Result<f64> {
        let mut total = 0f64;
        for s in &self.slots {
            if let Some(g) = grads.get(s.var.as_tensor()) {
                total += g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
            }
        }
        Ok(total.sqrt())
    }

    /// Names of parameters that received no gradient (should be empty: a fused candle op on
    /// the path silently stops gradients).
    pub fn missing_grads(&self, grads: &GradStore) -> Vec<String> {
        self.slots.iter().filter(|s| grads.get(s.var.as_tensor()).is_none()).map(|s| s.name.clone()).collect()
    }

    /// One step at learning rate `lr`, gradients scaled by `grad_scale` (clipping).
    pub fn step(&mut self, grads: &GradStore, lr: f64, grad_scale: f64) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let bc1 = 1.0 - self.beta1.powi(t);
        let bc2 = 1.0 - self.beta2.powi(t);
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else {
                continue;
            };
            // Detached: gradients carry the backward graph, and moments built from them would
            // otherwise keep every previous step's graph alive (memory grows without bound).
            let g = g.detach();
            let g = if grad_scale != 1.0 { (g * grad_scale)? } else { g };
            s.m = ((&s.m * self.beta1)? + (&g * (1.0 - self.beta1))?)?.detach();
            s.v = ((&s.v * self.beta2)? + (g.sqr()? * (1.0 - self.beta2))?)?.detach();
            let m_hat = (&s.m / bc1)?;
            let v_hat = (&s.v / bc2)?;
            let upd = (m_hat / (v_hat.sqrt()? + self.eps)?)?;
            let theta = s.var.as_tensor().detach();
            let decayed =
                if s.decay && self.weight_decay > 0.0 { (theta * (1.0 - lr * self.weight_decay))? } else { theta };
            s.var.set(&(decayed - (upd * lr)?)?)?;
        }
        Ok(())
    }

    /// One step at learning rate `lr` with the gradients clipped to global norm `clip` (0 = no
    /// clipping); returns the norm before clipping.
    pub fn clipped_step(&mut self, grads: &GradStore, lr: f64, clip: f64) -> Result<f64> {
        let norm = self.grad_norm(grads)?;
        let scale = if clip > 0.0 && norm > clip { clip / norm } else { 1.0 };
        self.step(grads, lr, scale)?;
        Ok(norm)
    }

    /// The state as named tensors (`adam.m.<name>`, `adam.v.<name>`) plus the step count.
    pub fn state(&self) -> (HashMap<String, Tensor>, usize) {
        let mut map = HashMap::new();
        for s in &self.slots {
            map.insert(format!("adam.m.{}", s.name), s.m.clone());
            map.insert(format!("adam.v.{}", s.name), s.v.clone());
        }
        (map, self.step)
    }

    /// Restores moments and the step count saved by [`AdamW::state`].
    pub fn load_state(&mut self, map: &HashMap<String, Tensor>, step: usize) -> Result<()> {
        for s in &mut self.slots {
            for (key, dst) in [("m", &mut s.m), ("v", &mut s.v)] {
                let k = format!("adam.{key}.{}", s.name);
                let t = map.get(&k).ok_or_else(|| Error::invalid("checkpoint", format!("missing tensor {k}")))?;
                if t.dims() != dst.dims() {
                    return Err(Error::shape(k, format!("{:?}", dst.dims()), format!("{:?}", t.dims())));
                }
                *dst = t.clone();
            }
        }
        self.step = step;
        Ok(())
    }
}
