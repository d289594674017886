//! The first inference in a fresh process against the later ones, with the
//! page faults each takes: what the learned pass pays per module inside a
//! compiler (whose allocator is not tuned), without the compiler.
//!
//! ```text
//! cargo build --release -p programl-model --example first_call
//! target/release/examples/first_call BUNDLE FILE.ll [WARM_UP_NODES=2] [CALLS=4]
//! PROGRAML_DTYPE=bf16 target/release/examples/first_call ...   # BF16 products
//! ```
//!
//! Opens the bundle on the CPU at 1 thread (the runtime's default), warms up
//! on a chain of `WARM_UP_NODES` nodes as the runtime does on opening a
//! bundle, then times `CALLS` predictions on the module's graph (root: node
//! 0; graph-level bundles with all auxiliary inputs 1).

use std::time::Instant;

use programl::batch::{Batch, EdgeArrays, GraphInput, Sample};
use programl_model::bundle::{Bundle, Head};
use tch::Device;

/// Minor page faults of this process so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after_name = &stat[stat.rfind(')').expect("a process name") + 2..];
    after_name.split(' ').nth(7).and_then(|f| f.parse().ok()).expect("minflt")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: first_call BUNDLE FILE.ll [WARM_UP_NODES=2] [CALLS=4]");
        std::process::exit(2);
    }
    let warm: i64 = args.get(3).map_or(2, |s| s.parse().expect("WARM_UP_NODES"));
    let calls: usize = args.get(4).map_or(4, |s| s.parse().expect("CALLS"));
    tch::set_num_threads(1);
    if let Ok(dtype) = std::env::var("PROGRAML_DTYPE") {
        let wanted = dtype.parse().expect("PROGRAML_DTYPE: f32 or bf16");
        let got = programl_model::set_matmul_precision(wanted).expect("matmul precision");
        eprintln!("dtype: {got}");
    }
    let t = Instant::now();
    let bundle = Bundle::load(args[1].as_ref(), Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", args[1]));
    eprintln!("bundle open: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, args[2].as_ref()).unwrap_or_else(|e| panic!("{}: {e}", args[2]));
    let graph = programl::builder::build(&module, &Default::default());
    let input = GraphInput::new(&graph, &bundle.vocabulary).expect("a built graph is a valid input");
    let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(0), positives: None }]).expect("one sample");
    let steps = bundle.model.hyper().steps;
    let predict = |b: &Batch| match bundle.config.head {
        Head::Node => programl_model::node_probabilities(&bundle.model, b, steps),
        Head::Graph => {
            let aux = vec![1.0; bundle.model.hyper().aux_inputs() as usize];
            programl_model::graph_probabilities(&bundle.model, b, Some(&aux), steps)
        }
    };
    let chain = |n: i64| (0..n - 1).collect::<Vec<i64>>();
    let (sources, targets, positions) = (chain(warm), (1..warm).collect::<Vec<i64>>(), vec![0; (warm - 1) as usize]);
    let edges = EdgeArrays { sources: &sources, targets: &targets, positions: &positions };
    let none = EdgeArrays { sources: &[], targets: &[], positions: &[] };
    let mut selector = vec![0; warm as usize];
    selector[0] = 1;
    let warm_up = Batch::from_arrays(&vec![0; warm as usize], &selector, &[0, warm], [edges, edges, none]).expect("a chain");
    let t = Instant::now();
    predict(&warm_up);
    eprintln!("warm-up on {warm} nodes: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    for call in 0..calls {
        let faults = minor_faults();
        let t = Instant::now();
        predict(&batch);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        eprintln!("call {call}: {} nodes, T = {steps}: {ms:.2} ms, {} page faults", batch.node_count(), minor_faults() - faults);
    }
}
