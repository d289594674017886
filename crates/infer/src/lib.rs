//! Torch-free GGNN inference on the CPU: what the learned pass, `eval` and
//! `predict` run.
//!
//! [`Model::open`] reads a bundle (`config.json`, `weights.safetensors`
//! with the pure-Rust `safetensors` reader, `vocabulary.json`), checks it
//! as `programl-model` does, and packs its weights once. Its
//! [`Model::node_probabilities`] and [`Model::graph_probabilities`] run
//! the node head and the graph head on a core [`Batch`](programl::batch::Batch),
//! at the precision and on the kernel path that [`Options`] asks for, on
//! the kernels of `programl-kernels` (AVX-512 VNNI, AVX-512, AVX2+FMA or
//! portable, chosen at run time).
//!
//! ```no_run
//! use programl::batch::{Batch, GraphInput, Sample};
//! use programl_infer::{Model, Options};
//!
//! let model = Model::open("models/reachability".as_ref()).unwrap();
//! # let graph = programl::ProgramGraph::new();
//! let input = GraphInput::new(&graph, &model.vocabulary).unwrap();
//! let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(0), positives: None }]).unwrap();
//! let out = model.node_probabilities(&batch, &Options::default()).unwrap();
//! println!("{} probabilities at {} on {}", out.probabilities.len(), out.precision, out.isa);
//! ```
//!
//! **Invariant:** this crate and everything it depends on are torch-free:
//! no tch, torch-sys, rayon or the dataset store (`tests/layering.rs`).
//! Nothing it does loads libtorch.

pub mod bundle;
pub mod config;
mod depth;
mod gated;
mod model;
pub mod weights;
mod wide;

use std::fmt;
use std::str::FromStr;

pub use model::{Model, Output};
pub use programl_kernels::cpu::{self, Isa};
pub use programl_kernels::int8::{path as int8_path, preferred as int8_preferred};

/// The products' precision a caller asks for: `dtype=` in the learned
/// pass, `--dtype` in `programl-train`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32,
    /// BF16 products (FP32 accumulation) where the CPU has AVX512-BF16;
    /// FP32 elsewhere.
    Bf16,
    /// INT8 products on every path (AVX-512 VNNI, AVX2, portable).
    Int8,
    /// The fastest precision within the documented accuracy bound: INT8
    /// where the CPU has AVX-512 VNNI, else FP32.
    #[default]
    Auto,
}

impl FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Dtype, String> {
        match s {
            "f32" => Ok(Dtype::F32),
            "bf16" => Ok(Dtype::Bf16),
            "int8" => Ok(Dtype::Int8),
            "auto" => Ok(Dtype::Auto),
            _ => Err(format!("dtype '{s}' is not one of f32, bf16, int8, auto")),
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::Int8 => "int8",
            Dtype::Auto => "auto",
        })
    }
}

/// The precision a prediction ran at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    F32,
    Bf16,
    Int8,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        })
    }
}

/// How one prediction runs. Per call: nothing here is process-wide.
#[derive(Clone, Debug)]
pub struct Options {
    /// Message-passing steps (`None`: the bundle's T, or its stopping
    /// rule). With a bundle that has a stopping rule (`hyper.stop`),
    /// `Some(T)` caps the rule at T steps.
    pub steps: Option<i64>,
    /// Threads for this call's loops (1: the calling thread alone, the
    /// default inside a compiler).
    pub threads: usize,
    pub dtype: Dtype,
    /// The highest kernel path to take (`None`: the best the CPU runs).
    pub isa: Option<Isa>,
}

impl Default for Options {
    fn default() -> Options {
        Options { steps: None, threads: 1, dtype: Dtype::Auto, isa: None }
    }
}
