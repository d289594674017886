//! The learned pass, `programl-infer`: a trained GGNN consulted while the
//! module compiles, its predictions written into the IR as metadata
//! ([`metadata`] documents the schema).
//!
//! One module, in order ([`run`]):
//!
//! 1. read the bundle's `config.json` and vocabulary ([`bundle`], cached per
//!    process) and check its provenance against the module: graph mode,
//!    LLVM major version, opaque pointers, featurisation version. A
//!    mismatch stops here, before any libtorch is loaded;
//! 2. open the bundle for its device ([`runtime`]: on the CPU in this
//!    process, torch-free; on CUDA in the runtime library, `dlopen`ed on
//!    first use; both cached per process);
//! 3. build the module's graph with the core's builder (paper mode) and its
//!    model input with `programl::batch` ([`GraphInput`], [`Batcher`]):
//!    the code training used, so the model sees what it saw in training;
//! 4. choose the roots (`roots=sample|all|marked`), predict batch by batch
//!    (at most [`BATCH_NODES`] nodes, as training evaluates), and threshold
//!    the positive class at 0.5;
//! 5. write the annotations ([`metadata`]), and with `verify` the exact
//!    analysis's figures, with `sidecar=` every decision.
//!
//! Any failure is one warning line and the module is left as it was: the
//! annotations are written only once everything before succeeded.

pub mod anchor;
pub mod bundle;
pub mod metadata;
pub mod params;
pub mod runtime;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use inkwell::llvm_sys::core::*;
use inkwell::llvm_sys::prelude::*;
use programl::analysis::{labelled_nodes, Analyzer, Task};
use programl::batch::{Batch, Batcher, GraphInput, Sample};
use programl::builder::{build_raw, BuildOptions};
use programl::graph::{NodeKind, ProgramGraph};
use programl::metrics::Confusion;
use serde::Serialize;

use anchor::{Anchors, Def};
use params::{Params, Roots, PASS_NAME};
use runtime::ms;

/// Nodes per batch (a larger module sits alone in its batch), as
/// `programl-train eval` batches by default.
pub const BATCH_NODES: usize = 10_000;
/// Set, the pass panics before it does anything: the tests check that a
/// panic is contained (one warning, the module unchanged).
pub const ENV_PANIC_FOR_TESTING: &str = "PROGRAML_INFER_PANIC_FOR_TESTING";

/// The seed of `roots=sample`: the dataset's (`programl dataset build`,
/// `programl-train eval` on IR files).
pub const SAMPLE_SEED: u64 = 0;

/// Where in a pipeline an instance runs (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// Named in an `opt -passes=` pipeline.
    Pipeline,
    /// `PROGRAML_INFER` at `OptimizerLast` (clang, opt's default pipelines).
    OptimizerLast,
    /// `PROGRAML_INFER` at the full-LTO extension point (lld, `lto<O2>`).
    FullLto,
}

/// Wall times of one module, in milliseconds. The load and open figures
/// are 0 when an earlier module of the process paid them.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub runtime_load: f64,
    pub bundle_open: f64,
    pub graph: f64,
    pub features: f64,
    pub inference: f64,
    pub annotate: f64,
    pub verify: f64,
    pub total: f64,
}

/// Runs the pass on `module`; never panics or unwinds. A failure is one
/// warning and the module is unchanged.
///
/// # Safety
/// `module` is a valid module the caller lets this function modify.
/// `optimised`: whether the pipeline that runs the pass optimises (`None`
/// when it is not known: a pass named in `opt -passes=`).
pub unsafe fn run_pass(module: LLVMModuleRef, params: &Params, site: Site, optimised: Option<bool>) {
    // Everything in the guard: LLVM calls the pass through `extern "C"`.
    let _ = crate::guard::catch(crate::logger::init);
    let name = crate::guard::catch(|| module_name(module)).unwrap_or_else(|_| "<module>".to_string());
    match crate::guard::catch(|| run(module, params, site, optimised)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::warn!(target: PASS_NAME, "{name}: {e}; module unchanged"),
        Err(panic) => log::warn!(target: PASS_NAME, "{name}: internal error: {panic}; module unchanged"),
    }
}

/// The module's source file name, else its identifier.
///
/// # Safety
/// `module` is valid.
pub unsafe fn module_name(module: LLVMModuleRef) -> String {
    let mut len = 0usize;
    let p = LLVMGetSourceFileName(module, &mut len);
    let mut name =
        if p.is_null() { String::new() } else { String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len)).into_owned() };
    if name.is_empty() {
        let p = LLVMGetModuleIdentifier(module, &mut len);
        if !p.is_null() {
            name = String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len)).into_owned();
        }
    }
    name
}

/// The running LLVM's major version: the one the plugin was built against,
/// as a plugin loads only into the opt or clang of that LLVM (its symbols
/// are versioned by it). LLVM's C API has `LLVMGetVersion` only from LLVM
/// 16 on, so the LLVM 14 and 15 builds could not ask.
pub fn llvm_major() -> u32 {
    programl::LLVM_MAJOR.parse().unwrap_or(0)
}

/// Inference's memory per node with the shipped bundles (34 and 66 wide,
/// every dtype): the states, each step's products and messages, for every
/// node at once. Measured on a 315,549-node module, the process's peak RSS
/// against opt's alone: 2.2-2.5 KB (docs/perf/learned-pass.md).
const BYTES_PER_NODE: usize = 2_500;

/// A probability that is NaN or infinite (weights or settings that the
/// bundle's checks let through, arithmetic that overflowed) is no
/// prediction: the module is left unchanged rather than annotated with it.
fn not_finite(probabilities: &[f32]) -> Result<(), String> {
    match probabilities.iter().find(|p| !p.is_finite()) {
        Some(bad) => Err(format!("the model gave a probability of {bad}: its weights or settings do not make a prediction")),
        None => Ok(()),
    }
}

/// The failure of a module whose graph has `nodes` nodes (`exact`, else
/// at least that many), past `max_nodes`; `what` qualifies the count.
fn too_large(nodes: usize, exact: bool, what: &str, p: &Params) -> String {
    let (count, more) = if exact { ("", "") } else { ("at least ", " or more") };
    let bytes = nodes.saturating_mul(BYTES_PER_NODE);
    let size = if bytes < 1 << 20 { format!("{} KB", bytes.div_ceil(1000)) } else { format!("{} MB", bytes.div_ceil(1 << 20)) };
    format!(
        "the module's graph has {count}{nodes} nodes{what}, more than max_nodes={}: inference would hold about {size}{more} (about {} \
         KB a node); max_nodes=N raises the bound",
        p.max_nodes,
        BYTES_PER_NODE as f64 / 1000.0
    )
}

/// The instructions of the module's graph (each one node of it): every
/// instruction of every defined function but the debug intrinsics' calls,
/// which the models' graphs leave out (`BuildOptions::MODEL`).
///
/// # Safety
/// `module` is a valid module.
unsafe fn model_instructions(module: LLVMModuleRef) -> usize {
    let mut count = 0usize;
    let mut f = LLVMGetFirstFunction(module);
    while !f.is_null() {
        let mut b = LLVMGetFirstBasicBlock(f);
        while !b.is_null() {
            let mut i = LLVMGetFirstInstruction(b);
            while !i.is_null() {
                count += !programl::builder::is_debug_intrinsic_call(i) as usize;
                i = LLVMGetNextInstruction(i);
            }
            b = LLVMGetNextBasicBlock(b);
        }
        f = LLVMGetNextFunction(f);
    }
    count
}

/// Whether `module`'s context uses opaque pointers.
///
/// # Safety
/// `module` is valid.
pub unsafe fn opaque_pointers(module: LLVMModuleRef) -> bool {
    let context = LLVMGetModuleContext(module);
    // In an opaque-pointer context every pointer type is `ptr`.
    LLVMPointerTypeIsOpaque(LLVMPointerType(LLVMInt8TypeInContext(context), 0)) != 0
}

/// The index of the positive class: `positive` by name, else 1 of 2.
use programl_infer::config::positive_class;

/// `verify`'s line: SPEC'd keys in this order (`kind` only in a sidecar).
#[derive(Serialize)]
struct Verify<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    module: &'a str,
    task: &'static str,
    tp: u64,
    fp: u64,
    #[serde(rename = "fn")]
    fn_: u64,
    precision: f64,
    recall: f64,
    f1: f64,
}

/// A sidecar's record of one module's decisions.
#[derive(Serialize)]
struct Decisions<'a> {
    kind: &'static str,
    module: &'a str,
    task: &'static str,
    model: String,
    /// The products' precision in effect (`f32`, `bf16`, `int8`).
    dtype: &'static str,
    steps: i64,
    threshold: f64,
    roots: Vec<SidecarRoot<'a>>,
}

/// One root: `[node, probability]` for every labelled node.
#[derive(Serialize)]
struct SidecarRoot<'a> {
    root: u32,
    nodes: &'a [(u32, f32)],
}

/// One root's decisions: (node, probability of the positive class) for
/// every labelled node.
struct RootResult {
    root: u32,
    probabilities: Vec<(u32, f32)>,
}

/// # Safety
/// `module` is valid and may be modified.
unsafe fn run(module: LLVMModuleRef, p: &Params, site: Site, optimised: Option<bool>) -> Result<(), String> {
    if std::env::var_os(ENV_PANIC_FOR_TESTING).is_some() {
        panic!("{ENV_PANIC_FOR_TESTING} is set");
    }
    let start = Instant::now();
    let mut t = Timings::default();
    let name = module_name(module);
    let shown = p.model.display();

    let bundle = read_matching(module, &p.model)?;
    // Past `max_nodes`, not even the graph is built: every instruction is
    // a node of it, so the count of them is a bound from below.
    let instructions = model_instructions(module);
    if instructions > p.max_nodes {
        return Err(too_large(instructions, false, "", p));
    }
    let config = &bundle.config;
    if config.head == "graph" {
        // Settings of node-level bundles, named as given: said once a
        // process, not per unit.
        let given: Vec<&str> =
            [(p.roots != Roots::Sample, "roots="), (p.max_roots != params::DEFAULT_MAX_ROOTS, "max_roots="), (p.verify, "verify")]
                .into_iter()
                .filter_map(|(set, what)| set.then_some(what))
                .collect();
        if !given.is_empty() {
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                let (list, verb) = match given.as_slice() {
                    [one] => (one.to_string(), "is a setting"),
                    [rest @ .., last] => (format!("{} and {last}", rest.join(", ")), "are settings"),
                    [] => unreachable!(),
                };
                log::warn!(
                    target: PASS_NAME,
                    "{name}: {list} {verb} of node-level (DeepDataFlow) bundles; {shown}, a {} bundle, decides for the whole module and ignores {}",
                    config.task,
                    if given.len() == 1 { "it" } else { "them" }
                );
            }
        }
        // Nothing to classify: a module that defines no function (data
        // only, or every function inlined away). Device mapping says the
        // same of a module without a kernel.
        if instructions == 0 && !metadata::is_device_mapping(&config.task) {
            return Err("no function defined, nothing to classify".into());
        }
        return run_graph(module, p, site, optimised, bundle, start, t);
    }
    if config.head != "node" {
        return Err(format!("bundle {shown}: head '{}' is neither node nor graph", config.head));
    }
    let task = Task::parse(&config.task).ok_or_else(|| format!("bundle {shown}: task '{}' is not a DeepDataFlow task", config.task))?;
    let positive =
        positive_class(&config.classes).ok_or_else(|| format!("bundle {shown}: classes {:?} have no positive class", config.classes))?;
    if p.transfer.is_some() || p.wgsize.is_some() {
        log::debug!(target: PASS_NAME, "{name}: transfer= and wgsize= are inputs of graph-level device mapping; unused by a {task} bundle");
    }

    let clock = Instant::now();
    // Only the subexpressions analysis reads `full_text` (its roots and
    // verify's labels); the model never does.
    let graph = build_raw(module, &BuildOptions { skip_full_text: task != Task::Subexpressions, ..BuildOptions::MODEL });
    if graph.node_count() > p.max_nodes {
        return Err(too_large(graph.node_count(), true, "", p));
    }
    let anchors = Anchors::new(module, &graph)?;
    t.graph = ms(clock);

    let clock = Instant::now();
    let input = GraphInput::new(&graph, &bundle.vocabulary).map_err(|e| format!("not model input: {e}"))?;
    let mut analyzer = Analyzer::new(&graph);
    let roots = choose_roots(module, p, task, &anchors, &mut analyzer, &name);
    let kinds: Vec<NodeKind> = graph.graph.node_weights().map(|n| n.kind).collect();
    let labelled = labelled_nodes(task, &kinds, graph.graph.node_weights().map(|n| n.text.as_str()));
    t.features = ms(clock);

    // The bundle's T, or 0: its stopping rule (`hyper.stop`) decides.
    let steps = p.steps.unwrap_or(if config.hyper.stop.is_some() { 0 } else { config.hyper.steps });
    let work = (graph.node_count() as u64).saturating_mul(roots.len() as u64).saturating_mul(step_bound(p, config));
    let model = open_in_runtime(p, &bundle, &mut t, work)?;
    let clock = Instant::now();
    let mut results: Vec<RootResult> = Vec::with_capacity(roots.len());
    let mut batcher = Batcher::new(BATCH_NODES);
    let mut pending: Vec<u32> = Vec::new();
    let classes = config.classes.len();
    let mut flush = |batch: Batch, batch_roots: &mut Vec<u32>| -> Result<(), String> {
        let probs = model.predict(&batch, steps, p.threads, p.dtype, p.isa)?;
        not_finite(&probs)?;
        for (g, &root) in batch_roots.iter().enumerate() {
            let offset = batch.offsets()[g] as usize;
            let probabilities = labelled.iter().map(|&n| (n, probs[(offset + n as usize) * classes + positive])).collect();
            results.push(RootResult { root, probabilities });
        }
        batch_roots.clear();
        Ok(())
    };
    for &root in &roots {
        let closed = batcher.push(Sample { graph: &input, root: Some(root), positives: None }).map_err(|e| e.to_string())?;
        if let Some(batch) = closed {
            flush(batch, &mut pending)?;
        }
        pending.push(root);
    }
    if let Some(batch) = batcher.finish() {
        flush(batch, &mut pending)?;
    }
    t.inference = ms(clock);

    let clock = Instant::now();
    let verify = if p.verify {
        let mut c = Confusion::default();
        for r in &results {
            let labels = analyzer.analyze(task, r.root).map_err(|e| format!("verify: {e}"))?;
            let actual: BTreeSet<u32> = labels.positives.into_iter().collect();
            for &(n, prob) in &r.probabilities {
                c.record(prob > 0.5, actual.contains(&n));
            }
        }
        Some(c)
    } else {
        None
    };
    t.verify = ms(clock);

    let mut lines = Vec::new();
    if p.sidecar.is_some() {
        let roots: Vec<SidecarRoot<'_>> = results.iter().map(|r| SidecarRoot { root: r.root, nodes: &r.probabilities }).collect();
        let record = Decisions {
            kind: "decisions",
            module: &name,
            task: task.name(),
            model: shown.to_string(),
            dtype: model.dtype_in_effect(),
            steps,
            threshold: 0.5,
            roots,
        };
        lines.push(serde_json::to_string(&record).map_err(|e| e.to_string())?);
    }
    if let Some(c) = verify {
        let kind = p.sidecar.as_ref().map(|_| "verify");
        let record = Verify {
            kind,
            module: &name,
            task: task.name(),
            tp: c.tp,
            fp: c.fp,
            fn_: c.fn_,
            precision: c.precision(),
            recall: c.recall(),
            f1: c.f1(),
        };
        lines.push(serde_json::to_string(&record).map_err(|e| e.to_string())?);
    }
    // The sidecar first: if it cannot be written, the module stays as it was.
    match &p.sidecar {
        Some(path) => append_lines(path, &lines).map_err(|e| format!("sidecar {}: {e}", path.display()))?,
        None => {
            let mut err = std::io::stderr().lock();
            for l in &lines {
                let _ = writeln!(err, "{l}");
            }
        }
    }
    let clock = Instant::now();
    annotate(module, task, config, steps, &graph, &anchors, &results)?;
    t.annotate = ms(clock);
    t.total = ms(start);
    let positives: usize = results.iter().map(|r| r.probabilities.iter().filter(|x| x.1 > 0.5).count()).sum();
    log::info!(
        target: PASS_NAME,
        "{name}: {task} at {site:?}, {} roots, {} nodes, {positives} positive decisions; ms: runtime={:.2} bundle={:.2} graph={:.2} features={:.2} inference={:.2} annotate={:.2} verify={:.2} total={:.2}",
        results.len(),
        graph.graph.node_count(),
        t.runtime_load,
        t.bundle_open,
        t.graph,
        t.features,
        t.inference,
        t.annotate,
        t.verify,
        t.total
    );
    Ok(())
}

/// The bundle in `dir` (read once per process), if its provenance matches
/// `module`: graph mode, LLVM major version, opaque pointers,
/// featurisation version.
///
/// # Safety
/// `module` is valid.
unsafe fn read_matching(module: LLVMModuleRef, dir: &Path) -> Result<std::sync::Arc<bundle::Bundle>, String> {
    let shown = dir.display();
    let bundle = bundle::read(dir).map_err(|e| format!("cannot use bundle {shown}: {e}"))?;
    let facts = bundle::ModuleFacts { llvm_major: llvm_major(), opaque_pointers: opaque_pointers(module) };
    let mismatches = bundle::mismatches(&bundle.config.provenance, facts);
    if !mismatches.is_empty() {
        return Err(format!("bundle {shown} does not match this module: {}", mismatches.join("; ")));
    }
    Ok(bundle)
}

/// The steps a prediction with `p` is reckoned to run, for `device=auto`:
/// `steps=`, else the bundle's T, and under a stopping rule the steps its
/// graphs typically run, [`RULE_TYPICAL_STEPS`] (at most the rule's cap).
/// Reckoning a rule at its cap (4,000 for reachability-adaptive) would
/// send a module of 200 nodes to CUDA and its ~1 s start. (A rule that
/// does not parse fails the bundle's opening.)
fn step_bound(p: &Params, config: &bundle::Config) -> u64 {
    let steps = match (p.steps, &config.hyper.stop) {
        (Some(steps), _) => steps,
        (None, Some(rule)) => serde_json::from_value::<programl_infer::config::Stop>(rule.clone())
            .map_or(RULE_TYPICAL_STEPS, |s| s.max_steps.min(RULE_TYPICAL_STEPS)),
        (None, None) => config.hyper.steps,
    };
    steps.max(1) as u64
}

/// Steps a graph runs under a stopping rule, typically: 36 to 135 a root
/// over the whole DDF's examples up to 200 steps deep, more only on the
/// few deeper ones (docs/perf/models.md: the fixed-T bundles under a
/// stopping rule, mean steps run per step-count range).
const RULE_TYPICAL_STEPS: i64 = 100;

/// The runtime, and `bundle` opened in it (both once per process), checked
/// against what the pass read of the bundle. `work` (nodes × steps of the
/// module's predictions) is what `device=auto` decides by.
fn open_in_runtime(p: &Params, bundle: &bundle::Bundle, t: &mut Timings, work: u64) -> Result<std::sync::Arc<runtime::Model>, String> {
    let shown = bundle.dir.display();
    let clock = Instant::now();
    let device = runtime::resolve(p.device, work);
    log::debug!(target: PASS_NAME, "device={} for {work} node-steps: {device:?}", p.device.name());
    // `isa=` picks the CPU's kernel path: checked where the CPU predicts.
    if let Some(isa) = p.isa.filter(|_| device != params::Device::Cuda || p.device == params::Device::Auto) {
        isa.check()?;
    }
    let mut runtime_load = 0.0;
    let load = || {
        let (rt, fresh) = runtime::load(&runtime::cuda_runtime_path()?)?;
        if fresh {
            runtime_load = ms(clock);
            log::debug!(target: PASS_NAME, "opened runtime {} in {:.1} ms", rt.path.display(), runtime_load);
        }
        Ok(rt)
    };
    let (model, fresh) = match runtime::open_model(&bundle.dir, device, load) {
        // `auto` chose CUDA for a large module, and it did not open (no
        // runtime library beside the plugin, no driver): the CPU predicts,
        // as it does for every smaller module. Said once a process.
        Err(e) if p.device == params::Device::Auto && device == params::Device::Cuda => {
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                log::warn!(target: PASS_NAME, "device=auto: CUDA did not open for bundle {shown} ({e}); predicting on the CPU");
            }
            runtime::open_model(&bundle.dir, params::Device::Cpu, || Err("the CPU opens no runtime".into()))
        }
        opened => opened,
    }
    .map_err(|e| format!("cannot open bundle {shown}: {e}"))?;
    t.runtime_load = runtime_load;
    if fresh {
        t.bundle_open = ms(clock) - t.runtime_load;
        log::debug!(target: PASS_NAME, "opened bundle {shown} on {} in {:.1} ms", model.info["device"].as_str().unwrap_or("?"), t.bundle_open);
    }
    if model.info["vocab_size"].as_u64() != Some(bundle.vocabulary.len() as u64) {
        // The pass featurises with the vocabulary it read; the runtime's
        // model must be the one trained with it.
        return Err(format!(
            "bundle {shown}: the vocabulary read here has {} ids, the runtime's model {}: was the bundle replaced meanwhile?",
            bundle.vocabulary.len(),
            model.info["vocab_size"]
        ));
    }
    if model.classes != bundle.config.classes.len() {
        return Err(format!("bundle {shown}: the runtime sees {} classes, config.json {}", model.classes, bundle.config.classes.len()));
    }
    Ok(model)
}

/// The auxiliary inputs `names` from the pass's parameters, or `None` if
/// any is not given.
fn aux_values(names: &[String], p: &Params) -> Result<Option<Vec<f32>>, String> {
    let mut values = Vec::with_capacity(names.len());
    for name in names {
        let value = match name.as_str() {
            "transfer" => p.transfer,
            "wgsize" => p.wgsize,
            other => return Err(format!("the bundle takes an auxiliary input '{other}' that the pass has no parameter for")),
        };
        match value {
            Some(v) => values.push(v as f32),
            None => return Ok(None),
        }
    }
    Ok(Some(values))
}

/// A sidecar's (or stderr's) record of one graph-level decision.
#[derive(Serialize)]
struct GraphDecision<'a> {
    kind: &'static str,
    module: &'a str,
    task: &'a str,
    model: String,
    /// The products' precision in effect (`f32`, `bf16`, `int8`).
    dtype: &'static str,
    steps: i64,
    aux: BTreeMap<&'a str, f32>,
    /// The kernel decided for, where a device-mapping module holds
    /// several (each from its own graph); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<&'a str>,
    class: &'a str,
    probabilities: BTreeMap<&'a str, f32>,
}

/// One kernel of a module: the function, its name, and its function id in
/// the module's graph (its place among [`anchor::functions`]).
struct Kernel {
    f: LLVMValueRef,
    name: String,
    id: u32,
}

/// The module's kernels (defined functions with the `spir_kernel`,
/// `ptx_kernel` or `amdgpu_kernel` calling convention).
///
/// # Safety
/// `module` is valid.
unsafe fn kernels(module: LLVMModuleRef) -> Vec<Kernel> {
    const KERNEL_CONVENTIONS: [u32; 3] = [71, 76, 91]; // ptx_kernel, spir_kernel, amdgpu_kernel
    anchor::functions(module)
        .into_iter()
        .enumerate()
        .filter(|&(_, f)| LLVMIsDeclaration(f) == 0 && KERNEL_CONVENTIONS.contains(&LLVMGetFunctionCallConv(f)))
        .map(|(id, f)| {
            let mut len = 0usize;
            let p = LLVMGetValueName2(f, &mut len);
            let name = if p.is_null() {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len)).into_owned()
            };
            Kernel { f, name, id: id as u32 }
        })
        .collect()
}

/// Each kernel's graph, for a module with several: the kernel and what it
/// calls, the other kernels left out ([`ProgramGraph::call_closure`]), as
/// a kernel compiled alone gives it (device mapping is trained on one
/// kernel per module). `None` with fewer than two kernels, or where the
/// graph's function at a kernel's id is not that kernel (then the module's
/// graph decides for all). By id, not name: unnamed kernels (`@0`, `@1`)
/// share the empty name.
///
/// Kernels that share callees hold them once each, so the graphs together
/// can outgrow the module's: past `max_nodes`, refused before any is built
/// (the nodes of each kernel's functions, summed, count from below).
fn kernel_graphs(graph: &ProgramGraph, kernels: &[Kernel], p: &Params) -> Result<Option<Vec<ProgramGraph>>, String> {
    if kernels.len() < 2 || kernels.iter().any(|k| graph.functions.get(k.id as usize).is_none_or(|f| f.name != k.name)) {
        return Ok(None);
    }
    // One index for all the kernels: each closure and subgraph then costs
    // its own size (a module of thousands of kernels stays linear).
    let index = graph.function_index();
    let mut is_kernel = vec![false; graph.functions.len()];
    for k in kernels {
        is_kernel[k.id as usize] = true;
    }
    let closures: Vec<_> = kernels.iter().map(|k| index.call_closure(k.id, &|f| is_kernel.get(f as usize) == Some(&true))).collect();
    let mut per_function = vec![0usize; graph.functions.len()];
    for n in graph.graph.node_weights() {
        if let Some(slot) = n.function.and_then(|f| per_function.get_mut(f as usize)) {
            *slot += 1;
        }
    }
    let at_least: usize = closures.iter().flatten().map(|&f| per_function.get(f as usize).copied().unwrap_or(0)).sum();
    if at_least > p.max_nodes {
        return Err(too_large(at_least, false, " (its kernels' graphs together)", p));
    }
    Ok(Some(closures.iter().map(|c| index.subgraph(c)).collect()))
}

/// A graph-level bundle (device mapping, classification): one prediction
/// for the module's graph, written by [`annotate_graph_level`]. A bundle
/// with auxiliary inputs needs them as pass parameters (`transfer=`,
/// `wgsize=`); without them the pass uses the bundle's `noaux/` variant,
/// trained without them.
///
/// # Safety
/// `module` is valid and may be modified.
#[allow(clippy::too_many_arguments)]
unsafe fn run_graph(
    module: LLVMModuleRef,
    p: &Params,
    site: Site,
    optimised: Option<bool>,
    bundle: std::sync::Arc<bundle::Bundle>,
    start: Instant,
    mut t: Timings,
) -> Result<(), String> {
    let name = module_name(module);
    let names = bundle.config.hyper.graph.as_ref().map_or_else(Vec::new, |g| g.aux.clone());
    let (bundle, aux) = match aux_values(&names, p)? {
        Some(values) => (bundle, values),
        None => {
            let noaux = bundle.dir.join("noaux");
            if !noaux.join("config.json").exists() {
                return Err(format!(
                    "bundle {} takes {} as inputs (pass parameters) and has no noaux/ variant to use without them",
                    bundle.dir.display(),
                    names.join(" and ")
                ));
            }
            let given: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|n| match *n {
                    "transfer" => p.transfer.is_some(),
                    "wgsize" => p.wgsize.is_some(),
                    _ => false,
                })
                .collect();
            if given.is_empty() {
                log::debug!(target: PASS_NAME, "{name}: {} not given: using {}", names.join(", "), noaux.display());
            } else {
                // One of the inputs alone is most likely a slip: said once a
                // process, and decided as without any.
                static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    let missing: Vec<String> = names.iter().filter(|n| !given.contains(&n.as_str())).map(|n| format!("{n}=")).collect();
                    log::warn!(
                        target: PASS_NAME,
                        "{name}: {}= given without {}: {} takes them together, so the decision is {}'s, made without any",
                        given.join("= and "),
                        missing.join(" and "),
                        bundle.dir.display(),
                        noaux.display()
                    );
                }
            }
            let b = read_matching(module, &noaux)?;
            if b.config.hyper.graph.as_ref().is_none_or(|g| !g.aux.is_empty()) {
                return Err(format!("bundle {}: not a graph-level bundle without auxiliary inputs", noaux.display()));
            }
            (b, Vec::new())
        }
    };
    let config = &bundle.config;
    // -O0 IR as clang makes it marks every function it defines `optnone`
    // (and an optimising pipeline leaves such functions alone: -O0 objects
    // in an -O2 LTO link stay -O0 IR); without that mark, the pipeline's
    // level says, where the pass knows it.
    let optimised = if mostly_optnone(module) { Some(false) } else { optimised };
    if let (Some(optimised), Some(source)) = (optimised, &config.source) {
        warn_unseen_level(&name, &bundle.dir, source, optimised);
    }

    let clock = Instant::now();
    let graph = build_raw(module, &BuildOptions { skip_full_text: true, ..BuildOptions::MODEL });
    if graph.node_count() > p.max_nodes {
        return Err(too_large(graph.node_count(), true, "", p));
    }
    // Device mapping decides per kernel: a module with several kernels
    // gives each its own graph; otherwise the module's graph decides.
    let kernels = if metadata::is_device_mapping(&config.task) { kernels(module) } else { Vec::new() };
    if metadata::is_device_mapping(&config.task) && kernels.is_empty() {
        return Err("no kernel to decide for (a function with the spir_kernel, ptx_kernel or amdgpu_kernel convention)".into());
    }
    let per_kernel = kernel_graphs(&graph, &kernels, p)?;
    t.graph = ms(clock);
    let clock = Instant::now();
    let graphs: Vec<&ProgramGraph> = per_kernel.as_ref().map_or_else(|| vec![&graph], |g| g.iter().collect());
    let inputs: Vec<GraphInput> = graphs
        .iter()
        .map(|g| GraphInput::new(g, &bundle.vocabulary))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not model input: {e}"))?;
    let samples: Vec<Sample<'_>> = inputs.iter().map(|g| Sample { graph: g, root: None, positives: None }).collect();
    let batch = Batch::from_samples(&samples).map_err(|e| e.to_string())?;
    // Kernels that share callees hold them once each: their graphs
    // together can outgrow the module's.
    if batch.node_count() > p.max_nodes {
        return Err(too_large(batch.node_count(), true, " (its kernels' graphs together)", p));
    }
    t.features = ms(clock);
    let steps = p.steps.unwrap_or(if config.hyper.stop.is_some() { 0 } else { config.hyper.steps });
    let model = open_in_runtime(p, &bundle, &mut t, (batch.node_count() as u64).saturating_mul(step_bound(p, config)))?;
    let clock = Instant::now();
    let every_aux: Vec<f32> = (0..inputs.len()).flat_map(|_| aux.iter().copied()).collect();
    let all = model.predict_graph(&batch, &every_aux, steps, p.threads, p.dtype, p.isa)?;
    not_finite(&all)?;
    t.inference = ms(clock);
    let c = config.classes.len();
    if all.len() != c * inputs.len() {
        return Err(format!("the runtime gave {} probabilities for {} graphs of {c} classes", all.len(), inputs.len()));
    }
    let best_of = |probs: &[f32]| (0..probs.len()).max_by(|&a, &b| probs[a].total_cmp(&probs[b])).unwrap_or(0);
    let mut lines = Vec::new();
    for (g, probs) in all.chunks_exact(c).enumerate() {
        let record = GraphDecision {
            kind: "decision",
            module: &name,
            task: &config.task,
            model: bundle.dir.display().to_string(),
            dtype: model.dtype_in_effect(),
            steps,
            aux: names.iter().map(String::as_str).zip(aux.iter().copied()).collect(),
            kernel: per_kernel.as_ref().map(|_| kernels[g].name.as_str()),
            class: &config.classes[best_of(probs)],
            probabilities: config.classes.iter().map(String::as_str).zip(probs.iter().copied()).collect(),
        };
        lines.push(serde_json::to_string(&record).map_err(|e| e.to_string())?);
    }
    // The sidecar first: if it cannot be written, the module stays as it was.
    if let Some(path) = &p.sidecar {
        append_lines(path, &lines).map_err(|e| format!("sidecar {}: {e}", path.display()))?;
    }
    let probs = &all[..c];
    let best = best_of(probs);
    let clock = Instant::now();
    let fingerprint = metadata::graph_fingerprint(&graph);
    let entry = metadata::ModelEntry {
        task: &config.task,
        format: &config.format,
        version: config.version.into(),
        head: &config.head,
        steps,
        graph: &fingerprint,
    };
    let annotated = match &per_kernel {
        Some(_) => {
            let decisions: Vec<(LLVMValueRef, &[f32])> = kernels.iter().map(|k| k.f).zip(all.chunks_exact(c)).collect();
            annotate_kernels(module, &entry, &config.classes, &decisions)?
        }
        None => annotate_graph_level(module, &entry, &config.classes, probs)?,
    };
    t.annotate = ms(clock);
    t.total = ms(start);
    log::info!(
        target: PASS_NAME,
        "{name}: {} at {site:?}: {} (p {:.3}), {annotated} annotated, {} nodes; ms: runtime={:.2} bundle={:.2} graph={:.2} features={:.2} inference={:.2} annotate={:.2} total={:.2}",
        config.task,
        config.classes[best],
        probs[best],
        graph.graph.node_count(),
        t.runtime_load,
        t.bundle_open,
        t.graph,
        t.features,
        t.inference,
        t.annotate,
        t.total
    );
    Ok(())
}

/// Whether at least half of the functions defined in `module` have the
/// `optnone` attribute: -O0 IR as clang makes it (every function of the
/// source gets it, unless told not to), not optimised IR with a few
/// functions the user marked `optnone`. The static initialisers clang adds
/// (section `.text.startup`) get no `optnone` even at -O0 and are not
/// counted.
///
/// # Safety
/// `module` is a valid module.
unsafe fn mostly_optnone(module: LLVMModuleRef) -> bool {
    let name = "optnone";
    let kind = LLVMGetEnumAttributeKindForName(name.as_ptr().cast(), name.len());
    let (mut defined, mut marked) = (0usize, 0usize);
    let mut f = LLVMGetFirstFunction(module);
    while !f.is_null() {
        let section = LLVMGetSection(f);
        let startup = !section.is_null() && std::ffi::CStr::from_ptr(section).to_bytes().starts_with(b".text.startup");
        if LLVMIsDeclaration(f) == 0 && !startup {
            defined += 1;
            marked += !LLVMGetEnumAttributeAtIndex(f, inkwell::llvm_sys::LLVMAttributeFunctionIndex, kind).is_null() as usize;
        }
        f = LLVMGetNextFunction(f);
    }
    defined > 0 && 2 * marked >= defined
}

/// Warns, once a process for each bundle, when a graph-level bundle meets
/// IR of a kind its training never had: optimised IR for a bundle trained
/// on -O0 IR alone, or -O0 IR for one trained on optimised IR alone
/// (`config.json`'s `source`: its `levels`, else its `-O` flag). Measured
/// on POJ-104: its -O0 bundle classifies -O1 to -O3 IR at 0.10, against
/// 0.83 at -O0 (models/README.md, "POJ-104"). The decision is still made.
fn warn_unseen_level(name: &str, dir: &Path, source: &bundle::Source, optimised: bool) {
    static WARNED: std::sync::Mutex<BTreeSet<std::path::PathBuf>> = std::sync::Mutex::new(BTreeSet::new());
    let (unoptimised_seen, optimised_seen) = source.trained_on();
    if (!unoptimised_seen && !optimised_seen) || (optimised && optimised_seen) || (!optimised && unoptimised_seen) {
        return;
    }
    if !WARNED.lock().unwrap_or_else(|p| p.into_inner()).insert(dir.to_path_buf()) {
        return;
    }
    let levels = source.trained_levels().iter().map(|l| format!("-{l}")).collect::<Vec<_>>().join(", ");
    if optimised {
        log::warn!(
            target: PASS_NAME,
            "{name}: bundle {} was trained on IR compiled at {levels} only, and this module is optimised IR (the pipeline's level is above -O0): its decision may be far off (POJ-104's -O0 bundle, models/poj104-O0, classifies optimised IR at 0.10, against 0.83 at -O0); use a bundle trained on optimised IR (for POJ-104: models/poj104, trained at -O0 to -O3)",
            dir.display()
        );
    } else {
        log::warn!(
            target: PASS_NAME,
            "{name}: bundle {} was trained on IR compiled at {levels} only, and this module is -O0 IR: its decision is outside what the bundle was trained and measured on",
            dir.display()
        );
    }
}

/// The roots of this run, ascending.
unsafe fn choose_roots(
    module: LLVMModuleRef,
    p: &Params,
    task: Task,
    anchors: &Anchors,
    analyzer: &mut Analyzer<'_>,
    name: &str,
) -> Vec<u32> {
    let roots = match p.roots {
        Roots::Sample => return analyzer.sampled_roots(task, SAMPLE_SEED),
        Roots::All => {
            let mut eligible = analyzer.eligible_roots(task);
            if eligible.len() > p.max_roots {
                log::warn!(
                    target: PASS_NAME,
                    "{name}: {} eligible {task} roots, more than max_roots={}: predicting for the first {} by node id",
                    eligible.len(),
                    p.max_roots,
                    p.max_roots
                );
                eligible.truncate(p.max_roots);
            }
            eligible
        }
        Roots::Marked => {
            let writer = metadata::Writer::new(module);
            let mark = writer.kind(metadata::ROOT_MARK);
            let eligible = analyzer.eligible_roots(task);
            let mut marked: Vec<u32> = anchors.insts.iter().filter(|(_, &i)| writer.has(i, mark)).map(|(&n, _)| n).collect();
            marked.sort_unstable();
            let mut roots = Vec::new();
            for node in marked {
                let root = if task == Task::DataDep { anchors.result.get(&node).copied() } else { Some(node) };
                match root {
                    Some(r) if eligible.binary_search(&r).is_ok() => roots.push(r),
                    Some(r) => log::info!(target: PASS_NAME, "{name}: marked node {r} is not an eligible {task} root; skipped"),
                    None => {
                        log::info!(target: PASS_NAME, "{name}: marked instruction {node} defines no value, so no datadep root; skipped")
                    }
                }
            }
            if roots.is_empty() {
                // Said: roots=marked on a module nobody marked (C or C++
                // compiled as is carries no marks) predicts nothing.
                log::warn!(
                    target: PASS_NAME,
                    "{name}: roots=marked, but no instruction carries !{} for {task}: nothing to predict",
                    metadata::ROOT_MARK
                );
            }
            roots
        }
    };
    analyzer.prepare(task, &roots);
    roots
}

/// Writes the schema's annotations of `results` into `module` (after
/// removing any earlier ones).
unsafe fn annotate(
    module: LLVMModuleRef,
    task: Task,
    config: &bundle::Config,
    steps: i64,
    graph: &ProgramGraph,
    anchors: &Anchors,
    results: &[RootResult],
) -> Result<(), String> {
    // Instruction node → (root, p) pairs, by root; root lists and argument
    // predictions by function.
    let mut predictions: BTreeMap<u32, Vec<(u32, f32)>> = BTreeMap::new();
    let mut arg_predictions: BTreeMap<u32, Vec<(u32, u32, f32)>> = BTreeMap::new();
    let mut roots_of: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut anchored: BTreeSet<u32> = BTreeSet::new();
    let mut touched: BTreeSet<u32> = BTreeSet::new();
    let mut results: Vec<&RootResult> = results.iter().collect();
    results.sort_by_key(|r| r.root);

    // The instruction standing for node `n` (itself, or a variable's
    // definition), or the argument.
    let place = |n: u32| -> Result<Def, String> {
        if anchors.insts.contains_key(&n) {
            Ok(Def::Inst(n))
        } else {
            anchors.defs.get(&n).copied().ok_or_else(|| format!("node {n} has no place in the IR"))
        }
    };
    for r in &results {
        if let Some(f) = Anchors::function_of(graph, r.root) {
            roots_of.entry(f).or_default().push(r.root);
            touched.insert(f);
        }
        match place(r.root)? {
            Def::Inst(i) => {
                anchored.insert(i);
            }
            Def::Arg { function, .. } => {
                touched.insert(function);
            }
        }
        for &(n, prob) in r.probabilities.iter().filter(|x| x.1 > 0.5) {
            match place(n)? {
                Def::Inst(i) => {
                    predictions.entry(i).or_default().push((r.root, prob));
                    anchored.insert(i);
                }
                Def::Arg { function, index } => {
                    arg_predictions.entry(function).or_default().push((r.root, index, prob));
                    touched.insert(function);
                }
            }
        }
    }

    // Everything is placed: now write (nothing below fails).
    let fingerprint = metadata::graph_fingerprint(graph);
    let kept = metadata::clear(module, metadata::Annotated::Node(task), &fingerprint);
    let w = metadata::Writer::new(module);
    let entry = metadata::ModelEntry {
        task: &config.task,
        format: &config.format,
        version: config.version.into(),
        head: &config.head,
        steps,
        graph: &fingerprint,
    };
    metadata::write_header(&w, &kept, &entry);
    let node_kind = w.kind(metadata::NODE);
    let value_kind = w.kind(metadata::VALUE);
    let task_kind = w.kind(&metadata::task_kind(task));
    for &i in &anchored {
        let inst = anchors.insts[&i];
        w.set_inst(inst, node_kind, w.ints([i64::from(i)]));
        if let Some(&v) = anchors.result.get(&i) {
            w.set_inst(inst, value_kind, w.ints([i64::from(v)]));
        }
        if let Some(f) = Anchors::function_of(graph, i) {
            touched.insert(f);
        }
    }
    for (&i, pairs) in &predictions {
        let ops: Vec<_> = pairs.iter().flat_map(|&(root, prob)| [w.int(root.into()), w.real(prob)]).collect();
        w.set_inst(anchors.insts[&i], task_kind, w.node(&ops));
    }
    let roots_kind = w.kind(&metadata::roots_kind(task));
    let args_kind = w.kind(metadata::ARGS);
    let arg_task_kind = w.kind(&metadata::args_kind(task));
    let mut by_function: HashMap<u32, &Vec<(u32, u32, f32)>> = HashMap::new();
    for (f, v) in &arg_predictions {
        by_function.insert(*f, v);
    }
    for &f in &touched {
        let function = anchors.functions[f as usize];
        if let Some(roots) = roots_of.get(&f) {
            w.set_function(function, roots_kind, w.ints(roots.iter().map(|&r| i64::from(r))));
        }
        let args = &anchors.args[f as usize];
        if !args.is_empty() {
            w.set_function(function, args_kind, w.ints(args.iter().map(|a| a.map_or(-1, i64::from))));
        }
        if let Some(triples) = by_function.get(&f) {
            let ops: Vec<_> =
                triples.iter().flat_map(|&(root, index, prob)| [w.int(root.into()), w.int(index.into()), w.real(prob)]).collect();
            w.set_function(function, arg_task_kind, w.node(&ops));
        }
    }
    Ok(())
}

/// Graph-level annotations, for a bundle whose head is `graph`:
/// `probabilities` are one graph's class probabilities, `classes` their
/// names. Device mapping (`entry.task` `devmap` or `devmap-PLATFORM`) puts
/// `!programl.device !{!"CLASS", float P}` (the likelier device) on each
/// kernel (a function with the `spir_kernel`, `ptx_kernel` or
/// `amdgpu_kernel` calling convention); any other task names the module's
/// class in `!programl.class = !{!C}`, `!C = !{!"CLASS", float P}`. Both
/// write `!programl.schema` and `entry` in `!programl.model`, and replace
/// the same task's earlier annotation of the same graph (other tasks'
/// stay). Returns the number of functions or modules annotated.
///
/// # Safety
/// `module` is valid and may be modified.
pub unsafe fn annotate_graph_level(
    module: LLVMModuleRef,
    entry: &metadata::ModelEntry<'_>,
    classes: &[String],
    probabilities: &[f32],
) -> Result<usize, String> {
    if classes.is_empty() || classes.len() != probabilities.len() {
        return Err(format!("{} probabilities for {} classes", probabilities.len(), classes.len()));
    }
    if metadata::is_device_mapping(entry.task) {
        let decisions: Vec<(LLVMValueRef, &[f32])> = kernels(module).into_iter().map(|k| (k.f, probabilities)).collect();
        return annotate_kernels(module, entry, classes, &decisions);
    }
    let best = (0..classes.len()).max_by(|&a, &b| probabilities[a].total_cmp(&probabilities[b])).unwrap_or(0);
    let kept = metadata::clear(module, metadata::Annotated::Graph(entry.task), entry.graph);
    let w = metadata::Writer::new(module);
    metadata::write_header(&w, &kept, entry);
    w.add_named(metadata::CLASS_NAMED, &[w.string(&classes[best]), w.real(probabilities[best])]);
    Ok(1)
}

/// [`annotate_graph_level`] for device mapping with a decision per
/// kernel: `decisions` pairs each kernel with its class probabilities, and
/// each gets `!programl.device` for its own likelier device.
///
/// # Safety
/// `module` is valid and may be modified; the functions are its own.
pub unsafe fn annotate_kernels(
    module: LLVMModuleRef,
    entry: &metadata::ModelEntry<'_>,
    classes: &[String],
    decisions: &[(LLVMValueRef, &[f32])],
) -> Result<usize, String> {
    if classes.is_empty() || decisions.iter().any(|(_, p)| p.len() != classes.len()) {
        return Err(format!("probabilities that do not match {} classes", classes.len()));
    }
    let kept = metadata::clear(module, metadata::Annotated::Graph(entry.task), entry.graph);
    let w = metadata::Writer::new(module);
    metadata::write_header(&w, &kept, entry);
    let kind = w.kind(metadata::DEVICE);
    for &(f, probs) in decisions {
        let best = (0..probs.len()).max_by(|&a, &b| probs[a].total_cmp(&probs[b])).unwrap_or(0);
        w.set_function(f, kind, w.node(&[w.string(&classes[best]), w.real(probs[best])]));
    }
    Ok(decisions.len())
}

/// Appends `lines` to `path` in one `write` on a file opened for appending,
/// so the lines of concurrent compilers never interleave.
fn append_lines(path: &Path, lines: &[String]) -> std::io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            // "File exists" would not say which file is in the way.
            let blocker = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir());
            match blocker {
                Some(file) => std::io::Error::new(e.kind(), format!("{} is not a directory", file.display())),
                None => e,
            }
        })?;
    }
    let mut text = lines.join("\n");
    text.push('\n');
    let mut file = open_sidecar(path)?;
    // A regular file: within the file size limit (past it, a write raises
    // SIGXFSZ and fails the compile), and never left with half a record,
    // onto which the next compile's record would be glued.
    let start = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    if let Some(start) = start {
        programl::fsutil::check_size_limit(start + text.len() as u64)?;
    }
    let mut written = 0;
    while written < text.len() {
        match file.write(&text.as_bytes()[written..]) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing")),
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Cut back what this call appended, where nothing was
                // appended after it (another compile's record stays).
                if let Some(start) = start {
                    if written > 0 && file.metadata().is_ok_and(|m| m.len() == start + written as u64) {
                        let _ = file.set_len(start);
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Opens a sidecar to append. A FIFO that no process reads is an error at
/// once: opened without `O_NONBLOCK` it would wait for a reader, and hang
/// the compiler, for ever. Once open (a regular file, or a FIFO with its
/// reader, as `sidecar=>(...)` is), writes block as usual.
fn open_sidecar(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().create(true).append(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENXIO) {
            std::io::Error::new(e.kind(), "a FIFO that no process reads (start its reader first)")
        } else {
            e
        }
    })?;
    // SAFETY: F_GETFL and F_SETFL on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use inkwell::context::Context;

    /// A FIFO without a reader is refused at once, naming why; with one, the
    /// lines reach it (the blocking open this replaced hung for ever).
    #[test]
    fn a_sidecar_fifo_needs_a_reader_and_never_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let lines = vec!["{\"a\":1}".to_string()];
        let err = super::append_lines(&fifo, &lines).unwrap_err();
        assert!(err.to_string().contains("a FIFO that no process reads"), "{err}");
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        // The reader opens when it is scheduled: retry until it has.
        let start = std::time::Instant::now();
        while let Err(e) = super::append_lines(&fifo, &lines) {
            assert!(start.elapsed().as_secs() < 10, "{e}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(reader.join().unwrap(), "{\"a\":1}\n");
        // A regular file is appended to as before.
        let file = dir.path().join("s.jsonl");
        super::append_lines(&file, &lines).unwrap();
        super::append_lines(&file, &lines).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);
    }
    use inkwell::memory_buffer::MemoryBuffer;

    const KERNELS: &str = r#"
define spir_kernel void @k(ptr %p) {
  ret void
}
define void @helper() {
  ret void
}
"#;

    fn annotate(module: &inkwell::module::Module<'_>, task: &str, classes: &[&str], probabilities: &[f32]) -> Result<usize, String> {
        let classes: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
        let entry =
            super::metadata::ModelEntry { task, format: "programl-model", version: 1, head: "graph", steps: 6, graph: "0123456789abcdef" };
        // SAFETY: the module lives through the call.
        unsafe { super::annotate_graph_level(module.as_mut_ptr(), &entry, &classes, probabilities) }
    }

    /// The metadata id (`!N`) that follows `prefix` in `ir`, alone.
    fn operand(ir: &str, prefix: &str) -> String {
        let at = ir.find(prefix).unwrap_or_else(|| panic!("no {prefix:?} in {ir}")) + prefix.len();
        let id: String = ir[at..].chars().skip(1).take_while(char::is_ascii_digit).collect();
        assert!(ir[at..].starts_with('!') && !id.is_empty(), "{prefix:?} is not followed by an id: {ir}");
        let tail = &ir[at + 1 + id.len()..];
        assert!(tail.starts_with(" {") || tail.starts_with('}'), "{prefix:?} names more than one node: {ir}");
        format!("!{id}")
    }

    fn annotated(task: &str, classes: &[&str], probabilities: &[f32]) -> (Result<usize, String>, String) {
        let context = Context::create();
        let buffer = MemoryBuffer::create_from_memory_range_copy(KERNELS.as_bytes(), "kernels");
        let module = context.create_module_from_ir(buffer).unwrap();
        let n = annotate(&module, task, classes, probabilities);
        (n, module.print_to_string().to_string())
    }

    /// Two kernels sharing a callee larger than both: the module's graph
    /// holds the callee once, the kernels' graphs together twice. Past
    /// `max_nodes` they are refused from the kernels' functions' nodes,
    /// before any kernel's graph is built; within it, built.
    #[test]
    fn kernels_sharing_a_callee_are_bounded_before_their_graphs_are_built() {
        let mut body = String::new();
        for i in 0..40 {
            body.push_str(&format!("  %v{} = add i32 %v{}, {}\n", i + 1, i, i + 1));
        }
        let ir = format!(
            "define i32 @shared(i32 %v0) {{\n{body}  ret i32 %v40\n}}\n\
             define spir_kernel void @a(ptr %p) {{\n  %x = call i32 @shared(i32 1)\n  store i32 %x, ptr %p\n  ret void\n}}\n\
             define spir_kernel void @b(ptr %p) {{\n  %x = call i32 @shared(i32 2)\n  store i32 %x, ptr %p\n  ret void\n}}\n"
        );
        let context = Context::create();
        let buffer = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "kernels");
        let module = context.create_module_from_ir(buffer).unwrap();
        let graph = programl::builder::build(&module, &programl::builder::BuildOptions::MODEL);
        // SAFETY: the module lives through the call.
        let kernels = unsafe { super::kernels(module.as_mut_ptr()) };
        assert_eq!(kernels.len(), 2);
        let mut p = super::params::parse("model=m").unwrap();
        let built = super::kernel_graphs(&graph, &kernels, &p).unwrap().expect("a graph per kernel");
        let together: usize = built.iter().map(|g| g.node_count()).sum();
        assert!(graph.node_count() < together, "module {} against kernels {together}", graph.node_count());
        p.max_nodes = graph.node_count();
        let refused = super::kernel_graphs(&graph, &kernels, &p).expect_err("refused");
        assert!(refused.contains("has at least ") && refused.contains("(its kernels' graphs together), more than max_nodes="), "{refused}");
    }

    /// NaN or an infinity from a model is no prediction: the module is
    /// left unchanged (found with a bundle whose `selector_value` was
    /// past f32's range, refused since by the bundle's checks).
    #[test]
    fn a_probability_that_is_not_finite_is_no_prediction() {
        assert!(super::not_finite(&[0.25, 0.75, 0.0, 1.0]).is_ok());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let e = super::not_finite(&[0.5, bad, 0.5]).unwrap_err();
            assert!(e.contains(&format!("a probability of {bad}")), "{e}");
        }
    }

    #[test]
    fn graph_level_annotations() {
        let (n, ir) = annotated("devmap", &["cpu", "gpu"], &[0.25, 0.75]);
        assert_eq!(n, Ok(1));
        let device = operand(&ir, "define spir_kernel void @k(ptr %p) !programl.device ");
        assert!(ir.contains("define void @helper() {"), "{ir}");
        assert!(ir.contains(&format!("{device} = !{{!\"gpu\", float 7.500000e-01}}")), "{ir}");
        let (n, ir) = annotated("poj104", &["a", "b", "c"], &[0.1, 0.2, 0.7]);
        assert_eq!(n, Ok(1));
        // The named node's one operand is the pair itself (what the reader reads).
        let class = operand(&ir, "!programl.class = !{");
        assert!(ir.contains(&format!("{class} = !{{!\"c\", float 0x3FE6666660000000}}")), "{ir}");
        assert!(annotated("devmap", &["cpu"], &[0.5, 0.5]).0.is_err());
    }

    #[test]
    fn graph_level_runs_write_the_schema_and_replace_their_own_annotation() {
        let context = Context::create();
        let buffer = MemoryBuffer::create_from_memory_range_copy(KERNELS.as_bytes(), "kernels");
        let module = context.create_module_from_ir(buffer).unwrap();
        annotate(&module, "poj104", &["a", "b"], &[0.9, 0.1]).unwrap();
        annotate(&module, "devmap-amd", &["cpu", "gpu"], &[0.25, 0.75]).unwrap();
        // Run again: the class is replaced, not appended; devmap's device stays.
        annotate(&module, "poj104", &["a", "b"], &[0.2, 0.8]).unwrap();
        let ir = module.print_to_string().to_string();
        assert!(ir.contains("!programl.schema = !{"), "{ir}");
        let model = ir.lines().find(|l| l.starts_with("!programl.model = ")).expect("!programl.model");
        assert_eq!(model.matches(", ").count(), 1, "two entries, devmap's and poj104's: {ir}");
        assert!(ir.contains(r#"!{!"poj104", !"programl-model", i64 1, !"graph", i64 6, !"0123456789abcdef"}"#), "{ir}");
        assert!(ir.contains(r#"!{!"devmap-amd", !"programl-model", i64 1, !"graph", i64 6, !"0123456789abcdef"}"#), "{ir}");
        let class = ir.lines().find(|l| l.starts_with("!programl.class = ")).expect("!programl.class");
        assert!(!class.contains(", "), "one class: {ir}");
        assert!(ir.contains(r#"!{!"b", float 0x3FE99999A0000000}"#) && !ir.contains(r#"!{!"a", float"#), "{ir}");
        assert!(ir.contains("!programl.device"), "{ir}");

        // A kernel holds one device decision and a module one class: a
        // second device-mapping bundle (devmap-nvidia after devmap-amd)
        // replaces the first's decision and its entry, and another
        // classification task the class and poj104's entry; every entry
        // left describes an annotation in the module.
        annotate(&module, "devmap-nvidia", &["cpu", "gpu"], &[0.9, 0.1]).unwrap();
        annotate(&module, "other-classes", &["x", "y"], &[0.3, 0.7]).unwrap();
        let ir = module.print_to_string().to_string();
        let model = ir.lines().find(|l| l.starts_with("!programl.model = ")).expect("!programl.model");
        assert_eq!(model.matches(", ").count(), 1, "two entries: {ir}");
        assert!(!ir.contains(r#"!{!"devmap-amd""#) && !ir.contains(r#"!{!"poj104""#), "{ir}");
        assert!(ir.contains(r#"!{!"devmap-nvidia""#) && ir.contains(r#"!{!"other-classes""#), "{ir}");
        assert!(ir.contains(r#"!{!"cpu", float 0x3FECCCCCC0000000}"#) && !ir.contains(r#"!{!"gpu", float"#), "{ir}");
        assert!(ir.contains(r#"!{!"y", float 0x3FE6666660000000}"#) && !ir.contains(r#"!{!"b", float"#), "{ir}");
    }
}
