//! What one graph-level decision costs the torch-free inference, per
//! bundle and precision, side by side in one run: the graph head of each
//! bundle on real graphs, one graph per call on one thread, as the learned
//! pass runs it inside a compiler. Not a test: it prints figures
//! (docs/perf/models.md, "A wider state", records them with this command).
//! `PROGRAML_BENCH_DTYPES` (comma-separated, default `f32,int8,auto`)
//! narrows the precisions, e.g. to profile one; `PROGRAML_BENCH_ISA`
//! caps the kernel path (`avx2`: what an AVX2-only CPU runs).
//!
//! ```text
//! cargo bench -p programl-infer --bench graph_step
//! ```
//!
//! Graphs: the C sources of `examples/ddf` and `tests/data/conformance`
//! (or `PROGRAML_BENCH_SOURCES`, comma-separated paths relative to the
//! repository), compiled by clang 16 at `-O0` (POJ-104's level; or
//! `PROGRAML_BENCH_FLAGS`, space-separated). Bundles:
//! `PROGRAML_BENCH_MODELS` (comma-separated, default `models/poj104-O0`,
//! the 34-wide state trained at -O0, and `models/poj104`, the shipped
//! 66-wide one trained at every level). Per bundle: `dtype=f32` and
//! `dtype=int8` on the best kernel path the CPU runs (or the one
//! `PROGRAML_BENCH_ISA` caps it at), and `auto` (what the pass runs by
//! default); each
//! graph `PROGRAML_BENCH_REPS` times (default 15), interleaved, the
//! median per graph summed over the graphs. A graph head with auxiliary
//! inputs gets ones.
//!
//! Printed per row: the summed median milliseconds per pass over every
//! graph, nanoseconds per node and step, the precision and path that ran,
//! and the largest difference of any probability from the bundle's FP32
//! result.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use programl::batch::{Batch, GraphInput, Sample};
use programl_infer::{cpu, Dtype, Isa, Model, Options};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sources() -> Vec<PathBuf> {
    if let Ok(list) = std::env::var("PROGRAML_BENCH_SOURCES") {
        return list.split(',').filter(|s| !s.is_empty()).map(|s| root().join(s)).collect();
    }
    let mut out = Vec::new();
    for dir in ["examples/ddf", "tests/data/conformance"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| fail(&format!("{dir}: {e}")))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "c"))
            .collect();
        files.sort();
        out.extend(files);
    }
    out
}

fn graph_of(src: &Path, flags: &[String], dir: &Path) -> Option<programl::ProgramGraph> {
    let ll = dir.join(format!("{}.ll", src.file_stem()?.to_string_lossy()));
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    let ok = Command::new(clang).args(flags).args(["-S", "-emit-llvm", "-w"]).arg(src).arg("-o").arg(&ll).status().ok()?;
    if !ok.success() {
        eprintln!("graph_step: clang failed on {}, left out", src.display());
        return None;
    }
    programl::builder::build_file(&ll, &Default::default()).ok()
}

/// Bad input (a variable's value, a bundle): one line naming it, exit 2.
fn fail(message: &str) -> ! {
    eprintln!("graph_step: {message}");
    std::process::exit(2)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the
    // command line.
    let reps: usize = std::env::var("PROGRAML_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(15).max(1);
    let flags: Vec<String> =
        std::env::var("PROGRAML_BENCH_FLAGS").unwrap_or_else(|_| "-O0".into()).split_whitespace().map(String::from).collect();
    let models: Vec<String> = std::env::var("PROGRAML_BENCH_MODELS")
        .unwrap_or_else(|_| "models/poj104-O0,models/poj104".into())
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let dtypes: Vec<Dtype> = std::env::var("PROGRAML_BENCH_DTYPES")
        .unwrap_or_else(|_| "f32,int8,auto".into())
        .split(',')
        .map(|d| d.parse().unwrap_or_else(|e| fail(&format!("PROGRAML_BENCH_DTYPES: {e}"))))
        .collect();
    // A lower kernel path than the CPU's best (`isa=` in the pass), e.g.
    // `avx2` to see on an AVX-512 machine what an AVX2-only one runs.
    let isa: Option<Isa> =
        std::env::var("PROGRAML_BENCH_ISA").ok().map(|v| v.parse().unwrap_or_else(|e| fail(&format!("PROGRAML_BENCH_ISA: {e}"))));
    if let Some(isa) = isa {
        isa.check().unwrap_or_else(|e| fail(&format!("PROGRAML_BENCH_ISA: {e}")));
    }
    let tmp = std::env::temp_dir().join(format!("programl-graph-step-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let graphs: Vec<programl::ProgramGraph> = sources().iter().filter_map(|s| graph_of(s, &flags, &tmp)).collect();
    let _ = std::fs::remove_dir_all(&tmp);
    let nodes: usize = graphs.iter().map(|g| g.node_count()).sum();
    println!("CPU: {} (best path {})", cpu::model_name(), cpu::active());
    println!("{} graphs ({} nodes, clang {}), {} reps, 1 thread, one graph per call", graphs.len(), nodes, flags.join(" "), reps);
    println!(
        "{:<28} {:>6} {:>6} {:>10} {:>8} {:>10} {:>10} {:>9}",
        "bundle", "width", "dtype", "precision", "path", "ms/pass", "ns/node-step", "max |Δp|"
    );
    for dir in &models {
        let model = Model::open(&root().join(dir)).unwrap_or_else(|e| fail(&format!("PROGRAML_BENCH_MODELS: {dir}: {e}")));
        let width = model.config.hyper.hidden;
        let aux = model.config.hyper.graph.as_ref().map_or(0, |g| g.aux.len());
        let inputs: Vec<GraphInput> = graphs.iter().map(|g| GraphInput::new(g, &model.vocabulary).unwrap()).collect();
        let batches: Vec<Batch> =
            inputs.iter().map(|i| Batch::from_samples(&[Sample { graph: i, root: None, positives: None }]).unwrap()).collect();
        let ones = vec![1f32; aux];
        let run = |b: &Batch, dtype: Dtype| {
            let opts = Options { dtype, isa, ..Options::default() };
            model.graph_probabilities(b, (aux > 0).then_some(&ones[..]), &opts).unwrap_or_else(|e| panic!("{dir}: {e}"))
        };
        let reference: Vec<Vec<f32>> = batches.iter().map(|b| run(b, Dtype::F32).probabilities).collect();
        for &dtype in &dtypes {
            let mut per_graph = vec![Vec::with_capacity(reps); batches.len()];
            let (mut steps, mut diff, mut last) = (0i64, 0f32, None);
            for _ in 0..reps {
                for (i, b) in batches.iter().enumerate() {
                    let t = Instant::now();
                    let out = run(b, dtype);
                    per_graph[i].push(t.elapsed().as_secs_f64());
                    steps = out.steps;
                    for (a, r) in out.probabilities.iter().zip(&reference[i]) {
                        diff = diff.max((a - r).abs());
                    }
                    last = Some((out.precision, out.isa));
                }
            }
            let total: f64 = per_graph.into_iter().map(median).sum();
            let (precision, isa) = last.expect("one graph at least");
            let per_node_step = total * 1e9 / (nodes as f64 * steps.max(1) as f64);
            println!(
                "{:<28} {:>6} {:>6} {:>10} {:>8} {:>10.2} {:>10.0} {:>9.2e}",
                dir,
                width,
                dtype.to_string(),
                precision.to_string(),
                isa.to_string(),
                total * 1e3,
                per_node_step,
                diff
            );
        }
    }
}
