//! `programl_rs._core`: the Rust half of the `programl_rs` Python package.
//!
//! Thin bindings over the torch-free crates: the core (graph building,
//! formats, analyses, the model input the trainer and the pass share), the
//! dataset store, and `programl-infer` (the pass's CPU inference). The
//! Python half (`python/programl_rs/__init__.py`) adds what is plain Python:
//! clang, networkx, PyTorch Geometric, the `Dataset` class.
//!
//! Every entry point returns a Python exception naming its input on bad
//! input; the heavy ones (building, analysing, predicting, reading a store)
//! release the GIL, so threads build graphs in parallel.

use std::path::PathBuf;

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyPermissionError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use programl::analysis::{labelled_nodes, Analyzer, Task};
use programl::batch::{Batch, Batcher, EdgeType, GraphInput, Sample};
use programl::builder::{build, BuildOptions, Mode};
use programl::format::{read_graph, read_graph_list, write_graph, write_graph_list, Format};
use programl::graph::{NodeKind, ProgramGraph};
use programl::vocab::{VocabError, Vocabulary};
use programl_dataset::read::Dataset;
use programl_dataset::{Split, Subset};
use programl_infer::bundle::Head;
use programl_infer::config::positive_class;
use programl_infer::{Dtype, Model, Options};

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// An I/O failure on `path` as the `OSError` subclass Python would raise
/// for it (`FileNotFoundError`, `PermissionError`), with its `errno`,
/// `strerror` (`what` and the cause) and `filename`, as `open()` gives.
fn os_error(source: &std::io::Error, path: &std::path::Path, what: &str) -> PyErr {
    let cause = source.to_string();
    let cause = cause.split(" (os error").next().unwrap_or(&cause);
    let strerror = format!("cannot read {what}: {cause}");
    let filename = path.display().to_string();
    let Some(code) = source.raw_os_error() else {
        return PyOSError::new_err(format!("{filename}: {strerror}"));
    };
    let args = (code, strerror, filename);
    match source.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(args),
        std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(args),
        _ => PyOSError::new_err(args),
    }
}

/// A vocabulary that cannot be read is an `OSError`; one that reads but is
/// not a vocabulary, a `ValueError`.
fn vocab_error(e: VocabError) -> PyErr {
    match &e {
        VocabError::Io { source, path } => os_error(source, path, "the vocabulary"),
        _ => value_error(e),
    }
}

fn parse_mode(mode: &str) -> PyResult<Mode> {
    Mode::parse(mode).ok_or_else(|| value_error(format!("mode '{mode}': expected 'paper', 'model' or 'programl-0.3'")))
}

fn parse_task(task: &str) -> PyResult<Task> {
    Task::parse(task).ok_or_else(|| {
        value_error(format!("task '{task}': expected one of {}", Task::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")))
    })
}

fn parse_format(format: &str) -> PyResult<Format> {
    Format::parse(format).ok_or_else(|| value_error(format!("format '{format}': expected pb, pbtxt, json or dot")))
}

/// A ProGraML program graph (immutable).
#[pyclass(frozen, module = "programl_rs._core", name = "ProgramGraph")]
pub struct Graph {
    pub graph: ProgramGraph,
}

#[pymethods]
impl Graph {
    /// The number of nodes, `[external]` (node 0) included.
    #[getter]
    fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    /// The number of edges (control, data and call).
    #[getter]
    fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    /// Per node: `(type, text, full_text, function, block)`; type is
    /// `instruction`, `variable` or `constant`, function a name or `None`.
    fn nodes(&self) -> Vec<(&'static str, String, Option<String>, Option<String>, u32)> {
        let g = &self.graph;
        g.graph
            .node_weights()
            .map(|n| {
                let function = n.function.and_then(|f| g.functions.get(f as usize)).map(|f| f.name.clone());
                (n.kind.name(), n.text.clone(), n.full_text.clone(), function, n.block)
            })
            .collect()
    }

    /// Per edge, in the graph's edge order: `(source, target, flow, position)`.
    fn edges(&self) -> Vec<(u32, u32, &'static str, u32)> {
        use petgraph::visit::EdgeRef;
        self.graph
            .graph
            .edge_references()
            .map(|e| (e.source().index() as u32, e.target().index() as u32, e.weight().flow.name(), e.weight().position))
            .collect()
    }

    /// The functions' names, in order.
    fn functions(&self) -> Vec<String> {
        self.graph.functions.iter().map(|f| f.name.clone()).collect()
    }

    /// The graph device mapping decides `kernel` on, as the learned pass
    /// and `programl-train predict` do: in a module of several kernels
    /// (`kernels`, every kernel's name), the kernel and what it calls, the
    /// other kernels left out; in a module of one, the whole graph.
    fn kernel_graph(&self, kernel: &str, kernels: Vec<String>) -> PyResult<Graph> {
        let g = &self.graph;
        // Every name given is a function of the graph: a misspelt kernel
        // would otherwise stay in another kernel's graph unsaid.
        if let Some(missing) =
            std::iter::once(kernel).chain(kernels.iter().map(String::as_str)).find(|n| !g.functions.iter().any(|f| f.name == *n))
        {
            let names: Vec<&str> = g.functions.iter().map(|f| f.name.as_str()).collect();
            return Err(value_error(format!("no function '{missing}' in the graph; its functions: {}", names.join(", "))));
        }
        Ok(Graph { graph: g.kernel_subgraph(kernel, &kernels).expect("checked above") })
    }

    /// The graph in `format`: `pb` (ProGraML protobuf, upstream's tools read
    /// it), `pbtxt`, `json` (networkx node-link) or `dot`.
    #[pyo3(signature = (format = "pb"))]
    fn to_bytes<'py>(&self, py: Python<'py>, format: &str) -> PyResult<Bound<'py, PyBytes>> {
        let format = parse_format(format)?;
        let out = py.detach(|| -> std::io::Result<Vec<u8>> {
            let mut out = Vec::new();
            write_graph(&self.graph, format, &mut out)?;
            Ok(out)
        });
        Ok(PyBytes::new(py, &out.map_err(value_error)?))
    }

    /// A graph from `to_bytes`'s output (or upstream's files); DOT is
    /// write-only.
    #[staticmethod]
    #[pyo3(signature = (data, format = "pb"))]
    fn from_bytes(py: Python<'_>, data: Vec<u8>, format: &str) -> PyResult<Graph> {
        let format = parse_format(format)?;
        let graph = py.detach(|| read_graph(&data, format)).map_err(|e| value_error(format!("not a {format} graph: {e}")))?;
        Ok(Graph { graph })
    }

    /// Pickling (process pools, multiprocessing data loaders): the graph
    /// travels as its `pb` bytes, which hold all of it.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>, &'static str))> {
        let py = slf.py();
        let bytes = slf.get().to_bytes(py, "pb")?;
        Ok((slf.get_type().getattr("from_bytes")?, (bytes, "pb")))
    }

    /// Graphs are equal when they are the same graph (`ProgramGraph`'s
    /// equality: nodes, edges, functions and modules, in order).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Graph>().is_ok_and(|other| other.get().graph == self.graph)
    }

    /// Equal graphs hash alike (graphs are immutable).
    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.graph.hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        let [i, v, c, _] = self.graph.node_counts();
        let [ctl, data, call, _] = self.graph.edge_counts();
        format!(
            "ProgramGraph({} nodes: {i} instructions, {v} variables, {c} constants; {} edges: {ctl} control, {data} data, {call} call)",
            self.graph.node_count(),
            self.graph.edge_count()
        )
    }
}

/// The build options of a `mode=`: a graph mode, or "model", the graphs the
/// models see (paper mode, debug intrinsics left out).
fn build_options(mode: &str) -> PyResult<BuildOptions> {
    if mode == "model" {
        return Ok(BuildOptions::MODEL);
    }
    Ok(BuildOptions { mode: parse_mode(mode)?, ..Default::default() })
}

/// Checks a `mode=` as `build_ir` reads it, before any work (a compile),
/// raising `ValueError` naming it.
#[pyfunction]
fn check_mode(mode: &str) -> PyResult<()> {
    build_options(mode).map(|_| ())
}

/// Builds the graph of IR text or bitcode held in `data`; `name` names it in
/// errors. Releases the GIL.
#[pyfunction]
#[pyo3(signature = (data, name, mode = "paper"))]
fn build_ir(py: Python<'_>, data: Vec<u8>, name: String, mode: &str) -> PyResult<Graph> {
    let options = build_options(mode)?;
    let graph = py.detach(move || -> Result<ProgramGraph, String> {
        let context = inkwell::context::Context::create();
        let module = programl::ir::parse_module(&context, &data, &name).map_err(|e| e.to_string())?;
        Ok(build(&module, &options))
    });
    graph.map(|graph| Graph { graph }).map_err(value_error)
}

/// A node id given from Python, checked (a negative one is a mistake, not
/// an `OverflowError` that names no argument).
fn node_id(n: i64, what: &str) -> PyResult<u32> {
    u32::try_from(n).map_err(|_| value_error(format!("{what}: {n} is not a node id")))
}

/// `programl analyze`: for each root (default: the sampled roots that
/// `programl dataset build` labels), `{"task", "root", "steps",
/// "positives"}`.
#[pyfunction]
#[pyo3(signature = (graph, task, root = None, seed = None))]
fn analyze<'py>(
    py: Python<'py>,
    graph: &Graph,
    task: &str,
    root: Option<i64>,
    seed: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    // PyO3's own OverflowError or TypeError would not name the argument.
    let seed: u64 = match seed.map_or(Ok(0), |s| s.extract()) {
        Ok(s) => s,
        Err(_) if seed.is_some_and(|s| s.is_instance_of::<pyo3::types::PyInt>()) => {
            return Err(value_error(format!(
                "seed: {}; a whole number from 0 to 2**64 - 1",
                seed.map(|s| s.to_string()).unwrap_or_default()
            )))
        }
        Err(_) => {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "seed: an int, got {}",
                seed.and_then(|s| s.get_type().name().ok()).map(|n| n.to_string()).unwrap_or_default()
            )))
        }
    };
    let task = parse_task(task)?;
    let root = root.map(|r| node_id(r, "root")).transpose()?;
    let results = py.detach(|| -> Result<Vec<(u32, u32, Vec<u32>)>, String> {
        let mut analyzer = Analyzer::new(&graph.graph);
        let roots = match root {
            Some(r) => vec![r],
            None => analyzer.sampled_roots(task, seed),
        };
        roots
            .into_iter()
            .map(|r| analyzer.analyze(task, r).map(|l| (r, l.steps, l.positives)).map_err(|e| format!("root {r}: {e}")))
            .collect()
    });
    let results = results.map_err(value_error)?;
    results
        .into_iter()
        .map(|(r, steps, positives)| {
            let d = PyDict::new(py);
            d.set_item("task", task.name())?;
            d.set_item("root", r)?;
            d.set_item("steps", steps)?;
            d.set_item("positives", positives)?;
            Ok(d)
        })
        .collect()
}

/// A model bundle opened by the torch-free inference (what the learned
/// pass runs on the CPU).
#[pyclass(frozen, module = "programl_rs._core", name = "Bundle")]
pub struct Bundle {
    model: Model,
}

/// The pass's batch size in nodes (passes/src/infer: `BATCH_NODES`).
const BATCH_NODES: usize = 10_000;

#[pymethods]
impl Bundle {
    #[new]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Bundle> {
        let model = py.detach(|| Model::open(&path)).map_err(|e| match e {
            programl_infer::bundle::BundleError::Io { ref source, ref path } => os_error(source, path, "the bundle"),
            programl_infer::bundle::BundleError::Vocabulary { source, .. } => vocab_error(source),
            _ => value_error(e),
        })?;
        Ok(Bundle { model })
    }

    /// The task the bundle was trained for (`reachability`, `devmap`,
    /// `poj104`, ...).
    #[getter]
    fn task(&self) -> String {
        self.model.config.task.clone()
    }

    /// `node` (per-node probabilities for a root) or `graph` (one class per
    /// graph).
    #[getter]
    fn head(&self) -> &'static str {
        if self.model.config.head == Head::Graph {
            "graph"
        } else {
            "node"
        }
    }

    /// The class names, in the order of `predict`'s probabilities.
    #[getter]
    fn classes(&self) -> Vec<String> {
        self.model.config.classes.clone()
    }

    /// The message-passing steps `predict` runs by default (T).
    #[getter]
    fn steps(&self) -> i64 {
        self.model.config.hyper.steps
    }

    /// The auxiliary inputs a graph head needs (device mapping: transfer and
    /// work-group size), in order.
    #[getter]
    fn aux(&self) -> Vec<String> {
        self.model.config.hyper.graph.as_ref().map_or_else(Vec::new, |g| g.aux.clone())
    }

    /// Node head: `{root: [p(node) for every node]}`, the positive class's
    /// probability, for `roots` (default: the sampled roots, as the pass).
    /// Graph head: the class probabilities, `[p(class) for class in
    /// classes]`, with `aux` values where the head has auxiliary inputs.
    #[pyo3(signature = (graph, roots = None, aux = None, dtype = "auto", threads = 1, steps = None))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        graph: &Graph,
        roots: Option<Vec<i64>>,
        aux: Option<Vec<Bound<'py, PyAny>>>,
        dtype: &str,
        threads: i64,
        steps: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let dtype: Dtype = dtype.parse().map_err(value_error)?;
        // Each value named by its place (PyO3 said "must be real number,
        // not str" without saying where).
        let aux: Option<Vec<f32>> = aux
            .map(|values| {
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.extract::<f32>().map_err(|_| {
                            pyo3::exceptions::PyTypeError::new_err(format!(
                                "aux[{i}]: a number, got {} ({})",
                                v.get_type().name().map(|n| n.to_string()).unwrap_or_default(),
                                v.repr().map(|r| r.to_string()).unwrap_or_default()
                            ))
                        })
                    })
                    .collect::<PyResult<Vec<f32>>>()
            })
            .transpose()?;
        let roots = roots.map(|r| r.into_iter().map(|n| node_id(n, "roots")).collect::<PyResult<Vec<u32>>>()).transpose()?;
        let threads =
            usize::try_from(threads).ok().filter(|&t| t >= 1).ok_or_else(|| value_error(format!("threads: {threads}; at least 1")))?;
        let model = &self.model;
        // An argument the head does not read is a mistake, not a no-op.
        match (&model.config.head, &roots, &aux) {
            (Head::Graph, Some(_), _) => {
                return Err(value_error(format!(
                    "roots: {} has a graph head (one prediction a graph); roots are for node heads",
                    model.dir.display()
                )))
            }
            (Head::Node, _, Some(_)) => {
                return Err(value_error(format!("aux: {} has a node head, which takes no auxiliary inputs", model.dir.display())))
            }
            _ => {}
        }
        // The pass's and programl-train's bound: a million steps would run
        // for hours, with the GIL released and Ctrl-C unheard.
        if let Some(s) = steps.filter(|s| !(1..=programl_infer::bundle::MAX_STEPS).contains(s)) {
            return Err(value_error(format!("steps: {s}; message-passing steps are 1 to {}", programl_infer::bundle::MAX_STEPS)));
        }
        if let (Some(head), Some(values)) = (model.config.hyper.graph.as_ref(), &aux) {
            if head.aux.is_empty() {
                return Err(value_error(format!("aux: {} has a graph head without auxiliary inputs; pass none", model.dir.display())));
            }
            if let Some(v) = values.iter().find(|v| !v.is_finite() || **v < 0.0) {
                return Err(value_error(format!("aux: {v}; the auxiliary inputs ({}) are finite and not negative", head.aux.join(", "))));
            }
        }
        // More threads than the machine has only adds contention.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let opts = Options { steps, threads: threads.clamp(1, cores), dtype, isa: None };
        let input =
            py.detach(|| GraphInput::new(&graph.graph, &model.vocabulary)).map_err(|e| value_error(format!("not model input: {e}")))?;
        if model.config.head == Head::Graph {
            if !graph.graph.has_code() {
                return Err(value_error("the graph holds no code (no function is defined): nothing to classify, as the pass says"));
            }
            let probs = py.detach(|| -> Result<Vec<f32>, String> {
                let batch = Batch::from_samples(&[Sample { graph: &input, root: None, positives: None }]).map_err(|e| e.to_string())?;
                Ok(model.graph_probabilities(&batch, aux.as_deref(), &opts)?.probabilities)
            });
            return Ok(probs.map_err(value_error)?.into_pyobject(py)?.into_any());
        }
        let classes = model.classes();
        let positive = positive_class(&model.config.classes)
            .ok_or_else(|| value_error(format!("{}: classes {:?} have no positive class", model.dir.display(), model.config.classes)))?;
        let results = py.detach(|| -> Result<Vec<(u32, Vec<f32>)>, String> {
            let task =
                Task::parse(&model.config.task).ok_or_else(|| format!("bundle task '{}' is not a DeepDataFlow task", model.config.task))?;
            let mut analyzer = Analyzer::new(&graph.graph);
            let roots = match roots {
                // The roots `analyze` takes: datadep's are variables, the
                // other tasks' instructions of a function body.
                Some(r) => {
                    let flow = analyzer.flow();
                    let nodes = flow.node_count();
                    if let Some(&bad) = r.iter().find(|&&n| n as usize >= nodes) {
                        return Err(format!("roots: no node {bad}; the graph has {nodes}"));
                    }
                    if let Some(bad) =
                        r.iter().find(|&&n| if task == Task::DataDep { n == 0 || !flow.is_variable(n) } else { !flow.is_instruction(n) })
                    {
                        let kind = if task == Task::DataDep { "variables" } else { "instructions of a function body" };
                        return Err(format!("roots: node {bad} is not a {task} root; its roots are {kind}"));
                    }
                    // Dominance's roots are also reachable from their
                    // function's entry (`analyze` refuses the others).
                    if task == Task::Dominance {
                        let eligible = analyzer.eligible_roots(task);
                        if let Some(bad) = r.iter().find(|n| eligible.binary_search(n).is_err()) {
                            return Err(format!(
                                "roots: node {bad} is not a dominance root; it is not reachable from its function's entry"
                            ));
                        }
                    }
                    r
                }
                None => analyzer.sampled_roots(task, 0),
            };
            let mut out = Vec::with_capacity(roots.len());
            let mut batcher = Batcher::new(BATCH_NODES);
            let mut pending: Vec<u32> = Vec::new();
            let flush = |batch: Batch, pending: &mut Vec<u32>, out: &mut Vec<(u32, Vec<f32>)>| -> Result<(), String> {
                let probs = model.node_probabilities(&batch, &opts)?.probabilities;
                for (g, &root) in pending.iter().enumerate() {
                    let nodes = batch.graph_nodes(g);
                    out.push((root, nodes.map(|v| probs[v * classes + positive]).collect()));
                }
                pending.clear();
                Ok(())
            };
            for root in roots {
                let closed = batcher.push(Sample { graph: &input, root: Some(root), positives: None }).map_err(|e| e.to_string())?;
                if let Some(batch) = closed {
                    flush(batch, &mut pending, &mut out)?;
                }
                pending.push(root);
            }
            if let Some(batch) = batcher.finish() {
                flush(batch, &mut pending, &mut out)?;
            }
            Ok(out)
        });
        let d = PyDict::new(py);
        for (root, p) in results.map_err(value_error)? {
            d.set_item(root, p)?;
        }
        Ok(d.into_any())
    }

    fn __repr__(&self) -> String {
        format!("Bundle({}: task {}, {} head, classes {:?})", self.model.dir.display(), self.task(), self.head(), self.model.config.classes)
    }
}

/// One graph of a store as model input: the vocabulary ids, the forward
/// edges per flow, and the nodes that carry labels for the task.
/// Each list packed as little-endian 32-bit integers (`bytes` in Python):
/// 4 bytes a value where a list of Python ints costs 8 to 36, so that a
/// whole split fits in memory (docs/user/python.md, "The DeepDataFlow
/// store").
type StoredInput = (Packed, [(Packed, Packed, Packed); 3], Packed);
/// A `Cow` because pyo3 gives a `Vec<u8>` to Python as a list of ints and a
/// `Cow<[u8]>` as `bytes`.
type Packed = std::borrow::Cow<'static, [u8]>;

/// `values` as little-endian i32s; `what` names a value out of range.
fn pack<T: Copy + TryInto<i32> + std::fmt::Display>(values: &[T], what: &str) -> Result<Packed, String> {
    let mut out = Vec::with_capacity(values.len() * 4);
    for &v in values {
        let v: i32 = v.try_into().map_err(|_| format!("{what}: {v} does not fit 32 bits"))?;
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(Packed::Owned(out))
}

fn parse_store_names(task: &str, split: &str, subset: &str) -> PyResult<(Task, Split, Subset)> {
    let task = parse_task(task)?;
    let split = Split::parse(split).ok_or_else(|| value_error(format!("split '{split}': expected train, val or test")))?;
    let subset = Subset::parse(subset).ok_or_else(|| value_error(format!("subset '{subset}': expected ddf-30, ddf-60, ddf-200 or ddf")))?;
    Ok((task, split, subset))
}

/// Checks a store's task, split and subset names as `read_store` reads
/// them (before any work), raising `ValueError` naming the bad one.
#[pyfunction]
fn check_store_names(task: &str, split: &str, subset: &str) -> PyResult<()> {
    parse_store_names(task, split, subset).map(|_| ())
}

/// Reads a DeepDataFlow store: for `task`, `split` and `subset`, the graphs
/// featurised by the core (vocabulary ids as training computes them) and
/// the examples `(graph, root, steps, positives)`, every list packed as
/// little-endian i32 `bytes`. Releases the GIL.
#[pyfunction]
#[pyo3(signature = (store, task, split, subset, vocabulary))]
fn read_store(
    py: Python<'_>,
    store: PathBuf,
    task: &str,
    split: &str,
    subset: &str,
    vocabulary: PathBuf,
) -> PyResult<(Vec<String>, Vec<StoredInput>, Vec<(usize, u32, u32, Packed)>)> {
    let (task, split, subset) = parse_store_names(task, split, subset)?;
    let vocab = py.detach(|| Vocabulary::load(&vocabulary)).map_err(vocab_error)?;
    py.detach(move || -> Result<_, String> {
        let dataset = Dataset::open(&store).map_err(|e| e.to_string())?;
        let (mut paths, mut graphs, mut examples) = (Vec::new(), Vec::new(), Vec::new());
        for record in dataset.records_in(split) {
            let record = record.map_err(|e| e.to_string())?;
            let chosen: Vec<_> = record.examples(task).iter().filter(|e| subset.contains(e.steps)).collect();
            if chosen.is_empty() {
                continue;
            }
            let g = &record.graph;
            let path = &record.path;
            let input = g.model_input(&vocab).map_err(|e| format!("{path}: not model input: {e}"))?;
            let mut edges: [(Packed, Packed, Packed); 3] = Default::default();
            for (out, t) in edges.iter_mut().zip([EdgeType::Control, EdgeType::Data, EdgeType::Call]) {
                let a = input.edges(t);
                *out = (pack(a.sources, path)?, pack(a.targets, path)?, pack(a.positions, path)?);
            }
            let labelled = pack(&g.labelled(task), path)?;
            let index = graphs.len();
            for e in chosen {
                examples.push((index, e.root, e.steps, pack(&e.positives, path)?));
            }
            graphs.push((pack(input.tokens(), path)?, edges, labelled));
            paths.push(record.path.clone());
        }
        Ok((paths, graphs, examples))
    })
    .map_err(value_error)
}

/// Builds the vocabulary of a store's train split (as `programl-train
/// train` does at its first start) into `out` (JSON).
#[pyfunction]
fn store_vocabulary(py: Python<'_>, store: PathBuf, out: PathBuf) -> PyResult<usize> {
    py.detach(move || -> Result<usize, String> {
        // (A dataset's errors name their file.)
        let dataset = Dataset::open(&store).map_err(|e| e.to_string())?;
        let (v, _) = programl_dataset::vocab::build(&dataset, 1, None).map_err(|e| e.to_string())?;
        v.save(&out).map_err(|e| e.to_string())?;
        Ok(v.len())
    })
    .map_err(value_error)
}

/// The kinds of a graph's nodes that carry labels for `task`.
#[pyfunction]
fn labelled(graph: &Graph, task: &str) -> PyResult<Vec<u32>> {
    let task = parse_task(task)?;
    let kinds: Vec<NodeKind> = graph.graph.graph.node_weights().map(|n| n.kind).collect();
    Ok(labelled_nodes(task, &kinds, graph.graph.graph.node_weights().map(|n| n.text.as_str())))
}

/// Vocabulary ids of a graph's nodes under the vocabulary in `path` (a
/// `vocabulary.json` or a bundle directory).
#[pyfunction]
fn token_ids(py: Python<'_>, graph: &Graph, path: PathBuf) -> PyResult<Vec<i64>> {
    let file = if path.is_dir() { path.join("vocabulary.json") } else { path };
    let vocab = py.detach(|| Vocabulary::load(&file)).map_err(vocab_error)?;
    let input = GraphInput::new(&graph.graph, &vocab).map_err(value_error)?;
    Ok(input.tokens().to_vec())
}

/// Upstream's `ProgramGraphList` (what its `save_graphs` writes, before
/// compression) of `graphs`. Releases the GIL.
#[pyfunction]
fn graph_list_bytes<'py>(py: Python<'py>, graphs: Vec<Bound<'py, Graph>>) -> PyResult<Bound<'py, PyBytes>> {
    let refs: Vec<&ProgramGraph> = graphs.iter().map(|g| &g.get().graph).collect();
    let out = py.detach(|| -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        write_graph_list(refs, &mut out)?;
        Ok(out)
    });
    Ok(PyBytes::new(py, &out.map_err(value_error)?))
}

/// The graphs of a `ProgramGraphList` (uncompressed). Releases the GIL.
#[pyfunction]
fn read_graph_list_bytes(py: Python<'_>, data: Vec<u8>) -> PyResult<Vec<Graph>> {
    let graphs = py.detach(|| read_graph_list(&data)).map_err(value_error)?;
    Ok(graphs.into_iter().map(|graph| Graph { graph }).collect())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Graph>()?;
    m.add_class::<Bundle>()?;
    m.add_function(wrap_pyfunction!(build_ir, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(read_store, m)?)?;
    m.add_function(wrap_pyfunction!(store_vocabulary, m)?)?;
    m.add_function(wrap_pyfunction!(labelled, m)?)?;
    m.add_function(wrap_pyfunction!(token_ids, m)?)?;
    m.add_function(wrap_pyfunction!(graph_list_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(read_graph_list_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(check_store_names, m)?)?;
    m.add_function(wrap_pyfunction!(check_mode, m)?)?;
    m.add("LLVM_MAJOR", programl::LLVM_MAJOR.parse::<u32>().map_err(value_error)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
