//! The one training step and the one inference pass, shared by `train`,
//! `eval`, `predict` and `bench` (so `bench` measures what users run).

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
    tune_allocator();
    let g = model.loss_and_gradients(input, steps, true, pos_weight);
    opt.step_with(&model.parameters(), &g.grads);
    g.loss.double_value(&[])
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

/// Pooled results of an evaluation.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    pub examples: u64,
    pub total: Confusion,
    /// Per [`BUCKETS`] entry: examples and counts.
    pub buckets: [(u64, Confusion); 4],
    /// Mean cross-entropy over the batches' nodes (batch-weighted by nodes).
    pub loss: f64,
}

/// Evaluates examples `ids` (in order) at `steps`, in batches of at most
/// `max_nodes` nodes (a larger graph alone).
pub fn evaluate(model: &Ggnn, data: &Examples, ids: &[usize], steps: i64, max_nodes: usize, mut progress: impl FnMut(usize)) -> Evaluation {
    tune_allocator();
    let mut out = Evaluation::default();
    let mut loss_sum = 0.0;
    let mut nodes = 0usize;
    for range in programl::batch::plan(ids.iter().map(|&i| data.size(i)), max_nodes) {
        let chunk = &ids[range];
        let batch = data.batch(chunk);
        let input = Prepared::new(&batch, model.hyper(), model.device());
        let (probs, loss) = tch::no_grad(|| {
            let logits = model.forward_inference(&input, steps);
            let loss = logits.cross_entropy_for_logits(input.labels.as_ref().unwrap()).double_value(&[]);
            (logits.softmax(1, Kind::Float).select(1, 1).to_device(tch::Device::Cpu), loss)
        });
        loss_sum += loss * batch.node_count() as f64;
        nodes += batch.node_count();
        let probs: Vec<f32> = Vec::try_from(probs).expect("f32 probabilities");
        let labels = batch.labels().unwrap();
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
            out.examples += 1;
        }
        progress(chunk.len());
    }
    out.loss = if nodes > 0 { loss_sum / nodes as f64 } else { 0.0 };
    let _ = BUCKETS;
    out
}
