//! The fast path against the project's PyTorch reference of SPEC.md §3
//! (`bench/reference_ggnn.py`, written in upstream's style: one
//! `index_add_` per edge type, autograd throughout): on a real graph, the
//! same weights (through safetensors) give the same T-step logits, loss and
//! gradients of every parameter.
//!
//! Needs the project venv (`scripts/bootstrap.sh` makes it, with torch and
//! safetensors); without it the test fails rather than passing unchecked.

use std::path::{Path, PathBuf};
use std::process::Command;

use programl::analysis::{Analyzer, Task};
use programl::batch::{Batch, EdgeType, GraphInput, Sample};
use programl::vocab::{Counts, Vocabulary};
use programl_model::{bundle, Ggnn, Hyper, Prepared};
use tch::{Device, Tensor};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let venv = std::env::var_os("VIRTUAL_ENV").map(PathBuf::from).unwrap_or_else(|| repo().join(".venv"));
    let p = venv.join("bin/python");
    assert!(p.exists(), "{}: no project venv; run scripts/bootstrap.sh", p.display());
    p
}

#[test]
fn logits_and_gradients_match_the_pytorch_reference_on_a_real_graph() {
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, &repo().join("tests/data/branches.ll")).unwrap();
    let graph = programl::builder::build(&module, &Default::default());
    let mut counts = Counts::default();
    for n in graph.graph.node_weights().skip(3) {
        *counts.texts.entry(n.text.clone()).or_default() += 1;
    }
    let vocab = Vocabulary::from_counts(&counts, 1, None);
    let input = GraphInput::new(&graph, &vocab).unwrap();
    // Two real reachability examples in one batch.
    let mut analyzer = Analyzer::new(&graph);
    let roots = analyzer.sampled_roots(Task::Reachability, 0);
    assert!(roots.len() >= 2, "{roots:?}");
    let labels: Vec<_> = roots[..2].iter().map(|&r| analyzer.analyze(Task::Reachability, r).unwrap()).collect();
    let samples: Vec<_> = labels.iter().map(|l| Sample { graph: &input, root: Some(l.root), positives: Some(&l.positives) }).collect();
    let batch = Batch::from_samples(&samples).unwrap();
    assert!(batch.node_count() > 40, "{} nodes", batch.node_count());

    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(42);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let dir = tempfile::tempdir().unwrap();
    let (weights, inputs, out) = (dir.path().join("w.safetensors"), dir.path().join("i.safetensors"), dir.path().join("o.safetensors"));
    bundle::save_weights(&model, &weights).unwrap();
    let mut arrays: Vec<(String, Tensor)> = vec![
        ("tokens".into(), Tensor::from_slice(batch.tokens())),
        ("selector".into(), Tensor::from_slice(batch.selector())),
        ("labels".into(), Tensor::from_slice(batch.labels().unwrap())),
    ];
    for (t, name) in [(EdgeType::Control, "control"), (EdgeType::Data, "data"), (EdgeType::Call, "call")] {
        let e = batch.edges(t);
        arrays.push((format!("{name}.sources"), Tensor::from_slice(e.sources)));
        arrays.push((format!("{name}.targets"), Tensor::from_slice(e.targets)));
        arrays.push((format!("{name}.positions"), Tensor::from_slice(e.positions)));
    }
    Tensor::write_safetensors(&arrays, &inputs).unwrap();
    let steps = 30;
    let run = Command::new(python())
        .arg(repo().join("bench/reference_ggnn.py"))
        .args(["parity", "--weights"])
        .arg(&weights)
        .arg("--input")
        .arg(&inputs)
        .args(["--steps", &steps.to_string(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "reference failed: {}", String::from_utf8_lossy(&run.stderr));
    let reference: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(&out).unwrap().into_iter().collect();

    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let logits = model.forward(&prepared, steps, false);
    let loss = logits.cross_entropy_for_logits(prepared.labels.as_ref().unwrap());
    loss.backward();
    let diff = (&logits - &reference["logits"]).abs().max().double_value(&[]);
    assert!(diff < 1e-4, "logits differ by {diff}");
    // The inference arrangement (eval, predict, the learned pass).
    let fast = model.forward_inference(&prepared, steps);
    let diff = (&fast - &reference["logits"]).abs().max().double_value(&[]);
    assert!(diff < 1e-4, "inference logits differ by {diff}");
    let dl = (loss.double_value(&[]) - reference["loss"].double_value(&[])).abs();
    assert!(dl < 1e-5, "loss differs by {dl}");
    for (name, p) in model.named_parameters() {
        let ours = p.grad();
        let theirs = &reference[&format!("grad.{name}")];
        let scale = theirs.abs().max().double_value(&[]).max(1e-8);
        let rel = (&ours - theirs).abs().max().double_value(&[]) / scale;
        assert!(rel < 1e-3, "gradient of {name} differs by {rel} (relative to its largest entry {scale})");
    }
}
