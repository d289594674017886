//! `weights.safetensors`, read with the pure-Rust `safetensors` crate and
//! checked against the bundle's [`Hyper`]: every tensor present with its
//! shape and dtype (f32), nothing else, every value finite. A truncated or
//! corrupt file is one error naming the file.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use crate::bundle::{invalid, BundleError};
use crate::config::Hyper;

/// A bundle's tensors by name, row-major f32.
pub struct Weights {
    tensors: BTreeMap<String, Vec<f32>>,
}

/// What is wrong with a safetensors file cut short (a copy or a download
/// that stopped): the safetensors crate says only `HeaderTooSmall` or
/// `MetadataIncompleteBuffer`. `None` where the sizes agree.
pub fn cut_short(bytes: &[u8]) -> Option<String> {
    let Some(head) = bytes.get(..8) else {
        return Some(format!("cut short: {} bytes, less than the 8 of the header's length", bytes.len()));
    };
    let header = u64::from_le_bytes(head.try_into().ok()?);
    let have = bytes.len() as u64 - 8;
    if header > have {
        return Some(format!(
            "cut short: its header is {header} bytes and only {have} follow the length (a copy or download that stopped?)"
        ));
    }
    // The tensors' data: the largest end offset the header gives.
    let meta: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header as usize]).ok()?;
    let needed = meta.as_object()?.values().filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64()).max().unwrap_or(0);
    let data = have - header;
    (needed > data)
        .then(|| format!("cut short: its tensors take {needed} bytes and only {data} are there (a copy or download that stopped?)"))
}

impl Weights {
    /// Reads and checks `path` for a model of `hyper`.
    pub fn read(path: &Path, hyper: &Hyper) -> Result<Weights, BundleError> {
        let bytes = programl::fsutil::read_regular(path).map_err(|source| BundleError::Io { path: path.to_path_buf(), source })?;
        let file = SafeTensors::deserialize(&bytes)
            .map_err(|e| invalid(path, format!("not a safetensors file: {}", cut_short(&bytes).unwrap_or_else(|| e.to_string()))))?;
        let mut found = BTreeMap::new();
        let mut problems = Vec::new();
        for (name, view) in file.tensors() {
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if view.dtype() != Dtype::F32 {
                problems.push(format!("tensor '{name}' is {:?}, expected Float (f32)", view.dtype()));
                continue;
            }
            let values: Vec<f32> = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            found.insert(name, (shape, values));
        }
        Weights::checked(path, hyper, found, problems)
    }

    /// Weights from tensors in memory (name → shape and row-major
    /// values), checked as [`Weights::read`] checks a file; `origin` names
    /// them in errors.
    pub fn from_tensors(origin: &Path, hyper: &Hyper, tensors: BTreeMap<String, (Vec<i64>, Vec<f32>)>) -> Result<Weights, BundleError> {
        Weights::checked(origin, hyper, tensors, Vec::new())
    }

    fn checked(
        path: &Path,
        hyper: &Hyper,
        mut found: BTreeMap<String, (Vec<i64>, Vec<f32>)>,
        mut problems: Vec<String>,
    ) -> Result<Weights, BundleError> {
        let mut tensors = BTreeMap::new();
        let expected = hyper.tensor_shapes();
        for (name, shape) in &expected {
            match found.remove(*name) {
                None if problems.iter().any(|p| p.starts_with(&format!("tensor '{name}' is "))) => {}
                None => problems.push(format!("missing tensor '{name}' (shape {shape:?})")),
                Some((got, _)) if &got != shape => problems.push(format!("tensor '{name}' has shape {got:?}, expected {shape:?}")),
                Some((_, values)) => {
                    if let Some(i) = values.iter().position(|x| !x.is_finite()) {
                        problems.push(format!("tensor '{name}' holds NaN or infinite values (entry {i})"));
                    }
                    tensors.insert(name.to_string(), values);
                }
            }
        }
        problems.extend(found.keys().map(|name| format!("unexpected tensor '{name}'")));
        if !problems.is_empty() {
            return Err(invalid(path, problems.join("; ")));
        }
        Ok(Weights { tensors })
    }

    /// Tensor `name`'s values (a name of [`Hyper::tensor_shapes`]).
    pub fn get(&self, name: &str) -> &[f32] {
        self.tensors.get(name).map(Vec::as_slice).unwrap_or_else(|| panic!("checked on load: tensor '{name}'"))
    }

    /// Every tensor, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[f32])> {
        self.tensors.iter().map(|(n, v)| (n.as_str(), v.as_slice()))
    }
}
