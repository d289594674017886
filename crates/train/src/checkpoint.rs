//! A training run's checkpoint, shared by every trainer (DeepDataFlow's
//! `train`, and the graph-level tasks through [`crate::graphtask`]):
//!
//! ```text
//! RUN/checkpoint/   state.json, weights.safetensors, optimizer.safetensors
//! ```
//!
//! The directory is replaced whole ([`bundle::replace_dir`]), so a process
//! killed at any point leaves the previous checkpoint or the new one. What
//! `state.json` holds is the trainer's own (its settings, its position, its
//! log); it carries a `version`, checked before anything else is read.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use programl_model::bundle;
use programl_model::Ggnn;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tch::Tensor;

use crate::optim::AdamW;

const STATE_FILE: &str = "state.json";
const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// `RUN/checkpoint/` of one run.
pub struct Checkpoint {
    pub dir: PathBuf,
    /// The parameters' names, in the order of `Ggnn::parameters` (the
    /// optimizer's moments are saved under them).
    names: Vec<&'static str>,
}

/// Holds the run directory `run` for this process: two trainings into one
/// directory would interleave their checkpoints and bundles, and the one
/// that ends last would own them while the other reported success (the
/// check of a resume's arguments cannot see a run that has not yet
/// checkpointed). `flock` on `run/.lock`, released when the guard drops or
/// the process dies; a second hold by the same process (POJ-104's run,
/// then its training loop) shares the first.
pub struct RunLock {
    _file: Option<std::fs::File>,
    key: Option<std::path::PathBuf>,
}

static HELD: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

pub fn lock_run(run: &Path) -> Result<RunLock> {
    std::fs::create_dir_all(run).with_context(|| format!("{}: cannot create the run directory", run.display()))?;
    let key = run.canonicalize().with_context(|| format!("{}: cannot resolve", run.display()))?;
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if held.contains(&key) {
        return Ok(RunLock { _file: None, key: None });
    }
    let path = run.join(".lock");
    let file = match programl::fsutil::try_lock(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            bail!("{}: another programl-train run is writing this run directory; wait for it to end, or give another --out", run.display())
        }
        Err(e) => return Err(e).with_context(|| format!("{}: cannot lock", path.display())),
    };
    held.push(key.clone());
    Ok(RunLock { _file: Some(file), key: Some(key) })
}

impl Drop for RunLock {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).retain(|k| k != key);
        }
    }
}

/// Puts back what a swap killed half-way left aside in the run directory
/// `run` (its `checkpoint/` and `model/`, [`bundle::recover_dir`]). Every
/// reader of a run calls it before asking whether the run has started.
pub fn recover_run(run: &Path) -> Result<()> {
    for part in ["checkpoint", "model"] {
        bundle::recover_dir(&run.join(part)).with_context(|| format!("{}: cannot recover {part}/", run.display()))?;
    }
    Ok(())
}

impl Checkpoint {
    pub fn new(run: &Path, model: &Ggnn) -> Checkpoint {
        Checkpoint { dir: run.join("checkpoint"), names: model.named_parameters().into_iter().map(|(n, _)| n).collect() }
    }

    /// Whether a run has been checkpointed here.
    pub fn exists(&self) -> bool {
        self.dir.join(STATE_FILE).exists()
    }

    /// The state as saved, if its `version` is `version`.
    pub fn state<S: DeserializeOwned>(&self, version: u32) -> Result<S> {
        Checkpoint::read_state(&self.dir, version)
    }

    /// [`Checkpoint::state`] of the run at `run`, before its model exists
    /// (what the run was started with decides the model).
    pub fn state_of<S: DeserializeOwned>(run: &Path, version: u32) -> Result<S> {
        Checkpoint::read_state(&run.join("checkpoint"), version)
    }

    fn read_state<S: DeserializeOwned>(dir: &Path, version: u32) -> Result<S> {
        let path = dir.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not a checkpoint", path.display()))?;
        let found = value.get("version").and_then(serde_json::Value::as_u64);
        if found != Some(version as u64) {
            bail!(
                "{}: checkpoint version {}, this build writes {version}",
                dir.display(),
                found.map_or("none".to_string(), |v| v.to_string())
            );
        }
        serde_json::from_value(value).with_context(|| format!("{}: not a checkpoint of this trainer", path.display()))
    }

    /// Loads the saved weights into `model` and the saved moments into
    /// `opt` (its step count is `adam_step`, from the state).
    pub fn restore(&self, model: &Ggnn, opt: &mut AdamW, adam_step: i64) -> Result<()> {
        bundle::load_weights(model, &self.dir.join(bundle::WEIGHTS_FILE))?;
        let path = self.dir.join(OPTIMIZER_FILE);
        let saved = Tensor::read_safetensors(&path).with_context(|| format!("{}: the optimizer state", path.display()))?;
        opt.restore(&self.names, saved, adam_step).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Replaces the checkpoint with `state`, `model`'s weights and `opt`'s moments.
    pub fn save(&self, state: &impl Serialize, model: &Ggnn, opt: &AdamW) -> Result<()> {
        bundle::replace_dir(&self.dir, |dir| {
            std::fs::write(dir.join(STATE_FILE), serde_json::to_string_pretty(state).expect("a state serialises"))
                .map_err(|source| bundle::BundleError::Io { path: dir.join(STATE_FILE), source })?;
            bundle::save_weights(model, &dir.join(bundle::WEIGHTS_FILE))?;
            Tensor::write_safetensors(&opt.named_state(&self.names), dir.join(OPTIMIZER_FILE))
                .map_err(|e| bundle::BundleError::Invalid { path: dir.join(OPTIMIZER_FILE), detail: e.to_string() })
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use programl_model::Hyper;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct State {
        version: u32,
        epoch: usize,
    }

    #[test]
    fn a_saved_checkpoint_restores_weights_moments_and_state_and_refuses_another_version() {
        let run = tempfile::tempdir().unwrap();
        let hyper = Hyper::spec(5);
        tch::manual_seed(1);
        let model = Ggnn::new(&hyper, tch::Device::Cpu);
        let params = model.parameters();
        let mut opt = AdamW::new(&params, 0.01);
        // One step, so that the moments are not zero.
        let loss = params.iter().map(|p| p.square().sum(tch::Kind::Float)).fold(Tensor::from(0.0f32), |a, b| a + b);
        AdamW::zero_grad(&params);
        loss.backward();
        opt.step(&params);
        let ckpt = Checkpoint::new(run.path(), &model);
        assert!(!ckpt.exists());
        ckpt.save(&State { version: 3, epoch: 7 }, &model, &opt).unwrap();
        assert!(ckpt.exists());

        tch::manual_seed(2);
        let other = Ggnn::new(&hyper, tch::Device::Cpu);
        let mut other_opt = AdamW::new(&other.parameters(), 0.01);
        let state: State = ckpt.state(3).unwrap();
        assert_eq!(state, State { version: 3, epoch: 7 });
        ckpt.restore(&other, &mut other_opt, opt.step).unwrap();
        for ((_, a), (_, b)) in model.named_parameters().into_iter().zip(other.named_parameters()) {
            assert!(a.equal(b));
        }
        assert_eq!(other_opt.step, 1);
        let mut moved = 0.0;
        for ((m1, v1), (m2, v2)) in opt.moments.iter().zip(&other_opt.moments) {
            assert!(m1.equal(m2) && v1.equal(v2));
            moved += m1.abs().sum(tch::Kind::Float).double_value(&[]);
        }
        assert!(moved > 0.0, "the step moved the moments");
        let err = ckpt.state::<State>(4).unwrap_err().to_string();
        assert!(err.contains("checkpoint version 3, this build writes 4"), "{err}");
        // Saving again replaces the directory whole.
        ckpt.save(&State { version: 3, epoch: 8 }, &model, &opt).unwrap();
        assert_eq!(ckpt.state::<State>(3).unwrap().epoch, 8);
        let leftovers: Vec<_> = std::fs::read_dir(run.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("checkpoint")]);

        // A swap killed between its two renames: the checkpoint aside as
        // `.checkpoint.old`, none in place. The run reads as not started
        // until it is recovered, and then as the epoch it had reached.
        std::fs::rename(run.path().join("checkpoint"), run.path().join(".checkpoint.old")).unwrap();
        assert!(!ckpt.exists());
        recover_run(run.path()).unwrap();
        assert!(ckpt.exists());
        assert_eq!(ckpt.state::<State>(3).unwrap().epoch, 8);
        assert!(!run.path().join(".checkpoint.old").exists());
        // With a checkpoint in place, what lies aside is left alone.
        std::fs::create_dir(run.path().join(".checkpoint.old")).unwrap();
        recover_run(run.path()).unwrap();
        assert_eq!(ckpt.state::<State>(3).unwrap().epoch, 8);
        // The next save clears it, and writes the nested files as before.
        ckpt.save(&State { version: 3, epoch: 9 }, &model, &opt).unwrap();
        assert_eq!(ckpt.state::<State>(3).unwrap().epoch, 9);
        assert!(!run.path().join(".checkpoint.old").exists());
    }
}
