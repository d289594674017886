//! `programl-train bench`: training and inference speed on a seeded
//! synthetic batch, through the same [`crate::engine`] code as `train` and
//! `eval`.
//!
//! The shape (so other implementations can reproduce it): G =
//! max(1, ⌊batch_nodes / graph_nodes⌋) graphs of n = graph_nodes nodes;
//! per graph round(0.55n) control, round(1.15n) data and round(0.15n) call
//! edges with source and target uniform over the graph's own nodes and
//! positions uniform in {0, 1, 2, 3} (each also gives its backward edge);
//! exactly round(0.1n) root-selected nodes per graph; vocabulary ids uniform
//! over 2,231 rows. One node-step costs about 28 kFLOP (the 34→204 message
//! map and the GRU cell, 6,936 multiply-adds each).

use std::time::Instant;

use anyhow::Result;
use programl::batch::{Batch, GraphInput, Sample, SplitMix64};
use programl::graph::{Edge, Flow};
use programl::vocab::{Counts, Vocabulary};
use programl_model::{Ggnn, Hyper, Prepared};
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::engine::{infer, train_step, train_step_autograd, until_step};
use crate::optim::AdamW;

/// Embedding rows of the benchmark model (SPEC.md §3: 87,070 parameters).
pub const VOCAB_ROWS: usize = 2231;
/// FLOPs of one node-step (2 × 13,872 multiply-adds).
pub const FLOP_PER_NODE_STEP: f64 = 28e3;

pub struct Shape {
    pub batch_nodes: usize,
    pub graph_nodes: usize,
    pub seed: u64,
}

fn round(x: f64) -> usize {
    x.round() as usize
}

/// The synthetic batch, and the forward edge count.
pub fn synthetic_batch(shape: &Shape) -> (Batch, Vec<i64>, usize) {
    let vocab = bench_vocabulary();
    let n = shape.graph_nodes.max(1);
    let graphs = (shape.batch_nodes / n).max(1);
    let mut rng = SplitMix64::new(shape.seed);
    let texts: Vec<String> = (0..VOCAB_ROWS).map(bench_text).collect();
    let mut inputs = Vec::new();
    let mut selector = Vec::with_capacity(graphs * n);
    let mut edges_total = 0;
    for _ in 0..graphs {
        let nodes: Vec<&str> = (0..n).map(|_| texts[rng.below(VOCAB_ROWS as u64) as usize].as_str()).collect();
        let mut edges = Vec::new();
        for (flow, share) in [(Flow::Control, 0.55), (Flow::Data, 1.15), (Flow::Call, 0.15)] {
            for _ in 0..round(share * n as f64) {
                let s = rng.below(n as u64) as u32;
                let t = rng.below(n as u64) as u32;
                edges.push((s, t, Edge { flow, position: rng.below(4) as u32 }));
            }
        }
        edges_total += edges.len();
        inputs.push(GraphInput::from_parts(nodes, edges, &vocab).expect("synthetic edges are in range"));
        // Exactly round(0.1 n) distinct roots: the first of a shuffle.
        let roots = round(0.1 * n as f64);
        let order = programl::batch::permutation(n, rng.next_u64());
        let mut sel = vec![0i64; n];
        for &r in &order[..roots.min(n)] {
            sel[r] = 1;
        }
        selector.extend(sel);
    }
    let labels: Vec<Vec<u32>> = inputs.iter().map(|g| (0..g.node_count() as u32).filter(|_| rng.below(10) == 0).collect()).collect();
    let samples: Vec<Sample<'_>> =
        inputs.iter().zip(&labels).map(|(g, l)| Sample { graph: g, root: Some(0), positives: Some(l) }).collect();
    (Batch::from_samples(&samples).expect("synthetic samples"), selector, edges_total)
}

fn bench_text(id: usize) -> String {
    // Id 0 stands for the unknown row: a text outside the vocabulary.
    if id == 0 {
        "unknown text".into()
    } else {
        format!("t{id:04}")
    }
}

/// 2,230 texts whose ids are 1..=2230 (descending counts fix the order).
fn bench_vocabulary() -> Vocabulary {
    let mut counts = Counts::default();
    for id in 1..VOCAB_ROWS {
        counts.texts.insert(bench_text(id), (VOCAB_ROWS - id) as u64 + 1);
    }
    counts.total = counts.texts.values().sum();
    Vocabulary::from_counts(&counts, 1, None)
}

#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub mode: String,
    pub steps: i64,
    pub threads: i32,
    pub dtype: String,
    pub device: String,
    /// What ran the model: `libtorch`, or `programl-infer (ISA)`, the
    /// torch-free inference on the CPU.
    pub engine: String,
    pub batch_nodes: usize,
    pub edges: usize,
    pub median_s: f64,
    pub nodes_per_s: f64,
    pub graphs_per_s: f64,
    pub gflops: f64,
    pub matmul_gflops: f64,
    pub peak_rss_mb: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median rate of the message map's matmul shape (\[N, 34\] × \[34, 204\]).
pub fn matmul_gflops(nodes: usize, device: Device, kind: Kind) -> f64 {
    let x = Tensor::randn([nodes as i64, 34], (kind, device));
    let w = Tensor::randn([34, 204], (kind, device));
    let reps = 20;
    let _ = x.matmul(&w);
    let times: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                let _ = x.matmul(&w);
            }
            if let Device::Cuda(_) = device {
                tch::Cuda::synchronize(0);
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    2.0 * nodes as f64 * 34.0 * 204.0 / median(times) / 1e9
}

/// The bench model's weights as the torch-free inference's model: what
/// eval, predict and the learned pass run on the CPU.
fn torch_free(model: &Ggnn, hyper: &Hyper) -> Result<programl_infer::Model> {
    use programl_infer::bundle::{Config, Head, Provenance, FORMAT, VERSION};
    let tensors = model
        .named_tensors()
        .into_iter()
        .map(|(name, t)| {
            let values: Vec<f32> = Vec::try_from(t.to_device(Device::Cpu).contiguous().view([-1])).expect("f32 weights");
            (name.to_string(), (t.size(), values))
        })
        .collect();
    let weights = programl_infer::weights::Weights::from_tensors(std::path::Path::new("<bench model>"), hyper, tensors)?;
    let provenance = Provenance {
        graph_mode: "paper".into(),
        llvm_major: 16,
        opaque_pointers: true,
        featurisation_version: programl::batch::LAYOUT_VERSION,
        training_data_hash: String::new(),
        examples_seen: 0,
        wall_time_s: 0.0,
        dtype: "f32".into(),
        created_by: "programl-train bench".into(),
        corpus: Vec::new(),
    };
    let config = Config {
        format: FORMAT.into(),
        version: VERSION,
        task: "bench".into(),
        head: Head::Node,
        classes: vec!["negative".into(), "positive".into()],
        hyper: hyper.clone(),
        provenance,
        source: None,
        auto_dtype: None,
    };
    let vocabulary = programl::vocab::Vocabulary::from_counts(&Default::default(), 1, None);
    Ok(programl_infer::Model::from_parts(config, vocabulary, weights, "<bench model>".into()))
}

/// Runs one mode: `train` (one training step per iteration) or `infer`.
///
/// `autograd`: train through autograd's backward instead of the
/// hand-written one (to compare the two; `train` uses the hand-written one).
/// `tape`: the hand-written backward's record of the unroll (`train
/// --tape-segment`); a checkpointed one trains without state dropout, so
/// compare it with a segment of T steps, which recomputes nothing.
/// `cpu`: inference runs the torch-free inference with these options
/// (what eval, predict and the learned pass run on the CPU); `None`, the
/// libtorch model's.
#[allow(clippy::too_many_arguments)]
pub fn run_mode(
    shape: &Shape,
    mode: &str,
    steps: i64,
    iters: usize,
    warmup: usize,
    device: Device,
    autograd: bool,
    tape: programl_model::Tape,
    cpu: Option<programl_infer::Options>,
) -> Result<Figures> {
    let (batch, selector, edges) = synthetic_batch(shape);
    let mut hyper = Hyper { steps, ..Hyper::spec(VOCAB_ROWS) };
    if tape != programl_model::Tape::Full {
        // A checkpointed tape refuses dropout (a recomputed segment would
        // draw new masks); a segment of T steps is the full tape's cost.
        hyper.state_dropout = 0.0;
    }
    tch::manual_seed(shape.seed as i64);
    let model = Ggnn::new(&hyper, device);
    assert_eq!(hyper.parameter_count(), 87_070);
    let mut prepared = Prepared::new(&batch, &hyper, device);
    prepared.selector = Tensor::from_slice(&selector).to_device(device);
    let mut opt = AdamW::new(&model.parameters(), 2.5e-4);
    let cpu = cpu.filter(|_| mode == "infer" && device == Device::Cpu);
    let torch_free_model = cpu.as_ref().map(|_| torch_free(&model, &hyper)).transpose()?;
    let mut in_effect: Option<(String, String)> = None;
    let mut times = Vec::new();
    for i in 0..warmup + iters {
        let t = Instant::now();
        match mode {
            "train" if autograd => {
                let _ = train_step_autograd(&model, &mut opt, &prepared, steps);
            }
            "train" if tape != programl_model::Tape::Full => {
                let _ = until_step(&model, &mut opt, &prepared, steps, None, tape, 1.0, 0.0, 0.0);
            }
            "train" => {
                let _ = train_step(&model, &mut opt, &prepared, steps, 1.0);
            }
            "infer" => match (&torch_free_model, &cpu) {
                (Some(m), Some(o)) => {
                    let (_, precision, isa, _) =
                        m.node_logits_with(&batch, Some(&selector), &programl_infer::Options { steps: Some(steps), ..o.clone() });
                    in_effect = Some((precision.to_string(), format!("programl-infer ({isa})")));
                }
                _ => {
                    let _ = infer(&model, &prepared, steps);
                }
            },
            _ => anyhow::bail!("mode '{mode}': expected train or infer"),
        }
        if let Device::Cuda(_) = device {
            tch::Cuda::synchronize(0);
        }
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    let m = median(times);
    let nodes = batch.node_count();
    let factor = if mode == "train" { 3.0 } else { 1.0 };
    Ok(Figures {
        mode: mode.into(),
        steps,
        threads: cpu.as_ref().map_or(tch::get_num_threads(), |o| o.threads as i32),
        dtype: in_effect.as_ref().map_or_else(|| programl_model::matmul_precision().to_string(), |(p, _)| p.clone()),
        engine: in_effect.map_or_else(|| "libtorch".to_string(), |(_, e)| e),
        device: programl_model::device_name(device),
        batch_nodes: nodes,
        edges,
        median_s: m,
        nodes_per_s: nodes as f64 / m,
        graphs_per_s: batch.graph_count() as f64 / m,
        gflops: FLOP_PER_NODE_STEP * nodes as f64 * steps as f64 * factor / m / 1e9,
        // The reference product in the precision the model's products use
        // (INT8: FP32's; libtorch has no INT8 product of this shape).
        matmul_gflops: matmul_gflops(
            nodes,
            device,
            if programl_model::matmul_precision() == programl_model::Precision::Bf16 { Kind::BFloat16 } else { Kind::Float },
        ),
        peak_rss_mb: programl_dataset::build::peak_rss_kib().unwrap_or(0) as f64 / 1024.0,
    })
}

/// The CPU's model name, whether it has BF16 instructions, and its INT8
/// path (`vnni`: AVX-512 VNNI, INT8 the default; `avx2`, `portable`).
pub fn cpu_summary() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = programl_infer::cpu::model_name();
    let flags: Vec<&str> = info.lines().find_map(|l| l.strip_prefix("flags")).unwrap_or("").split_whitespace().collect();
    let bf16: Vec<&str> = ["avx512_bf16", "amx_bf16"].into_iter().filter(|f| flags.contains(&f.trim_start_matches(':'))).collect();
    let vnni = programl_infer::int8_path();
    format!("{model}; BF16: {}; INT8: {vnni}", if bf16.is_empty() { "none".to_string() } else { bf16.join(", ") })
}
