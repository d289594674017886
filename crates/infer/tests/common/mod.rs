//! What the torch-free inference's test files share.
#![allow(dead_code)]

use std::path::PathBuf;

use programl::batch::{Batch, GraphInput, Sample};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `src` (relative to the repository) compiled by clang 16 with `flags`
/// into a graph.
pub fn graph_of(src: &str, flags: &[&str]) -> programl::ProgramGraph {
    let dir = tempfile::tempdir().unwrap();
    let ll = dir.path().join("out.ll");
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    let ok =
        std::process::Command::new(clang).args(flags).args(["-S", "-emit-llvm", "-w"]).arg(root().join(src)).arg("-o").arg(&ll).status();
    assert!(ok.unwrap().success(), "clang {src}");
    programl::builder::build_file(&ll, &Default::default()).unwrap()
}

/// Copies of `input`, each with its own root, for several thousand nodes
/// (a batch the threads split).
pub fn many_roots(input: &GraphInput) -> Batch {
    let n = input.node_count() as u32;
    let copies = (5000 / n.max(1) + 1).max(2);
    let samples: Vec<Sample<'_>> = (0..copies).map(|i| Sample { graph: input, root: Some((i * 7) % n), positives: None }).collect();
    Batch::from_samples(&samples).unwrap()
}
