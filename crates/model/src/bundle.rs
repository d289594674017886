//! The model bundle: one directory holding a trained model, the format the
//! trainer writes and `eval`, `predict` and the learned pass read.
//!
//! ```text
//! BUNDLE/
//!   config.json          format name and version, task, head, hyperparameters, provenance
//!   weights.safetensors  the parameters (names and shapes: the `ggnn` module docs), f32
//!   vocabulary.json      the node-text vocabulary (programl::vocab's format)
//! ```
//!
//! [`Bundle::load`] checks the format name and version, that every
//! parameter is present with its shape and dtype and that nothing else is,
//! and that the vocabulary has as many ids as the embedding has rows; each
//! failure is a [`BundleError`] naming the file and what does not match.
//! (`tch`'s `VarStore::load` checks none of this, and silently converts
//! dtypes.) [`Bundle::save`] writes a new directory beside the target and
//! swaps it in, so a reader sees the old bundle or the new one, never a mix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use programl::vocab::Vocabulary;
use tch::{Device, Kind, Tensor};

pub use programl_infer::bundle::{
    read_config, AutoDtype, BundleError, Config, Head, Provenance, SourceCompile, CONFIG_FILE, FORMAT, MAX_POSITIONS, MAX_STEPS, VERSION,
    VOCABULARY_FILE, WEIGHTS_FILE,
};

use crate::{Ggnn, Hyper};

fn invalid(path: &Path, detail: impl Into<String>) -> BundleError {
    BundleError::Invalid { path: path.to_path_buf(), detail: detail.into() }
}

/// A loaded bundle.
pub struct Bundle {
    pub config: Config,
    pub model: Ggnn,
    pub vocabulary: Vocabulary,
    /// The directory it was loaded from.
    pub dir: PathBuf,
}

impl Bundle {
    /// Reads and checks the bundle in `dir`, placing the model on `device`.
    pub fn load(dir: &Path, device: Device) -> Result<Bundle, BundleError> {
        Bundle::load_as(dir, device, false)
    }

    /// [`Bundle::load`] for training to continue from (`train --init`):
    /// a bundle with a stopping rule (`hyper.stop`) loads too, since
    /// training runs the step counts it chooses. The rule stays in the
    /// returned config; the libtorch model never applies it.
    pub fn load_to_train(dir: &Path, device: Device) -> Result<Bundle, BundleError> {
        Bundle::load_as(dir, device, true)
    }

    fn load_as(dir: &Path, device: Device, training: bool) -> Result<Bundle, BundleError> {
        let config = read_config(dir)?;
        let vocab_path = dir.join(VOCABULARY_FILE);
        let vocabulary = Vocabulary::load(&vocab_path).map_err(|source| BundleError::Vocabulary { path: vocab_path.clone(), source })?;
        if vocabulary.len() != config.hyper.vocab_size {
            return Err(invalid(
                &vocab_path,
                format!(
                    "the vocabulary has {} ids (with the unknown id) but the model's embedding has {} rows (config.json hyper.vocab_size)",
                    vocabulary.len(),
                    config.hyper.vocab_size
                ),
            ));
        }
        // This crate's GGNN (training, CUDA) runs a fixed T, any even
        // width (34 on the CPU's fused loops, others on libtorch's
        // operations); programl-infer runs a stopping rule on the CPU.
        if config.hyper.stop.is_some() && !training {
            return Err(invalid(
                &dir.join(CONFIG_FILE),
                "hyper.stop: the libtorch GGNN (device=cuda) runs a fixed number of steps; \
                 the CPU inference (programl-infer: the learned pass, eval, predict) runs this bundle"
                    .to_string(),
            ));
        }
        let model = Ggnn::new(&Hyper { stop: None, ..config.hyper.clone() }, device);
        load_weights(&model, &dir.join(WEIGHTS_FILE))?;
        Ok(Bundle { config, model, vocabulary, dir: dir.to_path_buf() })
    }

    /// Writes `model`, `vocabulary` and `config` as the bundle `dir`,
    /// replacing any bundle there as a whole.
    pub fn save(dir: &Path, config: &Config, model: &Ggnn, vocabulary: &Vocabulary) -> Result<(), BundleError> {
        replace_dir(dir, |staging| {
            let json = serde_json::to_string_pretty(config).expect("a config serialises") + "\n";
            let path = staging.join(CONFIG_FILE);
            std::fs::write(&path, json).map_err(|source| BundleError::Io { path, source })?;
            save_weights(model, &staging.join(WEIGHTS_FILE))?;
            let path = staging.join(VOCABULARY_FILE);
            vocabulary.save(&path).map_err(|source| BundleError::Vocabulary { path, source })
        })
    }
}

/// Replaces the directory `dir` as a whole: `fill` writes the new contents
/// into a staging directory beside it, which then takes `dir`'s name (the
/// old directory is moved aside first and removed after). A reader, or a
/// process killed at any point, sees the old directory or the new one,
/// never a mix (at worst a leftover `.NAME.*` beside it, removed by the
/// next call).
pub fn replace_dir(dir: &Path, fill: impl FnOnce(&Path) -> Result<(), BundleError>) -> Result<(), BundleError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BundleError::Io { path, source }
    };
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = dir.file_name().ok_or_else(|| invalid(dir, "needs a directory name"))?.to_string_lossy().into_owned();
    let old = parent.join(format!(".{name}.old"));
    recover_dir(dir)?;
    for entry in std::fs::read_dir(parent).map_err(io(parent))?.flatten() {
        let n = entry.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!(".{name}.stage")) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let staging = tempfile::Builder::new().prefix(&format!(".{name}.stage")).tempdir_in(parent).map_err(io(parent))?;
    #[cfg(unix)]
    {
        // tempfile makes 0700 directories; a bundle is as readable as any
        // other output.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o755)).map_err(io(staging.path()))?;
    }
    fill(staging.path())?;
    sync_tree(staging.path())?;
    let _ = std::fs::remove_dir_all(&old);
    if dir.exists() {
        std::fs::rename(dir, &old).map_err(io(dir))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, dir).map_err(io(dir))?;
    let _ = std::fs::remove_dir_all(&old);
    programl::fsutil::sync_dir(parent).map_err(io(parent))?;
    Ok(())
}

/// Puts back a directory that [`replace_dir`] moved aside and was killed
/// before renaming the new one into place (`dir` gone, `.NAME.old` beside
/// it). Readers of a run call it first: without it a killed swap reads as
/// a run that never started. Nothing to do otherwise.
pub fn recover_dir(dir: &Path) -> Result<(), BundleError> {
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Some(name) = dir.file_name() else { return Ok(()) };
    let old = parent.join(format!(".{}.old", name.to_string_lossy()));
    if !dir.exists() && old.is_dir() {
        std::fs::rename(&old, dir).map_err(|source| BundleError::Io { path: dir.to_path_buf(), source })?;
    }
    Ok(())
}

/// Flushes every file and directory under `dir` (a checkpoint's nested
/// files too) before the rename that publishes it.
fn sync_tree(dir: &Path) -> Result<(), BundleError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BundleError::Io { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
        let path = entry.path();
        if entry.file_type().map_err(io(&path))?.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path).and_then(|f| f.sync_all()).map_err(io(&path))?;
        }
    }
    programl::fsutil::sync_dir(dir).map_err(io(dir))
}

/// Writes the model's parameters as safetensors (f32, on the CPU).
pub fn save_weights(model: &Ggnn, path: &Path) -> Result<(), BundleError> {
    let tensors: Vec<(&str, Tensor)> =
        model.named_tensors().into_iter().map(|(n, t)| (n, t.to_kind(Kind::Float).to_device(Device::Cpu))).collect();
    let staged = path.with_extension("safetensors.tmp");
    Tensor::write_safetensors(&tensors, &staged).map_err(|e| invalid(path, format!("cannot write weights: {e}")))?;
    std::fs::rename(&staged, path).map_err(|source| BundleError::Io { path: path.to_path_buf(), source })
}

/// Reads `path` into `model`, checking every name, shape and dtype.
pub fn load_weights(model: &Ggnn, path: &Path) -> Result<(), BundleError> {
    load_weights_as(model, path, false).map(|_| ())
}

/// [`load_weights`] for a model whose vocabulary extends the bundle's
/// (`Vocabulary::extended`): an `embedding.weight` with fewer rows than
/// the model's fills the first rows, the others keep the model's
/// initialisation. Returns the rows read.
pub fn load_weights_grown(model: &Ggnn, path: &Path) -> Result<i64, BundleError> {
    load_weights_as(model, path, true)
}

fn load_weights_as(model: &Ggnn, path: &Path, grow: bool) -> Result<i64, BundleError> {
    if !path.exists() {
        return Err(BundleError::Io { path: path.to_path_buf(), source: std::io::Error::from(std::io::ErrorKind::NotFound) });
    }
    let read = Tensor::read_safetensors(path).map_err(|e| {
        // tch repeats the path and names only the safetensors variant.
        let why = std::fs::read(path).ok().and_then(|b| programl_infer::weights::cut_short(&b)).unwrap_or_else(|| e.to_string());
        invalid(path, format!("not a safetensors file: {why}"))
    })?;
    let mut found: BTreeMap<String, Tensor> = read.into_iter().collect();
    let mut read_rows = model.hyper().vocab_size as i64;
    let current = model.named_tensors().into_iter().find(|(n, _)| *n == "embedding.weight").map(|(_, t)| t);
    if let (true, Some(old), Some(current)) = (grow, found.get("embedding.weight"), current) {
        let (o, c) = (old.size(), current.size());
        if old.kind() == Kind::Float && o.len() == 2 && o[1] == c[1] && o[0] <= c[0] {
            let grown = tch::no_grad(|| {
                let g = current.detach().copy();
                g.narrow(0, 0, o[0]).copy_(old);
                g
            });
            read_rows = o[0];
            found.insert("embedding.weight".into(), grown);
        }
    }
    let mut problems = Vec::new();
    let mut checked = Vec::new();
    for (name, shape) in model.hyper().tensor_shapes() {
        match found.remove(name) {
            None => problems.push(format!("missing tensor '{name}' (shape {shape:?})")),
            Some(t) if t.kind() != Kind::Float => problems.push(format!("tensor '{name}' is {:?}, expected Float (f32)", t.kind())),
            Some(t) if t.size() != shape => problems.push(format!("tensor '{name}' has shape {:?}, expected {shape:?}", t.size())),
            Some(t) => checked.push((name, t)),
        }
    }
    for name in found.keys() {
        problems.push(format!("unexpected tensor '{name}'"));
    }
    if !problems.is_empty() {
        return Err(invalid(path, problems.join("; ")));
    }
    tch::no_grad(|| {
        for ((name, target), (checked_name, source)) in model.named_tensors().into_iter().zip(checked) {
            assert_eq!(name, checked_name, "tensor_shapes and named_tensors list the same names in the same order");
            target.shallow_clone().copy_(&source);
        }
    });
    for (name, t) in model.named_tensors() {
        let finite = bool::try_from(t.isfinite().all()).unwrap_or(false);
        if !finite {
            return Err(invalid(path, format!("tensor '{name}' holds NaN or infinite values")));
        }
    }
    Ok(read_rows)
}
