//! A trained model's weights: the [`Model`] (decoder and parameter store) with safetensors save
//! and load, and the provenance check every analysis starts from ([`verify_run`], [`load_run`]).
//! Checkpoints and snapshots are [`crate::model::checkpoint`]'s.

use super::config::RunConfig;
use super::decoder::{Decoder, MODEL_DTYPE};
use super::params::ParamStore;
use super::record::Metrics;
use crate::run_dir::{atomic_write as write_atomic, CONFIG_FILE, METRICS_FILE};
use crate::{Error, Result};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Extension of the file beside saved weights (a snapshot) that holds their content hash, which
/// [`load_run`] checks.
pub const SNAPSHOT_HASH_EXT: &str = "hash";

/// A model with its parameter store, ready to train or evaluate.
#[derive(Debug)]
pub struct Model {
    /// Parameters.
    pub store: ParamStore,
    /// The decoder.
    pub decoder: Decoder,
}

impl Model {
    /// A freshly initialised model for `config` (parameters drawn from `config.train.seed`).
    pub fn new(config: &RunConfig, device: &Device) -> Result<Self> {
        let store = ParamStore::new(config.train.seed);
        let vb = store.var_builder(MODEL_DTYPE, device);
        let decoder = Decoder::new(&config.model, config.task.vocab_size(), &vb)?;
        Ok(Model { store, decoder })
    }

    /// Parameters as named tensors (`param.<name>`).
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.store.vars().into_iter().map(|(n, v)| (format!("param.{n}"), v.as_tensor().clone())).collect()
    }

    /// Sets every parameter from named tensors (`param.<name>`); all must be present with the
    /// right shapes, and no `param.*` tensor may be left over: a checkpoint of another
    /// architecture (a `w8s4` model's, which holds every tensor of a `full` model plus the
    /// compressor's) is refused rather than silently loaded in part.
    pub fn load_tensors(&self, map: &HashMap<String, Tensor>) -> Result<()> {
        let vars = self.store.vars();
        let mut extra: Vec<&str> = map
            .keys()
            .filter(|k| k.starts_with("param."))
            .filter(|k| !vars.iter().any(|(n, _)| k.strip_prefix("param.") == Some(n.as_str())))
            .map(String::as_str)
            .collect();
        if !extra.is_empty() {
            extra.sort_unstable();
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "{} tensor(s) this model does not have, first {} (a checkpoint of another preset or size?)",
                    extra.len(),
                    extra[0]
                ),
            ));
        }
        for (n, v) in vars {
            let k = format!("param.{n}");
            let t = map.get(&k).ok_or_else(|| Error::invalid("checkpoint", format!("missing tensor {k}")))?;
            if t.dims() != v.dims() {
                return Err(Error::shape(k, format!("{:?}", v.dims()), format!("{:?}", t.dims())));
            }
            v.set(t)?;
        }
        Ok(())
    }

    /// Gate cycling (`theory/gate-cycling.md`, [`crate::kernel::cycle`]): KV head `head` of
    /// layer `layer` gets its per-offset compressor parameters moved by `k` offsets, in place
    /// (the biases always, the content weights and projections with per-offset groups; the
    /// other heads, layers and parameters unchanged). Errors name the field: a layer or head
    /// out of range, `full` (no compressor), a group map or uniform gates.
    pub fn cycle_head(&self, layer: usize, head: usize, k: usize) -> Result<()> {
        let cfg = self.decoder.config();
        crate::limits::check_range("layer", layer, 0, cfg.n_layer.saturating_sub(1))?;
        crate::limits::check_range("head", head, 0, cfg.n_kv_head.saturating_sub(1))?;
        if cfg.is_full() {
            return Err(Error::invalid("preset", "full attention has no compressor to cycle"));
        }
        let spec = self.decoder.spec().layer(layer);
        let groups = crate::kernel::cycle::groups_move(spec)?;
        let w = spec.geometry.window();
        let prefix = format!("layer{layer}.attn.kernel.");
        for (name, var) in self.store.vars() {
            let Some(piece) = name.strip_prefix(&prefix) else { continue };
            let moves = match piece {
                "gate_k.b" | "gate_v.b" => true,
                "gate_k.z" | "gate_v.z" | "proj_k" | "proj_v" => groups,
                _ => false, // gamma: per channel, not per offset
            };
            if !moves {
                continue;
            }
            let dims = var.dims().to_vec();
            let (rows, cols) = (dims[0], dims[dims.len() - 1]);
            if rows != w {
                return Err(Error::shape(name, format!("[{w}, ..]"), format!("{dims:?}")));
            }
            let width = cols / cfg.n_kv_head;
            let inner: usize = dims[1..dims.len() - 1].iter().product();
            let old = var.as_tensor().to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            let mut new = old.clone();
            for i in 0..rows {
                let src = crate::kernel::cycle::source_offset(i, k, w);
                for m in 0..inner {
                    let (to, from) = ((i * inner + m) * cols, (src * inner + m) * cols);
                    for c in head * width..(head + 1) * width {
                        new[to + c] = old[from + c];
                    }
                }
            }
            let t = Tensor::from_vec(new, dims.as_slice(), var.device())?.to_dtype(var.dtype())?;
            var.set(&t)?;
        }
        Ok(())
    }

    /// Saves the parameters to a safetensors file (atomically); returns the file's content
    /// hash.
    pub fn save(&self, path: &Path) -> Result<String> {
        save_tensors(&self.tensors(), path)
    }

    /// Loads parameters saved by [`Model::save`].
    pub fn load(&self, path: &Path) -> Result<()> {
        let bytes = crate::limits::read_file(path, crate::limits::MAX_WEIGHTS_BYTES)?;
        let map = tensors_from_bytes(path, &bytes, &self.decoder_device())?;
        self.load_tensors(&map)
    }

    fn decoder_device(&self) -> Device {
        self.store.vars().first().map(|(_, v)| v.device().clone()).unwrap_or(Device::Cpu)
    }
}

/// A finished run whose provenance checked out: its config, metrics and identity.
#[derive(Clone, Debug)]
pub struct VerifiedRun {
    /// The config from `config.json`.
    pub config: RunConfig,
    /// `metrics.json`.
    pub metrics: Metrics,
    /// `<config hash>/<weights hash>`, the key of cached analyses; `None` for a run from before
    /// hashes were recorded.
    pub identity: Option<String>,
}

pub(super) fn read_json_file<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
    serde_json::from_str(&text)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("not {what}: {e}") })
}

/// Checks that `run` holds a finished run whose files agree: `metrics.json` is readable,
/// `config.json` is the config the run was trained with (its hash, or for older runs its
/// preset, seed and steps, match the metrics), and `model.safetensors` has the hash it was
/// saved with. Every analysis starts here, so an edited config or swapped weights are refused
/// instead of being evaluated under the wrong label.
pub fn verify_run(run: &Path) -> Result<VerifiedRun> {
    let cfg_path = run.join(CONFIG_FILE);
    let text = crate::limits::read_text(&cfg_path, crate::limits::MAX_JSON_BYTES)?;
    let config = RunConfig::from_json(&text)
        .map_err(|e| Error::File { path: cfg_path.clone(), reason: format!("not a run config: {e}") })?;
    config.validate().map_err(|e| Error::File { path: cfg_path.clone(), reason: e.to_string() })?;
    let metrics_path = run.join(METRICS_FILE);
    if !metrics_path.exists() {
        return Err(Error::File {
            path: metrics_path,
            reason: "missing: the run is not finished (rerun `phasekv train` with the same config to resume it)".into(),
        });
    }
    let metrics: Metrics = read_json_file(&metrics_path, "the metrics of a finished run")?;
    let changed = |what: String| Error::File {
        path: cfg_path.clone(),
        reason: format!("{what}: config.json was changed after training; restore it or train a new run"),
    };
    let id = config.identity();
    match &metrics.config_hash {
        Some(h) if *h != id => return Err(changed(format!("hash {id}, trained as {h}"))),
        _ => {}
    }
    // An extended run trained more steps than its recipe; config.json keeps the recipe's.
    let recorded = (&metrics.preset, metrics.seed, metrics.recipe_steps());
    if recorded != (&config.model.preset, config.train.seed, config.train.steps) {
        return Err(changed(format!(
            "preset {} seed {} steps {}, trained as preset {} seed {} steps {}",
            config.model.preset, config.train.seed, config.train.steps, recorded.0, recorded.1, recorded.2
        )));
    }
    let weights = run.join(FINAL_WEIGHTS);
    let identity = match (&metrics.config_hash, &metrics.weights_hash) {
        (Some(c), Some(w)) => {
            let bytes = read_weights(&weights)?;
            let have = crate::limits::content_hash(&bytes);
            if have != *w {
                return Err(Error::File {
                    path: weights,
                    reason: format!(
                        "hash {have} is not the {w} this run saved; the weights were changed after training"
                    ),
                });
            }
            Some(format!("{c}/{w}"))
        }
        _ => None,
    };
    Ok(VerifiedRun { config, metrics, identity })
}

/// File name of a finished run's weights.
pub const FINAL_WEIGHTS: &str = "model.safetensors";

pub(super) fn read_weights(path: &Path) -> Result<Vec<u8>> {
    if !path.exists() {
        return Err(Error::File {
            path: path.to_path_buf(),
            reason: "no trained weights here (is the run finished? rerun `phasekv train` to resume it)".into(),
        });
    }
    crate::limits::read_file(path, crate::limits::MAX_WEIGHTS_BYTES)
}

/// A trained model read back from its run directory after [`verify_run`]: the config from
/// `config.json`, the parameters from `weights` (default: the final `model.safetensors`).
///
/// Other weights (a snapshot) are checked against the hash saved beside them
/// (`step-N.hash`), which runs with recorded hashes must have.
pub fn load_run(run: &Path, weights: Option<&Path>) -> Result<(RunConfig, Model)> {
    let verified = verify_run(run)?;
    let config = verified.config;
    let final_weights = run.join(FINAL_WEIGHTS);
    let path = weights.unwrap_or(&final_weights);
    let bytes = read_weights(path)?;
    if weights.is_some() {
        let sidecar = path.with_extension(SNAPSHOT_HASH_EXT);
        match crate::limits::read_text(&sidecar, 1024) {
            Ok(want) => {
                let have = crate::limits::content_hash(&bytes);
                if have != want.trim() {
                    return Err(Error::File {
                        path: path.to_path_buf(),
                        reason: format!(
                            "hash {have} is not the {} saved with it; the snapshot was changed",
                            want.trim()
                        ),
                    });
                }
            }
            Err(_) if verified.identity.is_none() => {} // a run from before hashes were recorded
            Err(e) => return Err(e),
        }
    }
    let model = Model::new(&config, &Device::Cpu)?;
    model.load_tensors(&tensors_from_bytes(path, &bytes, &Device::Cpu)?)?;
    Ok((config, model))
}

/// Writes named tensors as a safetensors file through [`crate::run_dir::atomic_write`] (a
/// temporary name unique to this writer, then a rename); returns the file's content hash.
pub(super) fn save_tensors(map: &HashMap<String, Tensor>, path: &Path) -> Result<String> {
    let mut sorted: Vec<(&String, &Tensor)> = map.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let bytes = safetensors::tensor::serialize(sorted, None)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("cannot write safetensors: {e}") })?;
    write_atomic(path, &bytes)?;
    Ok(crate::limits::content_hash(&bytes))
}

pub(super) fn tensors_from_bytes(path: &Path, bytes: &[u8], device: &Device) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load_buffer(bytes, device)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("cannot read safetensors: {e}") })
}
