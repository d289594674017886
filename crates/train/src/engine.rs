//! The one training step and the one inference pass, shared by `train`,
//! `eval`, `predict` and `bench` (so `bench` measures what users run).
//!
//! Inference runs through a [`Predictor`]: on the CPU, eval and predict use
//! the torch-free inference the learned pass runs (`programl-infer`), so
//! the figures they report are the pass's; training's validation and other
//! devices use this crate's libtorch model.

use programl::batch::Batch;
use programl_model::{Ggnn, Prepared};
use tch::{Kind, Tensor};

use crate::data::Examples;
use crate::metrics::{bucket_of, Confusion, BUCKETS};
use crate::optim::AdamW;

/// Keeps freed memory in the process (glibc): a training step allocates
/// and frees hundreds of MiB of per-step tensors, and with glibc's default
/// thresholds every step maps them afresh and the kernel zero-fills them
/// page by page (a quarter of a step's time, measured with `perf`). With
/// large blocks kept in the heap and the heap's top never trimmed, the pages
/// are reused; peak RSS is unchanged. Called by every entry point here.
pub fn tune_allocator() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            extern "C" {
                fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
            }
            const M_TRIM_THRESHOLD: std::ffi::c_int = -1;
            const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
            // SAFETY: mallopt only changes glibc's allocator thresholds; 32 MiB
            // is glibc's upper bound for the mmap threshold on 64-bit targets.
            unsafe {
                mallopt(M_MMAP_THRESHOLD, 32 << 20);
                mallopt(M_TRIM_THRESHOLD, std::ffi::c_int::MAX);
            }
        }
    });
}

/// One training step on a prepared, labelled batch: forward at `steps` in
/// training mode (dropout on), cross-entropy over the batch's nodes (the
/// positive class weighted `pos_weight`, averaged over the weights), the
/// gradients by hand ([`Ggnn::loss_and_gradients`], no autograd), AdamW
/// update. Returns the loss.
pub fn train_step(model: &Ggnn, opt: &mut AdamW, input: &Prepared, steps: i64, pos_weight: f64) -> f64 {
    until_step(model, opt, input, steps, None, programl_model::Tape::Full, pos_weight, 0.0, 0.0).0
}

/// [`train_step`] for adaptive depth: the settling term
/// ([`Ggnn::settling_loss_and_gradients`]) weighted `stability` (0: none);
/// given `until`, a forward that runs as the stopping rule infers
/// ([`Ggnn::settling_until`], `steps` the cap); the unroll's record kept
/// as `tape` says ([`Ggnn::gradients`]); and the gradients scaled
/// down, all by one factor, to a global L2 norm of at most `clip` where
/// they exceed it (`clip` 0: never), since back-propagation through
/// hundreds of steps can meet a batch whose gradients explode. Returns the
/// loss and the steps run.
#[allow(clippy::too_many_arguments)]
pub fn until_step(
    model: &Ggnn,
    opt: &mut AdamW,
    input: &Prepared,
    steps: i64,
    until: Option<programl_model::Until>,
    tape: programl_model::Tape,
    pos_weight: f64,
    stability: f64,
    clip: f64,
) -> (f64, i64) {
    tune_allocator();
    let mut g = model.gradients(input, &programl_model::TrainStep { steps, until, tape, dropout: true, pos_weight, stability });
    if clip > 0.0 {
        let norm = g.grads.iter().map(|t| t.square().sum(Kind::Double).double_value(&[])).sum::<f64>().sqrt();
        if norm > clip {
            let scale = clip / norm;
            for t in &mut g.grads {
                *t *= scale;
            }
        }
    }
    opt.step_with(&model.parameters(), &g.grads);
    (g.loss.double_value(&[]), g.steps)
}

/// The same step through autograd ([`Ggnn::forward`] and `backward`): the
/// slower path the hand-written gradients are checked against.
pub fn train_step_autograd(model: &Ggnn, opt: &mut AdamW, input: &Prepared, steps: i64) -> f64 {
    tune_allocator();
    let labels = input.labels.as_ref().expect("a training batch is labelled");
    let params = model.parameters();
    AdamW::zero_grad(&params);
    let logits = model.forward(input, steps, true);
    let loss = logits.cross_entropy_for_logits(labels);
    loss.backward();
    opt.step(&params);
    loss.double_value(&[])
}

/// Inference: the probability of the positive class per node, \[N\], on the
/// CPU, with no autograd state kept (memory does not grow with `steps`).
pub fn infer(model: &Ggnn, input: &Prepared, steps: i64) -> Tensor {
    tch::no_grad(|| model.forward_inference(input, steps).softmax(1, Kind::Float).select(1, 1).to_device(tch::Device::Cpu))
}

/// What runs a bundle's inference.
pub enum Predictor<'a> {
    /// The torch-free inference (`programl-infer`) on the CPU: what the
    /// learned pass computes.
    Cpu(&'a programl_infer::Model, programl_infer::Options),
    /// The libtorch model, on its device.
    Torch(&'a Ggnn),
}

impl Predictor<'_> {
    /// Per-node logits of `batch` after `steps` steps, row-major \[N × C\].
    pub fn node_logits(&self, batch: &Batch, steps: i64) -> Vec<f32> {
        match self {
            Predictor::Cpu(model, options) => {
                let options = programl_infer::Options { steps: Some(steps), ..options.clone() };
                model.node_logits(batch, &options).0
            }
            Predictor::Torch(model) => {
                let input = Prepared::new(batch, model.hyper(), model.device());
                let logits = tch::no_grad(|| model.forward_inference(&input, steps).to_device(tch::Device::Cpu));
                Vec::try_from(logits.contiguous().view([-1])).expect("f32 logits")
            }
        }
    }

    /// [`Predictor::node_logits`] at `steps`, or (`None`, the torch-free
    /// inference only) at the bundle's stopping rule, with the steps each
    /// graph of the batch ran.
    pub fn node_logits_per_graph(&self, batch: &Batch, steps: Option<i64>) -> (Vec<f32>, Vec<i64>) {
        match (self, steps) {
            (Predictor::Cpu(model, options), _) => {
                model.node_logits_per_graph(batch, &programl_infer::Options { steps, ..options.clone() })
            }
            (Predictor::Torch(_), Some(t)) => (self.node_logits(batch, t), vec![t; batch.graph_count()]),
            (Predictor::Torch(_), None) => panic!("a stopping rule runs on the torch-free inference only"),
        }
    }

    /// The probability of the positive class (class 1) per node, \[N\],
    /// at `steps` or (`None`, the torch-free inference only) at the
    /// bundle's T or stopping rule, and the steps each graph ran.
    pub fn positive_probabilities_per_graph(&self, batch: &Batch, steps: Option<i64>) -> (Vec<f32>, Vec<i64>) {
        let (logits, ran) = self.node_logits_per_graph(batch, steps);
        let c = logits.len() / batch.node_count().max(1);
        (logits.chunks_exact(c.max(1)).map(|row| softmax_of(row, 1)).collect(), ran)
    }
}

/// `softmax(row)[k]`.
fn softmax_of(row: &[f32], k: usize) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|x| (x - max).exp()).sum();
    (row[k] - max).exp() / sum
}

/// Pooled results of an evaluation.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    pub examples: u64,
    pub total: Confusion,
    /// Per [`BUCKETS`] entry: examples and counts.
    pub buckets: [(u64, Confusion); 4],
    /// Mean cross-entropy over the batches' nodes (batch-weighted by nodes).
    pub loss: f64,
    /// Per [`BUCKETS`] entry: the message-passing steps the examples' graphs
    /// ran, summed, and the steps their analysis took (the dataset's
    /// record), summed: with a stopping rule the two differ per example.
    pub steps: [(u64, u64); 4],
}

/// Evaluates examples `ids` (in order) at `steps`, in batches of at most
/// `max_nodes` nodes (a larger graph alone), on the libtorch model.
pub fn evaluate(model: &Ggnn, data: &Examples, ids: &[usize], steps: i64, max_nodes: usize, progress: impl FnMut(usize)) -> Evaluation {
    evaluate_with(&Predictor::Torch(model), data, ids, Some(steps), max_nodes, progress)
}

/// [`evaluate`] on any [`Predictor`]; `steps` `None`: the bundle's
/// stopping rule (the torch-free inference).
pub fn evaluate_with(
    predictor: &Predictor<'_>,
    data: &Examples,
    ids: &[usize],
    steps: Option<i64>,
    max_nodes: usize,
    mut progress: impl FnMut(usize),
) -> Evaluation {
    tune_allocator();
    let mut out = Evaluation::default();
    let mut loss_sum = 0.0;
    let mut nodes = 0usize;
    for range in programl::batch::plan(ids.iter().map(|&i| data.size(i)), max_nodes) {
        let chunk = &ids[range];
        let batch = data.batch(chunk);
        let (logits, ran) = predictor.node_logits_per_graph(&batch, steps);
        let labels = batch.labels().unwrap();
        let c = logits.len() / batch.node_count().max(1);
        // Cross-entropy over the batch's nodes, as libtorch's mean.
        let mut loss = 0f64;
        let mut probs = Vec::with_capacity(batch.node_count());
        for (row, &label) in logits.chunks_exact(c.max(1)).zip(labels) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let log_sum = row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() + max;
            loss += log_sum - row[label as usize] as f64;
            probs.push(softmax_of(row, 1));
        }
        let loss = if probs.is_empty() { 0.0 } else { loss / probs.len() as f64 };
        loss_sum += loss * batch.node_count() as f64;
        nodes += batch.node_count();
        for (g, &i) in chunk.iter().enumerate() {
            let e = &data.examples[i];
            let offset = batch.offsets()[g] as usize;
            let mut c = Confusion::default();
            for &node in &data.graphs[e.graph as usize].labelled {
                let k = offset + node as usize;
                c.record(probs[k] > 0.5, labels[k] == 1);
            }
            out.total.add(&c);
            let b = bucket_of(e.steps);
            out.buckets[b].0 += 1;
            out.buckets[b].1.add(&c);
            out.steps[b].0 += ran[g].max(0) as u64;
            out.steps[b].1 += u64::from(e.steps);
            out.examples += 1;
        }
        progress(chunk.len());
    }
    out.loss = if nodes > 0 { loss_sum / nodes as f64 } else { 0.0 };
    let _ = BUCKETS;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use programl::batch::{GraphInput, Sample};
    use programl::builder::{build_file, BuildOptions};
    use programl_model::Hyper;
    use std::path::Path;

    /// `until_step` scales the whole gradient to the norm asked for, and
    /// leaves a smaller one alone: after one step from zero moments,
    /// AdamW's second moments sum to `(1 − β₂) ‖g‖²`.
    #[test]
    fn clipping_scales_the_gradient_to_its_norm() {
        let graph =
            build_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/branches.ll"), &BuildOptions::default()).unwrap();
        let vocabulary = crate::devmap::vocabulary_of(std::slice::from_ref(&graph));
        let input = GraphInput::new(&graph, &vocabulary).unwrap();
        let positives = [1u32, 2, 3];
        let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(1), positives: Some(&positives) }]).unwrap();
        let hyper = Hyper { steps: 4, state_dropout: 0.0, ..Hyper::spec(vocabulary.len()) };
        let second_moments = |clip: f64| {
            tch::manual_seed(5);
            let model = Ggnn::new(&hyper, tch::Device::Cpu);
            let prepared = Prepared::new(&batch, &hyper, tch::Device::Cpu);
            let mut opt = AdamW::new(&model.parameters(), 1e-3);
            until_step(&model, &mut opt, &prepared, 4, None, programl_model::Tape::Full, 1.0, 0.5, clip);
            let names: Vec<&str> = model.named_parameters().iter().map(|(n, _)| *n).collect();
            opt.named_state(&names)
                .iter()
                .filter(|(n, _)| n.starts_with("v."))
                .map(|(_, t)| t.sum(Kind::Double).double_value(&[]))
                .sum::<f64>()
        };
        let free = second_moments(0.0);
        let beta = free / second_moments(1e9); // a clip above the norm: unchanged
        assert!((beta - 1.0).abs() < 1e-9, "{beta}");
        let clipped = second_moments(1e-4);
        // (1 − β₂) ‖g‖² with ‖g‖ = 1e-4, β₂ = 0.999: 1e-11.
        assert!((clipped / 1e-11 - 1.0).abs() < 1e-3, "clipped second moments {clipped}");
        assert!(free > 1e3 * clipped, "the unclipped gradient is far larger: {free}");
    }
}
