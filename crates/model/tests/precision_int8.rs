//! `--dtype int8` (and the learned pass's default, `auto`, on CPUs with
//! AVX-512 VNNI): INT8 products are in effect on every CPU (the kernels'
//! INT8 step on its best path); the shipped bundles' probabilities on real IR
//! (a mean bundle's and a max bundle's) stay within INT8's
//! error of FP32's, with its decisions nearly all the same; and within
//! FP32 rounding of the same at any thread count. (The precision is set
//! for the whole process, so this file is its own test binary.)

use std::path::Path;

use programl::batch::{Batch, GraphInput, Sample};
use programl_model::bundle::Bundle;
use programl_model::{int8_preferred, node_probabilities, set_matmul_precision, Aggregation, Precision};
use tch::Device;

mod common;
use common::cpu_flags;

#[test]
fn int8_runs_on_every_cpu_and_stays_close_to_fp32() {
    assert_eq!("int8".parse::<Precision>(), Ok(Precision::Int8));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Reachability averages its messages; subexpressions takes their
    // channel-wise max (the INT8 step's other aggregation loop).
    for (task, aggregation) in [("reachability", Aggregation::Mean), ("subexpressions", Aggregation::Max)] {
        let bundle = Bundle::load(&root.join("models").join(task), Device::Cpu).expect("a shipped bundle");
        let steps = bundle.model.hyper().steps;
        // Real IR, every node a root (up to 60 per module), as one batch.
        let context = inkwell::context::Context::create();
        let inputs: Vec<GraphInput> = ["branches.ll", "calls.ll", "invoke.ll"]
            .iter()
            .map(|f| {
                let module = programl::ir::load_module(&context, &root.join("tests/data").join(f)).expect("a test module");
                let graph = programl::builder::build(&module, &Default::default());
                GraphInput::new(&graph, &bundle.vocabulary).expect("a built graph is a valid input")
            })
            .collect();
        let samples: Vec<Sample> = inputs
            .iter()
            .flat_map(|g| (0..g.node_count().min(60) as u32).map(move |r| Sample { graph: g, root: Some(r), positives: None }))
            .collect();
        let batch = Batch::from_samples(&samples).unwrap();
        assert!(batch.node_count() > 2000, "{task}: {} nodes", batch.node_count());

        tch::set_num_threads(1);
        assert_eq!(set_matmul_precision(Precision::F32), Ok(Precision::F32));
        let full = node_probabilities(&bundle.model, &batch, steps);
        let in_effect = set_matmul_precision(Precision::Int8).unwrap();
        let flags = cpu_flags();
        if cfg!(target_arch = "x86_64") && !flags.is_empty() {
            let vnni = ["avx512f", "avx512bw", "avx512vl", "avx512_vnni"].iter().all(|f| flags.iter().any(|x| x == f));
            assert_eq!(int8_preferred(), vnni, "INT8 is what auto picks exactly where the CPU has VNNI");
        }
        assert_eq!(in_effect, Precision::Int8);
        let reduced = node_probabilities(&bundle.model, &batch, steps);
        // (Two classes per node: the positive class's probability.)
        let positive = |p: &[f32]| p.iter().skip(1).step_by(2).copied().collect::<Vec<f32>>();
        let (a, b) = (positive(&full), positive(&reduced));
        let drift = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        let mean = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).sum::<f32>() / a.len() as f32;
        let flipped = a.iter().zip(&b).filter(|(x, y)| (**x > 0.5) != (**y > 0.5)).count();
        eprintln!(
            "{task}, precision {in_effect}: {} probabilities, max difference {drift}, mean {mean}, {flipped} decisions changed",
            a.len()
        );
        assert!(drift > 0.0 && drift < 0.1 && mean < 0.005, "{task}: INT8 against FP32: max {drift}, mean {mean}");
        assert!(flipped * 200 < a.len(), "{task}: INT8 changed {flipped} of {} decisions", a.len());
        for threads in [2, 3] {
            tch::set_num_threads(threads);
            // Within FP32 rounding: libtorch's own products around the step
            // (the readout) are not the same bits at every thread count on
            // every CPU (on an AVX2 AMD EPYC, FP32 alone moves 60 of 2,354
            // values at 2 threads); the INT8 step itself is (programl-infer's
            // tests, bit for bit).
            let other = node_probabilities(&bundle.model, &batch, steps);
            let d = other.iter().zip(&reduced).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(d < 1e-6, "{task}: INT8 at {threads} threads: {d} from one thread");
        }
        tch::set_num_threads(1);
        assert_eq!(set_matmul_precision(Precision::F32), Ok(Precision::F32));
        assert_eq!(node_probabilities(&bundle.model, &batch, steps), full, "{task}: back to FP32: the FP32 probabilities again");
        assert_eq!(bundle.model.hyper().aggregation, aggregation, "{task}'s aggregation");
    }
}
