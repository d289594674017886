//! The metadata schema (version [`SCHEMA`]) and its writer, through LLVM's
//! C API (inkwell's safe API panics on metadata).
//!
//! Module level (named metadata):
//! - `!programl.schema = !{!N}`, `!N = !{!"1"}`: the schema version;
//! - `!programl.model = !{!M, ...}`, one entry per task annotated,
//!   `!M = !{!"TASK", !"programl-model", i64 FORMAT_VERSION, !"HEAD", i64 STEPS, !"GRAPH"}`:
//!   the bundle's task, format and version, its head, the steps used, and a
//!   fingerprint of the graph whose node ids the annotations use
//!   ([`graph_fingerprint`]).
//!
//! Instructions:
//! - `!programl.node !{i64 ID}`: its node id in the module's graph (paper
//!   mode, `programl graph`'s numbering), on every instruction that is a
//!   root or carries a prediction (or anchors one, below);
//! - `!programl.value !{i64 ID}`: the variable node of its result, on those
//!   of them that have one;
//! - `!programl.TASK !{i64 ROOT, float P, ...}`: on each instruction
//!   predicted positive for some root (P > 0.5), the pairs of root node id
//!   and probability of the positive class, by root id. For liveness, whose
//!   positives are variables, on the instruction defining the variable.
//!
//! Functions:
//! - `!programl.TASK.roots !{i64 ROOT, ...}`: the roots in this function;
//! - `!programl.args !{i64 ID, ...}`: the variable node of each argument in
//!   argument order, `-1` for an argument without uses (it has no node), on
//!   every function that has arguments and an annotation;
//! - `!programl.liveness.args !{i64 ROOT, i64 ARG, float P, ...}`: liveness
//!   predictions for arguments, as (root, argument index, probability)
//!   triples;
//! - `!programl.device !{!"gpu", float P}` (or `"cpu"`): graph-level device
//!   mapping, on each kernel, P the probability of the device named (in a
//!   module of several kernels, each decided on its own graph).
//!
//! Module-level classification: `!programl.class = !{!C}`, `!C = !{!"CLASS", float P}`.
//!
//! Graph-level runs write the same `!programl.schema` and a
//! `!programl.model` entry (head `graph`, the fingerprint of the module's
//! graph), and no node anchors.
//!
//! Marking roots (input, `roots=marked`): `!programl.root !{}` on an
//! instruction (for datadep, whose roots are variables, the instruction
//! whose result is the root).
//!
//! Before writing, [`clear`] removes the task's earlier annotations, or all
//! of them if the module's graph changed since (the `!programl.root` marks
//! stay): several tasks accumulate in one module, and a module annotated at
//! compile time and again by full LTO over the linked program carries the
//! link's annotations only.

use std::ffi::{c_char, CString};

use inkwell::llvm_sys::core::*;
use inkwell::llvm_sys::prelude::*;
use programl::analysis::Task;

use super::anchor;

/// The schema version, `!programl.schema`.
pub const SCHEMA: &str = "1";

pub const NODE: &str = "programl.node";
pub const VALUE: &str = "programl.value";
pub const ARGS: &str = "programl.args";
pub const ROOT_MARK: &str = "programl.root";
pub const DEVICE: &str = "programl.device";
pub const SCHEMA_NAMED: &str = "programl.schema";
pub const MODEL_NAMED: &str = "programl.model";
pub const CLASS_NAMED: &str = "programl.class";

/// `programl.TASK`.
pub fn task_kind(task: Task) -> String {
    format!("programl.{}", task.name())
}

/// `programl.TASK.roots`.
pub fn roots_kind(task: Task) -> String {
    format!("programl.{}.roots", task.name())
}

/// `programl.TASK.args` (liveness only).
pub fn args_kind(task: Task) -> String {
    format!("programl.{}.args", task.name())
}

extern "C" {
    /// passes/src/shim.cc: `Module::eraseNamedMetadata`, which the C API
    /// lacks.
    fn programl_passes_erase_named_metadata(module: LLVMModuleRef, name: *const c_char);
}

/// Builds metadata in one module's context.
pub struct Writer {
    module: LLVMModuleRef,
    context: LLVMContextRef,
    i64_type: LLVMTypeRef,
    f32_type: LLVMTypeRef,
}

impl Writer {
    /// # Safety
    /// `module` is valid and outlives the writer.
    pub unsafe fn new(module: LLVMModuleRef) -> Writer {
        let context = LLVMGetModuleContext(module);
        Writer { module, context, i64_type: LLVMInt64TypeInContext(context), f32_type: LLVMFloatTypeInContext(context) }
    }

    pub fn kind(&self, name: &str) -> u32 {
        // SAFETY: a valid context and a (pointer, length) string.
        unsafe { LLVMGetMDKindIDInContext(self.context, name.as_ptr().cast(), name.len() as u32) }
    }

    pub fn int(&self, v: i64) -> LLVMMetadataRef {
        unsafe { LLVMValueAsMetadata(LLVMConstInt(self.i64_type, v as u64, 1)) }
    }

    pub fn real(&self, p: f32) -> LLVMMetadataRef {
        unsafe { LLVMValueAsMetadata(LLVMConstReal(self.f32_type, f64::from(p))) }
    }

    pub fn string(&self, s: &str) -> LLVMMetadataRef {
        unsafe { LLVMMDStringInContext2(self.context, s.as_ptr().cast(), s.len()) }
    }

    pub fn node(&self, operands: &[LLVMMetadataRef]) -> LLVMMetadataRef {
        let mut ops = operands.to_vec();
        unsafe { LLVMMDNodeInContext2(self.context, ops.as_mut_ptr(), ops.len()) }
    }

    pub fn ints(&self, values: impl IntoIterator<Item = i64>) -> LLVMMetadataRef {
        let ops: Vec<_> = values.into_iter().map(|v| self.int(v)).collect();
        self.node(&ops)
    }

    /// # Safety
    /// `inst` is an instruction of the module.
    pub unsafe fn set_inst(&self, inst: LLVMValueRef, kind: u32, node: LLVMMetadataRef) {
        LLVMSetMetadata(inst, kind, LLVMMetadataAsValue(self.context, node));
    }

    /// # Safety
    /// `f` is a function of the module.
    pub unsafe fn set_function(&self, f: LLVMValueRef, kind: u32, node: LLVMMetadataRef) {
        LLVMGlobalSetMetadata(f, kind, node);
    }

    /// Appends a node of `operands` (made by this writer) to the named
    /// metadata `name`.
    pub fn add_named(&self, name: &str, operands: &[LLVMMetadataRef]) {
        let c = CString::new(name).expect("no NUL in metadata names");
        let node = self.node(operands);
        unsafe { LLVMAddNamedMetadataOperand(self.module, c.as_ptr(), LLVMMetadataAsValue(self.context, node)) };
    }

    /// Whether `inst` carries metadata of `kind`.
    ///
    /// # Safety
    /// `inst` is an instruction.
    pub unsafe fn has(&self, inst: LLVMValueRef, kind: u32) -> bool {
        !LLVMGetMetadata(inst, kind).is_null()
    }
}

/// A fingerprint of the graph the node ids refer to: node kinds and texts
/// and edges, hashed (FNV-1a), as 16 hex digits. Annotations of the same
/// module agree on it; a module whose graph changed (full LTO links
/// modules together) does not.
pub fn graph_fingerprint(graph: &programl::ProgramGraph) -> String {
    use petgraph::visit::EdgeRef;
    let mut h = programl::hash::Fnv1a::default();
    h.write(&(graph.graph.node_count() as u64).to_le_bytes());
    for n in graph.graph.node_weights() {
        h.write_u8(n.kind as u8);
        h.write(n.text.as_bytes());
        h.write_u8(0xff);
    }
    for e in graph.graph.edge_references() {
        h.write_u8(e.weight().flow as u8);
        for v in [e.weight().position, e.source().index() as u32, e.target().index() as u32] {
            h.write(&v.to_le_bytes());
        }
    }
    format!("{:016x}", h.finish())
}

/// The `!programl.model` entries of `module`, as their operands' texts
/// (strings as themselves, integers in decimal).
///
/// # Safety
/// `module` is valid.
pub unsafe fn model_entries(module: LLVMModuleRef) -> Vec<Vec<String>> {
    let c = CString::new(MODEL_NAMED).expect("no NUL");
    let n = LLVMGetNamedMetadataNumOperands(module, c.as_ptr()) as usize;
    let mut nodes = vec![std::ptr::null_mut(); n];
    if n > 0 {
        LLVMGetNamedMetadataOperands(module, c.as_ptr(), nodes.as_mut_ptr());
    }
    nodes
        .into_iter()
        .map(|node| {
            let k = LLVMGetMDNodeNumOperands(node) as usize;
            let mut ops = vec![std::ptr::null_mut(); k];
            if k > 0 {
                LLVMGetMDNodeOperands(node, ops.as_mut_ptr());
            }
            ops.into_iter()
                .map(|op| {
                    if op.is_null() {
                        String::new()
                    } else if !LLVMIsAConstantInt(op).is_null() {
                        LLVMConstIntGetSExtValue(op).to_string()
                    } else {
                        let mut len = 0u32;
                        let p = LLVMGetMDString(op, &mut len);
                        if p.is_null() {
                            String::new()
                        } else {
                            String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len as usize)).into_owned()
                        }
                    }
                })
                .collect()
        })
        .collect()
}

/// Index of the head (`node`, `graph`) in a `!programl.model` entry.
pub const MODEL_HEAD: usize = 3;
/// Index of the graph fingerprint in a `!programl.model` entry.
pub const MODEL_GRAPH: usize = 5;

/// What one run annotates, for [`clear`].
#[derive(Clone, Copy, Debug)]
pub enum Annotated<'a> {
    /// A node-level task: `!programl.TASK` on instructions, `.roots` and
    /// `.args` on functions.
    Node(Task),
    /// A graph-level bundle's task (its config's `task`): device mapping
    /// (`devmap`, `devmap-PLATFORM`) writes `!programl.device` on kernels,
    /// any other task the named `!programl.class`.
    Graph(&'a str),
}

impl Annotated<'_> {
    pub fn name(&self) -> &str {
        match self {
            Annotated::Node(t) => t.name(),
            Annotated::Graph(name) => name,
        }
    }
}

/// Whether a graph-level task is device mapping (annotates kernels) rather
/// than a module-level classification.
pub fn is_device_mapping(task: &str) -> bool {
    task == "devmap" || task.starts_with("devmap-")
}

/// Makes room for `what`'s annotations of the graph `fingerprint`, and
/// returns the `!programl.model` entries to keep (other tasks on the same
/// graph).
///
/// If every earlier entry was written for this same graph, only this
/// task's annotations are removed (for a node-level task `!programl.TASK`
/// on instructions, `!programl.TASK.roots` and `.args` on functions; for a
/// graph-level one `!programl.device` or `!programl.class`): several
/// tasks' predictions accumulate in one module, and the node and value
/// anchors, which depend on the graph alone, stay. Otherwise (the module's
/// graph changed, e.g. full LTO linked annotated modules together) every
/// annotation of the schema goes: its node ids mean nothing any more. The
/// `!programl.root` marks are input and always stay.
///
/// # Safety
/// `module` is valid.
pub unsafe fn clear(module: LLVMModuleRef, what: Annotated<'_>, fingerprint: &str) -> Vec<Vec<String>> {
    let w = Writer::new(module);
    // Kind ids in a fixed order, so attachments print in this order in a
    // fresh context (LLVM prints them by kind id).
    for name in [NODE, VALUE, ARGS, DEVICE] {
        w.kind(name);
    }
    for t in Task::ALL {
        w.kind(&task_kind(t));
        w.kind(&roots_kind(t));
        w.kind(&args_kind(t));
    }
    let entries = model_entries(module);
    let same_graph = entries.iter().all(|e| e.get(MODEL_GRAPH).map(String::as_str) == Some(fingerprint));
    // The entries whose annotations this run's replace: its own task's,
    // and, as a function holds one `!programl.device` and a module one
    // `!programl.class`, another device-mapping task's (devmap-amd, then
    // devmap-nvidia) or another graph classification's. Their entries go
    // with their annotations, so every entry kept describes what is there.
    let replaced = |e: &Vec<String>| -> bool {
        let task = e.first().map(String::as_str).unwrap_or("");
        let graph_head = e.get(MODEL_HEAD).map(String::as_str) == Some("graph");
        task == what.name()
            || match what {
                Annotated::Graph(t) if is_device_mapping(t) => is_device_mapping(task),
                Annotated::Graph(_) => graph_head && !is_device_mapping(task),
                Annotated::Node(_) => false,
            }
    };
    let keep: Vec<Vec<String>> = if same_graph {
        let (gone, kept): (Vec<Vec<String>>, Vec<Vec<String>>) = entries.into_iter().partition(|e| replaced(e));
        let (kind, holder) = if matches!(what, Annotated::Graph(t) if is_device_mapping(t)) {
            ("!programl.device", "kernel")
        } else {
            ("!programl.class", "module")
        };
        for other in gone.iter().filter_map(|e| e.first()).filter(|t| *t != what.name()) {
            log::warn!(target: super::params::PASS_NAME, "{}'s annotation replaces {other}'s (one {kind} a {holder})", what.name());
        }
        kept
    } else {
        Vec::new()
    };
    let mut inst_kinds = Vec::new();
    let mut function_kinds = Vec::new();
    let mut names = vec![SCHEMA_NAMED, MODEL_NAMED];
    if same_graph {
        match what {
            Annotated::Node(t) => {
                inst_kinds.push(w.kind(&task_kind(t)));
                function_kinds.extend([w.kind(&roots_kind(t)), w.kind(&args_kind(t))]);
            }
            Annotated::Graph(task) if is_device_mapping(task) => function_kinds.push(w.kind(DEVICE)),
            Annotated::Graph(_) => names.push(CLASS_NAMED),
        }
    } else {
        inst_kinds.extend([w.kind(NODE), w.kind(VALUE)]);
        function_kinds.extend([w.kind(ARGS), w.kind(DEVICE)]);
        for t in Task::ALL {
            inst_kinds.push(w.kind(&task_kind(t)));
            function_kinds.push(w.kind(&roots_kind(t)));
            function_kinds.push(w.kind(&args_kind(t)));
        }
        names.push(CLASS_NAMED);
    }
    for f in anchor::functions(module) {
        for &k in &function_kinds {
            LLVMGlobalEraseMetadata(f, k);
        }
        if LLVMIsDeclaration(f) != 0 || inst_kinds.is_empty() {
            continue;
        }
        for inst in anchor::instructions(f) {
            for &k in &inst_kinds {
                if !LLVMGetMetadata(inst, k).is_null() {
                    LLVMSetMetadata(inst, k, std::ptr::null_mut());
                }
            }
        }
    }
    for name in names {
        let c = CString::new(name).expect("no NUL");
        programl_passes_erase_named_metadata(module, c.as_ptr());
    }
    keep
}

/// One `!programl.model` entry:
/// `!{!"TASK", !"FORMAT", i64 VERSION, !"HEAD", i64 STEPS, !"GRAPH"}`.
#[derive(Clone, Copy, Debug)]
pub struct ModelEntry<'a> {
    pub task: &'a str,
    pub format: &'a str,
    pub version: i64,
    pub head: &'a str,
    pub steps: i64,
    /// [`graph_fingerprint`] of the module's graph.
    pub graph: &'a str,
}

/// Writes the module-level header after [`clear`]: `!programl.schema`, the
/// `kept` entries of other tasks, and this run's `!programl.model` entry.
pub fn write_header(w: &Writer, kept: &[Vec<String>], entry: &ModelEntry<'_>) {
    let s = w.string(SCHEMA);
    w.add_named(SCHEMA_NAMED, &[s]);
    for old in kept {
        // Another task's entry: strings, except the version and steps.
        let ops: Vec<_> = old
            .iter()
            .enumerate()
            .map(|(i, v)| match (i, v.parse::<i64>()) {
                (2 | 4, Ok(n)) => w.int(n),
                _ => w.string(v),
            })
            .collect();
        w.add_named(MODEL_NAMED, &ops);
    }
    let e = entry;
    let model = [w.string(e.task), w.string(e.format), w.int(e.version), w.string(e.head), w.int(e.steps), w.string(e.graph)];
    w.add_named(MODEL_NAMED, &model);
}
