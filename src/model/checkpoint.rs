//! Checkpoints of a training run, read and written in one place: the index
//! (`checkpoint.json`) naming the latest checkpoint and the one before it, the checkpoint files
//! (parameters and optimiser state, with their content hashes), retention (the latest two are
//! kept), resume from the latest intact one, and the parameter snapshots kept on the checkpoint
//! cadence for analyses across training (gate trajectories, `theory/phase-lab.md` §7.5).

use super::optim::AdamW;
use super::record::EvalReport;
use super::weights::{read_json_file, save_tensors, tensors_from_bytes, Model, SNAPSHOT_HASH_EXT};
use crate::run_dir::{atomic_write, write_json_atomic, RunDir};
use crate::{Error, Result};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// File naming the latest checkpoint.
pub const CHECKPOINT_INDEX: &str = "checkpoint.json";
/// Directory (in a run directory) of the parameter snapshots kept at every checkpoint step,
/// for analyses across training (gate trajectories); the optimiser state is not kept there.
pub const SNAPSHOT_DIR: &str = "snapshots";

/// File name of the parameter snapshot at `step` (inside [`SNAPSHOT_DIR`]).
pub fn snapshot_name(step: usize) -> String {
    format!("step-{step:07}.safetensors")
}

/// Steps and paths of the parameter snapshots of the run in `run`, in step order.
pub fn list_snapshots(run: &Path) -> Result<Vec<(usize, std::path::PathBuf)>> {
    let dir = run.join(SNAPSHOT_DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(step) = name.strip_prefix("step-").and_then(|n| n.strip_suffix(".safetensors")) {
            if let Ok(step) = step.parse::<usize>() {
                out.push((step, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The latest checkpoint, as recorded in `checkpoint.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointIndex {
    /// Steps completed at the checkpoint.
    pub step: usize,
    /// The safetensors file (in the run directory).
    pub file: String,
    /// Training seconds so far.
    pub elapsed_s: f64,
    /// Evaluations so far.
    pub evals: Vec<EvalReport>,
    /// Content hash of the checkpoint file; a resume refuses a file that does not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// Training loss of the first step, the reference of the divergence check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_loss: Option<f64>,
    /// The checkpoint before this one (kept on disk), to resume from if this one is damaged
    /// or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<CheckpointIndex>>,
}

impl CheckpointIndex {
    /// The checkpoint file's bytes when it exists and matches its checksum; `Ok(None)` when
    /// the file is missing, an error naming the file when it fails its checksum.
    fn read_checked(&self, run: &RunDir) -> Result<Option<Vec<u8>>> {
        let path = run.file(&self.file);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = crate::limits::read_file(&path, crate::limits::MAX_WEIGHTS_BYTES)?;
        match &self.checksum {
            Some(want) if crate::limits::content_hash(&bytes) != *want => Err(Error::File {
                path,
                reason: format!("checkpoint of step {} fails its checksum (saved as {want})", self.step),
            }),
            _ => Ok(Some(bytes)),
        }
    }
}

/// The checkpoint to resume from: the latest one in `idx` when intact; the previous one when
/// the latest file was removed (the way to resume from it). A latest checkpoint that fails its
/// checksum is refused, naming the step that can be resumed from instead.
fn checkpoint_to_resume(idx: CheckpointIndex, run: &RunDir) -> Result<(CheckpointIndex, Vec<u8>)> {
    let latest = run.file(&idx.file);
    let previous = match idx.previous.as_deref() {
        Some(p) => p.read_checked(run).ok().flatten().map(|_| p.step),
        None => None,
    };
    match idx.read_checked(run) {
        Ok(Some(bytes)) => Ok((idx, bytes)),
        Err(Error::File { path, reason }) => {
            let hint = match previous {
                Some(p) => format!(
                    "the checkpoint of step {p} is intact: delete {} and rerun the same command to resume from step {p}",
                    path.display()
                ),
                None => format!(
                    "no intact checkpoint is left, so the run can only restart from step 0: move {} away and rerun",
                    run.path().display()
                ),
            };
            Err(Error::File { path, reason: format!("{reason} and is refused; {hint}") })
        }
        Err(e) => Err(e),
        Ok(None) => match idx.previous {
            Some(p) => match p.read_checked(run)? {
                Some(bytes) => Ok((*p, bytes)),
                None => Err(Error::File { path: latest, reason: "missing, and so is the previous checkpoint".into() }),
            },
            None => Err(Error::File {
                path: latest,
                reason: format!("missing; move {} away to restart from step 0", run.path().display()),
            }),
        },
    }
}

/// What a checkpoint holds besides the tensors: where training is and what it has seen.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Steps completed.
    pub step: usize,
    /// Training seconds so far (across resumes).
    pub elapsed_s: f64,
    /// Evaluations so far.
    pub evals: Vec<EvalReport>,
    /// Training loss of the first step, the reference of the divergence check.
    pub initial_loss: Option<f64>,
}

/// Reads and writes the checkpoints and snapshots of one run directory.
#[derive(Debug)]
pub struct Checkpointer<'a> {
    run: &'a RunDir,
    every: usize,
    last: usize,
}

impl<'a> Checkpointer<'a> {
    /// Checkpoints of `run` every `every` steps and at step `last` (the run's last).
    pub fn new(run: &'a RunDir, every: usize, last: usize) -> Self {
        Checkpointer { run, every, last }
    }

    /// Whether `step` is on the checkpoint cadence (or the last step).
    pub fn due(&self, step: usize) -> bool {
        step.is_multiple_of(self.every) || step == self.last
    }

    /// Restores `model` and `opt` from the run's checkpoint to resume from
    /// ([`CheckpointIndex`]: the latest when intact); `None` when the run has no checkpoint.
    pub fn resume(&self, model: &Model, opt: &mut AdamW) -> Result<Option<Progress>> {
        let index_path = self.run.file(CHECKPOINT_INDEX);
        if !index_path.exists() {
            return Ok(None);
        }
        let idx: CheckpointIndex = read_json_file(&index_path, "a checkpoint index")?;
        let (idx, bytes) = checkpoint_to_resume(idx, self.run)?;
        let map = tensors_from_bytes(&self.run.file(&idx.file), &bytes, &Device::Cpu)?;
        model.load_tensors(&map)?;
        opt.load_state(&map, idx.step)?;
        Ok(Some(Progress {
            step: idx.step,
            elapsed_s: idx.elapsed_s,
            evals: idx.evals,
            initial_loss: idx.initial_loss,
        }))
    }

    /// Saves the parameters of `model` as the snapshot of `step`, with its hash beside it.
    pub fn snapshot(&self, step: usize, model: &Model) -> Result<()> {
        let snapshots = self.run.file(SNAPSHOT_DIR);
        std::fs::create_dir_all(&snapshots).map_err(|e| Error::io(&snapshots, e))?;
        let snapshot = snapshots.join(snapshot_name(step));
        let hash = save_tensors(&model.tensors(), &snapshot)?;
        atomic_write(&snapshot.with_extension(SNAPSHOT_HASH_EXT), hash.as_bytes())
    }

    /// Writes the checkpoint of `progress` (parameters and optimiser state), points the index
    /// at it with the previous one kept, and removes the one before that.
    pub fn save(&self, progress: &Progress, model: &Model, opt: &AdamW) -> Result<()> {
        let step = progress.step;
        let mut map = model.tensors();
        let (state, _) = opt.state();
        map.extend(state);
        let file = format!("ckpt-{step:07}.safetensors");
        // Snapshots on the cadence only: a stop by a signal at another step leaves none, so a
        // run that was interrupted and resumed has the same snapshots (gate trajectories) as
        // one that was not.
        if self.due(step) {
            self.snapshot(step, model)?;
        }
        let checksum = save_tensors(&map, &self.run.file(&file))?;
        // The latest checkpoint and the one before it are kept: if the latest is damaged,
        // the run can still resume from the previous one.
        let index_path = self.run.file(CHECKPOINT_INDEX);
        let mut previous: Option<CheckpointIndex> =
            std::fs::read_to_string(&index_path).ok().and_then(|t| serde_json::from_str(&t).ok());
        let older = previous.as_mut().and_then(|p| p.previous.take());
        let previous = previous.filter(|p| p.file != file);
        write_json_atomic(
            &index_path,
            &CheckpointIndex {
                step,
                file: file.clone(),
                elapsed_s: progress.elapsed_s,
                evals: progress.evals.clone(),
                checksum: Some(checksum),
                initial_loss: progress.initial_loss,
                previous: previous.clone().map(Box::new),
            },
        )?;
        if let Some(o) = older {
            if o.file != file && previous.as_ref().is_none_or(|p| p.file != o.file) {
                let _ = std::fs::remove_file(self.run.file(&o.file));
            }
        }
        Ok(())
    }
}
